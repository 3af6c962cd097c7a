"""The verdict: exit 0 when every check is within budget, 1 when any is over budget, errored or
regressed against a baseline (SPEC section 4)."""
from __future__ import annotations

import math

import pandas as pd

REGRESSION_MARGIN = 0.25       # worse by more than 25 % of the baseline value ...
REGRESSION_FLOOR = 0.25        # ... and by more than 25 % of the budget (a 0 baseline stays passable)
KEY = ["case_id", "impl", "output", "reference"]


def metric_value(df: pd.DataFrame) -> pd.Series:
    return df["max_ulp"].where(df["budget_metric"] == "ulp", df["max_scaled_err"])


def regression_threshold(base: float, budget: float) -> float:
    return base + max(REGRESSION_MARGIN * base, REGRESSION_FLOOR * budget)


def apply_baseline(df: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """Mark checks that got worse than the baseline beyond margin and floor; they fail."""
    b = baseline.drop_duplicates(KEY, keep="last")
    b = b.assign(baseline_value=metric_value(b))[KEY + ["baseline_value"]]
    out = df.drop(columns=[c for c in ("baseline_value", "regressed") if c in df.columns]).merge(b, on=KEY, how="left")
    now = metric_value(out)
    thr = [regression_threshold(bv, bu) if not (math.isnan(bv) or math.isnan(bu)) else math.inf
           for bv, bu in zip(out["baseline_value"], out["budget"])]
    regressed = (now > pd.Series(thr, index=out.index)) & (out["status"] == "pass")
    out["regressed"] = regressed
    out["reason"] = out["reason"].astype(object).where(out["reason"].notna(), "")
    out.loc[regressed, "status"] = "fail"
    out.loc[regressed, "reason"] = [
        f"regressed: {n:.4g} vs baseline {b:.4g} (threshold {t:.4g})"
        for n, b, t in zip(now[regressed], out.loc[regressed, "baseline_value"],
                           pd.Series(thr, index=out.index)[regressed])]
    return out


def verdict(df: pd.DataFrame) -> tuple[int, list[str]]:
    if df.empty:
        return 1, ["harness: no checks ran"]
    bad = df[df["status"] != "pass"]
    counts = df["status"].value_counts().to_dict()
    lines = [f"harness: {counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
             f"{counts.get('error', 0)} error"]
    for _, r in bad.head(20).iterrows():
        lines.append(f"  {r['status'].upper():5s} {r['impl']} {r['output']} vs {r['reference']}: "
                     f"{r['label']}: {r['reason']}")
    if len(bad) > 20:
        lines.append(f"  ... and {len(bad) - 20} more (results.csv)")
    return (0 if bad.empty else 1), lines
