"""`harness selftest`: the harness's own sensitivity check. Every mutant (harness.mutants) must be
caught by the suite, and every correct CPU built-in must pass it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.cases.suite import load_suite
from harness.impls.base import Implementation
from harness.impls.registry import resolve
from harness.mutants import MUTANTS
from harness.runner import SweepConfig, resolve_device, run_sweep

CORRECT = ("torch", "torch-fused", "torch-compile-emulate")


def first_catch(df: pd.DataFrame) -> str:
    bad = df[df["status"] != "pass"]
    if bad.empty:
        return ""
    r = bad.iloc[0]
    return f"{r['output']} vs {r['reference']} on [{r['label']}] ({r['reason']})"


def run_selftest(suite: str, device: str, out: Path, mutants=None, correct=CORRECT):
    """Returns (results per implementation: name -> (kind, passed_or_caught, detail))."""
    cases = list(load_suite(suite).cases)
    impls = [(resolve(n), "correct", "") for n in correct]
    for name in (mutants or MUTANTS):
        factory, bug = MUTANTS[name]
        impls.append((Implementation(name, factory, factory.rounding, source="mutant"), "mutant", bug))
    report = {}
    for impl, kind, bug in impls:
        df = run_sweep(SweepConfig([impl], cases, device, out / impl.name, suite_ref=suite, progress=False))
        caught = first_catch(df)
        ok = (not caught) if kind == "correct" else bool(caught)
        report[impl.name] = (kind, ok, caught or "all checks within budget", bug)
    return report


@dataclass
class Selftest:
    """run_selftest's report: name -> (kind, as_expected, detail, bug)."""
    report: dict[str, tuple[str, bool, str, str]]

    @property
    def failed(self) -> list[str]:
        return [name for name, (_, ok, _, _) in self.report.items() if not ok]

    @property
    def ok(self) -> bool:
        return not self.failed


def selftest(suite: str, device: str, out) -> Selftest:
    return Selftest(run_selftest(suite, resolve_device(device), Path(out)))


def format_selftest(s: Selftest) -> str:
    """One verdict line and one detail line per implementation."""
    lines = []
    for name, (kind, ok, detail, bug) in s.report.items():
        verdict = ("PASS " if ok else "FAIL ") + ("passes" if kind == "correct" else "caught")
        if not ok:
            verdict = "FAIL " + ("flagged a correct implementation" if kind == "correct" else "NOT caught")
        lines.append(f"{verdict:40s} {name:30s} {bug}")
        lines.append(f"{'':40s} {detail}")
    return "\n".join(lines)


def format_selftest_summary(s: Selftest) -> str:
    return f"selftest: {len(s.report) - len(s.failed)}/{len(s.report)} as expected"
