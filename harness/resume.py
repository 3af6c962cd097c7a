"""`--resume`: what a sweep keeps of an earlier run into its directory, and the kept rows' verdicts
under the current budgets and policy.

A pair is kept when it is complete (every check of its implementation), of this invocation's cases,
implementations, device and math classes, of this schema and harness version, and produced by what this
invocation would run: the same --impl text (impl_spec) and the same source (impl_hash,
harness.impls.source) — a changed implementation reruns. An `error` pair is finished (a case that
kills its worker is not retried forever).

Re-gating reads columns, never words: rows whose fail_kind depends on the numbers and a policy
(harness.analysis.result.REGATED: pass, over_budget, not_repeatable, regressed) get their budget,
status, fail_kind and reason again from the measured values; other failures, errors and skips stay
as they were. Replay commands name this invocation's suite and budget file — for the same
implementation, since only its rows are kept."""
from __future__ import annotations

import math

import pandas as pd

from harness.analysis.check import VERSION, budget_for, references_of, repeat_finding
from harness.analysis.explain import reason
from harness.analysis.result import REGATED, Finding, Repeat
from harness.cases.case import Case
from harness.cases.generate import act_format
from harness.impls.base import Implementation
from harness.pipeline.settings import Settings, replay_of, spec_of
from harness.references.formats import fmt_of
from harness.references.errors import UsageError
from harness.references.metrics import get
from harness.reports.rundir import PAIR_TIMING, RESULTS
from harness.reports.schema import CHECKED_OUTPUTS, SCHEMA_VERSION, missing_columns
from harness.reports.trust import problem


def expected_checks(impls: list[Implementation], models=()) -> dict[str, set]:
    """Per implementation, the (output, reference label) of every row one of its pairs has."""
    return {i.name: {(o, ref.label) for o in CHECKED_OUTPUTS for ref in references_of(i, models)} for i in impls}


def _index(text) -> tuple[int, ...]:
    """An element index column ("2,14") as a tuple."""
    return tuple(int(v) for v in str(text).split(",") if v.strip().lstrip("-").isdigit())


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _repeat(r) -> Repeat | None:
    """A row's repeat columns (None where the output was not called again)."""
    if str(r.get("repeatable", "")).strip() in ("", "nan"):
        return None
    count = _float(r.get("differing_elements"))
    return Repeat(0 if math.isnan(count) else int(count), _index(r.get("differing_index", "")),
                  _float(r.get("differing_first")), _float(r.get("differing_later")),
                  str(r.get("repeat_error", "") or ""))


def regate(df: pd.DataFrame, cases: dict[str, Case], impls: dict[str, Implementation], s: Settings) -> pd.DataFrame:
    """Kept rows' verdicts under the current budgets and --allow-nondeterministic, their replay
    commands this invocation's (see the module docstring)."""
    df = df.copy()
    for col in ("budget_metric", "budget_source", "reason", "replay", "suite", "fail_kind", "status"):
        if col in df.columns:
            df[col] = df[col].astype(object)
    for i, r in df.iterrows():
        case, impl = cases[r["case_id"]], impls[r["impl"]]
        df.at[i, "replay"] = replay_of(case, impl, s)
        df.at[i, "suite"] = s.suite_ref
        kind = str(r.get("fail_kind", "") or "")
        if r["status"] not in ("pass", "fail") or kind not in REGATED:
            continue
        ref = {x.label: x for x in references_of(impl, s.models)}[r["reference"]]
        act = act_format(case, impl.act_follows)
        b = budget_for(case, impl, r["output"], ref.kind, fmt_of(r["out_dtype"]), act, s.overrides, s.override_path)
        value = _float(r.get(get(b.metric).column))
        if not (b.metric == r.get("budget_metric") and b.value == _float(r.get("budget"))):
            if "count_over" in df.columns:
                df.at[i, "count_over"] = math.nan          # counted against the old budget
        df.at[i, "budget_metric"], df.at[i, "budget"], df.at[i, "budget_source"] = b.metric, b.value, b.source
        finding = None
        if not value <= b.value:                            # NaN fails
            finding = Finding("over_budget", _index(r.get("worst_index", "")), value, limit=b.value, metric=b.metric)
        elif not s.allow_nondeterministic:
            finding = repeat_finding(_repeat(r))
        df.at[i, "status"] = "pass" if finding is None else "fail"
        df.at[i, "fail_kind"] = "" if finding is None else finding.kind
        df.at[i, "reason"] = reason(r["output"], r["reference"], finding)
    return df


def resume_rows(sw, log=None) -> pd.DataFrame:
    """What --resume keeps of the run directory of Sweep `sw`, re-gated; results.csv and
    pair-timing.csv are rewritten to it. `log` hears how many finished pairs it does not keep."""
    rd, s = sw.rundir, sw.settings
    kept = rd.repair_for_resume(expected_checks(sw.impls, s.models))
    found = kept.attrs.get("pairs_found", 0)
    ours = "schema_version" in kept.columns and bool((pd.to_numeric(kept["schema_version"], errors="coerce")
                                                      == SCHEMA_VERSION).any())     # an older schema's rows rerun
    missing = missing_columns(kept) if ours else []
    why = (f"no column {missing[0]!r} of schema {SCHEMA_VERSION}: not a results.csv this harness wrote whole"
           if missing else problem(kept) if len(kept) else None)  # re-gating would blame the implementation
    if why:
        raise UsageError(f"{rd.results}: {why}; --resume keeps nothing of a file it cannot trust (move it away)")
    if len(kept):
        impls = {i.name: i for i in sw.impls}
        planned = {(c.case_id, i.name) for c in sw.cases for i in sw.impls}

        def column(name):
            return kept[name].astype(str) if name in kept.columns else pd.Series("", index=kept.index)
        same = pd.Series([(c, i) in planned for c, i in zip(kept["case_id"], kept["impl"])], index=kept.index)
        same &= column("device") == s.device
        same &= column("math") == kept["impl"].map({i.name: i.math.label for i in sw.impls})  # the class judged at
        same &= pd.to_numeric(column("schema_version"), errors="coerce") == SCHEMA_VERSION
        same &= column("harness_version") == VERSION
        ran = [(spec_of(impls[n], s), s.impl_hashes.get(n, "")) if n in impls else None for n in kept["impl"]]
        same &= pd.Series([w is not None and w[1] != "" and (sp, h) == w
                           for w, sp, h in zip(ran, column("impl_spec"), column("impl_hash"))], index=kept.index)
        bad = {k for k, ok in zip(zip(kept["case_id"], kept["impl"]), same) if not ok}
        kept = kept[[k not in bad for k in zip(kept["case_id"], kept["impl"])]]
    kept_pairs = len(set(zip(kept["case_id"], kept["impl"]))) if len(kept) else 0
    if log and found > kept_pairs:
        log(f"harness: --resume: {found - kept_pairs} of the {found} pairs in {rd.results} not kept — other "
            f"implementations or cases, unfinished, or of another device, math class, harness version or "
            f"implementation source; this run's among them run again")
    if len(kept):
        kept = regate(kept, {c.case_id: c for c in sw.cases}, {i.name: i for i in sw.impls}, s)
        rd.write_results(kept)
        rd.keep_pair_timing(set(zip(kept["case_id"], kept["impl"])))
    else:
        rd.clear([RESULTS, PAIR_TIMING])
    return kept.reset_index(drop=True)
