"""The end-of-run table printed by `harness run`: reports.summary.summarize, formatted."""
from __future__ import annotations

import pandas as pd

from harness.reports.summary import summarize

SHOWN = ["impl", "out_dtype", "output", "reference", "cases", "failures", "errors", "max_ulp",
         "max_scaled_err", "budget"]


def summary_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "(no results)"
    return summarize(df)[SHOWN].to_string(index=False, float_format=lambda v: f"{v:.3g}")
