"""`harness replay CASE_ID --impl SPEC [--cases SUITE|RESULTS_DIR|results.csv | --case JSON]`: rerun
one case for one implementation exactly as the sweep does (in this process) and show, per output
and reference, the worst elements down to the bit (harness.analysis.explain).

The case comes from a suite (by id), is rebuilt from a results.csv row (every Case field is a
column there), or is given as the JSON of its parameters; it must hash back to the id asked for."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.analysis.check import check, interval, out_format_name
from harness.analysis.compare import compare
from harness.analysis.explain import ElementRecord, explain, worst_flats
from harness.cases.case import Case
from harness.cases.generate import act_format
from harness.cases.params import case_from_json, case_from_row
from harness.execute import run_impl
from harness.pair import Settings, case_inputs, replay_command
from harness.references.errors import UsageError, out_of_memory
from harness.references.formats import fmt_of
from harness.reports.rundir import RunDir, read_csv


def find_case(case_id: str, cases: str, case_json: str | None = None) -> Case:
    if case_json:
        case = case_from_json(case_json)
        if case.case_id != case_id:
            raise UsageError(f"--case: its parameters hash to {case.case_id}, not {case_id}")
        return case
    p = Path(cases)
    f = p / "results.csv" if p.is_dir() else p if p.suffix == ".csv" else None
    if f is None:
        from harness.cases.suite import load_suite
        suite = load_suite(cases)
        for c in suite.cases:
            if c.case_id == case_id:
                return c
        raise UsageError(f"case {case_id} not found in suite {suite.name} ({len(suite.cases)} cases; "
                         f"`harness cases {cases}` lists them)")
    if not f.is_file():
        raise UsageError(f"--cases {cases}: no results.csv there")
    try:
        df = read_csv(f)
    except Exception as e:
        raise UsageError(f"{f}: unreadable results.csv ({e})") from None
    hit = df[df["case_id"] == case_id] if "case_id" in df.columns else df.iloc[0:0]
    if hit.empty:
        raise UsageError(f"case {case_id} not found in {f}")
    case = case_from_row(hit.iloc[0].to_dict(), f"{f}: case {case_id}")
    if case.case_id != case_id:
        raise UsageError(f"{f}: case {case_id}: the row's parameters hash to {case.case_id} "
                         f"(results.csv edited, or written by another case schema)")
    return case


@dataclass
class Replay:
    case: Case
    impl: object
    device: str
    rows: list[dict]
    elements: dict[int, list[ElementRecord]] = field(default_factory=dict)    # row index -> worst elements


def run_case(case: Case, impl, device: str, top: int = 5, overrides=(), override_path: str = "",
             suite_ref: str = "") -> Replay:
    act = act_format(case, impl.act_follows)
    s = Settings(device, tuple(overrides), override_path, suite_ref=suite_ref)
    if impl.unsupported(case):
        from harness.analysis.check import status_rows
        return Replay(case, impl, device, status_rows(case, impl, device, act.name, "skip", impl.unsupported(case)))
    inp, refs = case_inputs(case, impl.act_follows, s)
    outcome = run_impl(impl, inp, act.dtype, device, impl.case_kwargs(case))
    rows = check(case, impl, device, refs, outcome, tuple(overrides), override_path)
    r = Replay(case, impl, device, rows)
    for k, row in enumerate(rows):
        out = row["output"]
        if row["status"] in ("error", "skip") or out not in outcome.outputs:
            continue
        fmt = fmt_of(out_format_name(case, act.name, out))
        lo, hi, gauge = interval(refs, row["reference"], impl.rounding, act, out, impl.math)   # what check() measured
        c = compare(outcome.outputs[out], lo, hi, gauge, fmt, row["budget_metric"], row["budget"], out)
        golden = refs.certified(out, fmt).golden
        r.elements[k] = explain(c, refs.inputs, out, lo, hi, refs.values[out], golden, worst_flats(c, top), fmt.dtype)
    return r


def format_replay(r: Replay) -> str:
    lines = [f"case {r.case.case_id} [{r.case.regime}] {r.case.label}",
             f"impl {r.impl.name} ({r.impl.rounding.name}, {r.impl.math.label} math) on {r.device}"]
    for k, row in enumerate(r.rows):
        head = f"{row['output']:7s} vs {row['reference']:12s} {row['status'].upper():5s}"
        if row["status"] in ("error", "skip"):
            lines.append(f"{head} {row.get('reason', '')}")
            continue
        if "max_ulp" in row:
            head += (f" max_ulp={row['max_ulp']:.4g} max_scaled={row['max_scaled_err']:.4g} "
                     f"budget={row['budget']:.4g} {row['budget_metric']}")
        if row.get("reason"):
            head += f"  ({row['reason']})"
        lines.append(head)
        for e in r.elements.get(k, []):
            metrics = " ".join(f"{n}={v:.4g}" for n, v in e.metrics.items())
            lines.append(f"    [{','.join(map(str, e.index))}] {e.inputs}")
            lines.append(f"        got={e.got!r} ({e.got_hex})  exact={e.exact!r}  golden={e.golden!r} "
                         f"({e.golden_hex})  ref=[{e.lo!r}, {e.hi!r}]  {metrics}")
    return "\n".join(lines)


def replay(case_id: str, impl_spec: str, cases: str, device: str = "auto", top: int = 5,
           budgets: str | None = None, case_json: str | None = None) -> Replay:
    """Check the arguments (UsageError naming the bad one), find the case and rerun it."""
    from harness.api import as_implementation, resolve_device
    from harness.budgets import load_budget_file
    device = resolve_device(device)
    if top is None or top < 0:
        raise UsageError(f"--top {top}: must be >= 0")
    impl = as_implementation(impl_spec)
    reason = impl.skip_reason(device)
    if reason:
        raise UsageError(f"--impl {impl.name}: {reason}")
    case = find_case(case_id, cases, case_json)
    overrides = load_budget_file(budgets) if budgets else []
    try:
        return run_case(case, impl, device, top, overrides, budgets or "", "" if case_json else cases)
    except Exception as e:
        if not out_of_memory(e):
            raise
        # as in a sweep: a case too big for the machine is an error row, not a crash
        from harness.analysis.check import status_rows
        why = f"out of memory: {type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        return Replay(case, impl, device, status_rows(case, impl, device, act_format(case, impl.act_follows).name,
                                                      "error", why))


def write_replay_results(r: Replay, out_dir) -> Path:
    """The replayed rows (each with its replay command) as OUT_DIR/results.csv."""
    rd = RunDir(out_dir).create()
    cmd = replay_command(r.case, r.impl.spec or r.impl.name, "", r.device)
    rd.write_results(pd.DataFrame([{**row, "replay": cmd} for row in r.rows]))
    return rd.results


def format_counts(r: Replay) -> str:
    counts = {s: sum(row["status"] == s for row in r.rows) for s in ("pass", "fail", "error", "skip")}
    return "harness: " + ", ".join(f"{n} {s}" for s, n in counts.items())
