"""Which rounding model an implementation realises, from its rows against model references: the one
home of the rule `harness identify` prints and the report's section shows. A model fits an output
(of an output dtype) when every measured check against it passed; an implementation realises the
models that fit all its outputs."""
from __future__ import annotations

import pandas as pd


def model_fits(df: pd.DataFrame) -> pd.DataFrame:
    """Per (impl, out_dtype, output, model): checks, passed, ok — from the pass/fail rows against a
    model reference (errors and skips measure nothing)."""
    m = df[(df["reference_kind"].astype(str) == "model") & df["status"].isin(["pass", "fail"])]
    m = m.assign(model=m["reference_model"].astype(str), _pass=m["status"] == "pass")
    fit = m.groupby(["impl", "out_dtype", "output", "model"], sort=False).agg(
        checks=("_pass", "size"), passed=("_pass", "sum")).reset_index()
    return fit.assign(ok=fit["checks"] == fit["passed"])


def realised(fit: pd.DataFrame) -> tuple[list[str], list[str]]:
    """From one implementation's fits: the models every output fits, and the outputs ("dtype output")
    that no model fits."""
    whole = [m for m, ok in fit.groupby("model", sort=True)["ok"].all().items() if ok]
    per = fit.groupby(["out_dtype", "output"], sort=False)["ok"].any()
    return whole, [f"{dt} {out}" for (dt, out), ok in per.items() if not ok]


def verdict_line(impl: str, fit: pd.DataFrame, declared: str = "") -> str:
    """`IMPL realises MODEL`, or `IMPL realises no single declared model: ...` (SPEC §4)."""
    whole, none = realised(fit)
    if whole:
        line = f"{impl} realises {' = '.join(whole)}" + \
            (" (the models coincide on these cases)" if len(whole) > 1 else "")
        if declared and declared not in whole:
            line += f"; it declares {declared}"
        return line
    return f"{impl} realises no single declared model: " + \
        (f"{', '.join(none)} fit none" if none else "each output fits some model, no one model fits all")
