"""The verdict (SPEC §4): exit 0 when every check is within budget (skips are neither pass nor fail),
1 when any is over budget, errored or regressed against a baseline, and 1 for an implementation
none of whose checks was measured (every case skipped: it verified nothing, and must not pass by
declining everything). The checks that count are those against the exact value and the declared
model; `harness identify`'s checks against the other models say which model fits, and have their
own verdict. Whether the sweep finished every planned pair is the runner's to say (an unfinished
sweep never exits 0: harness.runner).

Failures are listed each pair's most severe check first (severity): a check that measured nothing
usable (an error, a contract problem, a NaN reference, a non-finite output), then the one furthest
over its budget, a model reference before the exact value."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis.explain import reason
from harness.analysis.result import Finding
from harness.reports.summary import budget_ratio, gated, normalize, pair_notes, worst_value

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
    out["fail_kind"] = out["fail_kind"].astype(object).where(out["fail_kind"].notna(), "") \
        if "fail_kind" in out.columns else ""
    was = out["fail_kind"] == "regressed"
    out.loc[was, ["status", "fail_kind", "reason"]] = ["pass", "", ""]     # an earlier invocation's verdict
    now = worst_value(out)
    budget = pd.to_numeric(out["budget"], errors="coerce")
    thr = pd.Series([regression_threshold(bv, bu) if not (math.isnan(bv) or math.isnan(bu)) else math.inf
                     for bv, bu in zip(out["baseline_value"], budget)], index=out.index)
    regressed = (now > thr) & (out["status"] == "pass")
    out["regressed"] = regressed
    out["reason"] = out["reason"].astype(object).where(out["reason"].notna(), "")
    out.loc[regressed, ["status", "fail_kind"]] = ["fail", "regressed"]
    out.loc[regressed, "reason"] = [reason(o, r, Finding("regressed", value=n, other=b, limit=t))
                                    for o, r, n, b, t in zip(out.loc[regressed, "output"],
                                                             out.loc[regressed, "reference"], now[regressed],
                                                             out.loc[regressed, "baseline_value"], thr[regressed])]
    return out


# Fail kinds whose check has no usable measurement: ranked above every over-budget check.
UNMEASURED = ("error", "contract", "nan_reference", "non_finite")


def by_severity(bad: pd.DataFrame) -> pd.DataFrame:
    """Failing rows, the most severe check of each pair first (pairs in the frame's order), then the
    rest, each pair's in order of severity: unmeasured (UNMEASURED kinds), then furthest over its
    budget (worst / budget), a model reference before the exact value."""
    if bad.empty:
        return bad
    kind = bad["fail_kind"].astype(str) if "fail_kind" in bad.columns else pd.Series("", index=bad.index)
    ratio = budget_ratio(normalize(bad)).fillna(math.inf)
    ratio = ratio.where(~(kind.isin(UNMEASURED) | (bad["status"] == "error")), math.inf)
    is_exact = (bad["reference"].astype(str) == "exact").astype(int)
    pair = pd.Series(list(zip(bad["case_id"], bad["impl"])), index=bad.index)
    first_seen = {p: i for i, p in reversed(list(enumerate(pair)))}
    d = bad.assign(_pair=pair.map(first_seen), _ratio=-ratio, _exact=is_exact, _i=np.arange(len(bad)))
    d = d.sort_values(["_pair", "_ratio", "_exact", "_i"], kind="stable")
    d = d.assign(_rest=d.groupby("_pair").cumcount() > 0).sort_values(["_rest", "_pair", "_ratio", "_exact", "_i"],
                                                                      kind="stable")
    return d.drop(columns=["_pair", "_ratio", "_exact", "_i", "_rest"])


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
    other = int((~gated(df)).sum())
    df = df[gated(df)]
    status = df["status"].astype(str)
    counts = status.value_counts().to_dict()
    lines = [f"harness: {counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
             f"{counts.get('error', 0)} error, {counts.get('skip', 0)} skip"
             + (f" (and {other} checks against models not declared, which say which model fits)" if other else "")]
    bad = by_severity(df[~status.isin(["pass", "skip"])])
    for _, r in bad.head(SHOWN).iterrows():
        lines.append(failure_line(r))
    if len(bad) > SHOWN:
        lines.append(f"  ... and {len(bad) - SHOWN} more (results.csv)")
    measured = set(df.loc[status.isin(["pass", "fail"]), "impl"].astype(str))
    unverified = [i for i in dict.fromkeys(df["impl"].astype(str)) if i not in measured and
                  (status[df["impl"].astype(str) == i] == "skip").all()]
    for impl in unverified:
        lines.append(f"harness: {impl}: every case skipped, no check measured: nothing was verified")
    lines += [f"harness: note: {n}" for n in pair_notes(df)]
    return (0 if bad.empty and not unverified else 1), lines
