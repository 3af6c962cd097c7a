"""The end-of-run table: implementation x dtype x output, pass/fail counts and the worst ULP."""
from __future__ import annotations

import pandas as pd


def summary_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "(no results)"
    g = df.groupby(["impl", "out_dtype", "output", "reference"], sort=True)
    t = pd.DataFrame({
        "pass": g["status"].apply(lambda s: int((s == "pass").sum())),
        "fail": g["status"].apply(lambda s: int((s == "fail").sum())),
        "error": g["status"].apply(lambda s: int((s == "error").sum())),
        "max_ulp": g["max_ulp"].max(),
        "max_scaled": g["max_scaled_err"].max(),
        "budget": g["budget"].max(),
    }).reset_index()
    return t.to_string(index=False, float_format=lambda v: f"{v:.3g}")
