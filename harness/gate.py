"""The verdict (SPEC §4): exit 0 when every check is within budget (skips are neither pass nor fail),
1 when any is over budget, errored or regressed against a baseline, and 1 for an implementation
none of whose checks was measured (every case skipped: it verified nothing, and must not pass by
declining everything). Whether the sweep finished
every planned pair is the runner's to say (an unfinished sweep never exits 0: harness.runner)."""
from __future__ import annotations

import math

import pandas as pd

from harness.reports.summary import worst_value

REGRESSION_MARGIN = 0.25       # worse by more than 25 % of the baseline value ...
REGRESSION_FLOOR = 0.25        # ... and by more than 25 % of the budget (a 0 baseline stays passable)
KEY = ["case_id", "impl", "output", "reference"]
SHOWN = 20                     # FAIL / ERROR lines printed; all are in results.csv


def regression_threshold(base: float, budget: float) -> float:
    return base + max(REGRESSION_MARGIN * base, REGRESSION_FLOOR * budget)


def apply_baseline(df: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """Recompute each passing check's regression against the baseline (same key): worse beyond
    margin and floor fails. Any earlier baseline verdict in `df` is replaced, not stacked."""
    b = baseline.drop_duplicates(KEY, keep="last")
    b = b.assign(baseline_value=worst_value(b))[KEY + ["baseline_value"]]
    out = df.drop(columns=[c for c in ("baseline_value", "regressed") if c in df.columns]).merge(b, on=KEY, how="left")
    was = out["reason"].astype(str).str.startswith("regressed: ")
    out.loc[was, "status"] = "pass"                 # a regression verdict of an earlier invocation
    out.loc[was, "reason"] = ""
    now = worst_value(out)
    budget = pd.to_numeric(out["budget"], errors="coerce")
    thr = pd.Series([regression_threshold(bv, bu) if not (math.isnan(bv) or math.isnan(bu)) else math.inf
                     for bv, bu in zip(out["baseline_value"], budget)], index=out.index)
    regressed = (now > thr) & (out["status"] == "pass")
    out["regressed"] = regressed
    out["reason"] = out["reason"].astype(object).where(out["reason"].notna(), "")
    out.loc[regressed, "status"] = "fail"
    out.loc[regressed, "reason"] = [f"regressed: {n:.4g} vs baseline {b:.4g} (threshold {t:.4g})"
                                    for n, b, t in zip(now[regressed], out.loc[regressed, "baseline_value"],
                                                       thr[regressed])]
    return out


def failure_line(r) -> str:
    """One FAIL / ERROR line of the CI log: enough to reproduce it (case id, check, reason, the worst
    element's inputs in hex, the replay command)."""
    line = (f"  {str(r['status']).upper():5s} {r['impl']} {r['case_id']} {r['output']} vs {r['reference']}: "
            f"{r['label']}: {r['reason']}")
    inputs = r.get("worst_inputs", "")
    if isinstance(inputs, str) and inputs and r["status"] == "fail":
        line += f"\n        worst element: {inputs}"
    replay = r.get("replay", "")
    if isinstance(replay, str) and replay:
        line += f"\n        replay: {replay}"
    return line


def verdict(df: pd.DataFrame) -> tuple[int, list[str]]:
    if df.empty:
        return 1, ["harness: no checks ran"]
    status = df["status"].astype(str)
    counts = status.value_counts().to_dict()
    lines = [f"harness: {counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
             f"{counts.get('error', 0)} error, {counts.get('skip', 0)} skip"]
    bad = df[~status.isin(["pass", "skip"])]
    for _, r in bad.head(SHOWN).iterrows():
        lines.append(failure_line(r))
    if len(bad) > SHOWN:
        lines.append(f"  ... and {len(bad) - SHOWN} more (results.csv)")
    measured = set(df.loc[status.isin(["pass", "fail"]), "impl"].astype(str))
    unverified = [i for i in dict.fromkeys(df["impl"].astype(str)) if i not in measured and
                  (status[df["impl"].astype(str) == i] == "skip").all()]
    for impl in unverified:
        lines.append(f"harness: {impl}: every case skipped, no check measured: nothing was verified")
    return (0 if bad.empty and not unverified else 1), lines
