"""`harness replay CASE_ID --impl SPEC [--cases SUITE|RESULTS_DIR|results.csv | --case JSON]`: rerun
one case for one implementation exactly as the sweep does (through the same pipeline, giving the
same typed PairResult) and show, per output and reference, its worst elements down to the bit (the
judge explains `--top` of them per check: harness.analysis.explain).

The case comes from a suite (by id), is rebuilt from a results.csv row (every Case field is a
column there), or is given as the JSON of its parameters; it must hash back to the id asked for."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.analysis.check import rows as result_rows
from harness.analysis.explain import reason
from harness.analysis.result import PairResult
from harness.cases.case import Case
from harness.cases.params import case_from_json, case_from_row
from harness.pipeline.drive import Pipeline
from harness.pipeline.settings import Settings, replay_command
from harness.references.errors import UsageError
from harness.reports.rundir import RunDir, read_csv
from harness.worker import DEFAULT_TIMEOUT


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
    result: PairResult
    top: int = 5                       # elements shown per check

    @property
    def rows(self) -> list[dict]:
        return result_rows(self.result)


def run_case(case: Case, impl, device: str, top: int = 5, overrides=(), override_path: str = "",
             suite_ref: str = "", isolate: str = "auto", timeout: float = DEFAULT_TIMEOUT) -> Replay:
    from harness.impls.source import source_hash
    s = Settings(device, tuple(overrides), override_path, suite_ref=suite_ref,
                 impl_hashes={impl.name: source_hash(impl)}, top=max(top, 1))
    pipe = Pipeline(s, isolate, timeout)
    try:
        return Replay(pipe.run(case, impl), top)
    finally:
        pipe.close()


def format_replay(r: Replay) -> str:
    res = r.result
    lines = [f"case {res.case.case_id} [{res.case.regime}] {res.case.label}",
             f"impl {res.impl.name} ({res.impl.rounding.name}, {res.impl.math.label} math) on {res.device}"]
    for c in res.checks:
        head = f"{c.output:7s} vs {c.reference.label:12s} {c.status.upper():5s}"
        why = reason(c.output, c.reference.label, c.finding)
        if c.status in ("error", "skip"):
            lines.append(f"{head} {why}")
            continue
        m = c.measured
        if m is not None:
            head += (f" max_ulp={m.maxima['ulp']:.4g} max_scaled={m.maxima['scaled']:.4g} "
                     f"budget={c.budget.value:.4g} {c.budget.metric}")
        if why:
            head += f"  ({why})"
        lines.append(head)
        for e in (m.elements[:r.top] if m is not None else ()):
            metrics = " ".join(f"{n}={v:.4g}" for n, v in e.metrics.items())
            lines.append(f"    [{','.join(map(str, e.index))}] {e.inputs}")
            lines.append(f"        got={e.got!r} ({e.got_hex})  exact={e.exact!r}  golden={e.golden!r} "
                         f"({e.golden_hex})  ref=[{e.lo!r}, {e.hi!r}]  {metrics}")
    return "\n".join(lines)


def check_arguments(device: str, top: int | None, timeout: float) -> str:
    """replay's options checked before its implementation loads (UsageError naming the bad one);
    the device resolved."""
    from harness.api import check_run_options, resolve_device
    check_run_options(timeout=timeout)
    device = resolve_device(device)
    if top is None or top < 0:
        raise UsageError(f"--top {top}: must be >= 0")
    return device


def replay(case_id: str, impl_spec, cases: str, device: str = "auto", top: int = 5,
           budgets: str | None = None, case_json: str | None = None, isolate: str = "auto",
           timeout: float = DEFAULT_TIMEOUT) -> Replay:
    """Check the arguments (UsageError naming the bad one), find the case and rerun it. `impl_spec`:
    what --impl says, or the Implementation it names (the command line loads it itself)."""
    from harness.api import as_implementation
    from harness.budgets import load_budget_file
    device = check_arguments(device, top, timeout)
    impl = as_implementation(impl_spec)
    reason = impl.skip_reason(device)
    if reason:
        raise UsageError(f"--impl {impl.name}: {reason}")
    case = find_case(case_id, cases, case_json)
    overrides = load_budget_file(budgets) if budgets else []
    return run_case(case, impl, device, top, overrides, budgets or "", "" if case_json else cases, isolate, timeout)


def write_replay_results(r: Replay, out_dir) -> Path:
    """The replayed rows (each with its replay command) as OUT_DIR/results.csv."""
    rd = RunDir(out_dir).create()
    res = r.result
    cmd = replay_command(res.case, res.impl.spec or res.impl.name, "", res.device)
    rd.write_results(pd.DataFrame([{**row, "replay": cmd} for row in r.rows]))
    return rd.results


def format_counts(r: Replay) -> str:
    counts = {s: sum(row["status"] == s for row in r.rows) for s in ("pass", "fail", "error", "skip")}
    return "harness: " + ", ".join(f"{n} {s}" for s, n in counts.items())
