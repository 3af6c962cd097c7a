"""`harness run --cases hypothesis`: property-based exploration of the case space.

Hypothesis draws cases (cases.strategies), every implementation runs each exactly as in a sweep
(harness.runner.case_rows), and any check that is not `pass` falsifies the property. Hypothesis then
shrinks to a minimal failing case; `format_exploration` renders it as a `[[case]]` suite entry
(paste it into a suite file to keep it as a regression case) with the reasons its checks failed; its
rows go to OUT/results.csv (from which `harness replay ID --cases OUT` rebuilds it).
harness.commands maps the result to exit 0 (no failure in max_examples cases) or 1 (a failure)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from harness.cases.case import Case
from harness.runner import SweepConfig, case_rows

# Shrinking stops evaluating new candidates after this many calls per example asked for (the best
# failure found so far is kept), so a slow implementation cannot stall CI in the shrink phase.
SHRINK_CALLS_PER_EXAMPLE = 10
MIN_SHRINK_CALLS = 200


class _Falsified(AssertionError):
    pass


@dataclass
class Exploration:
    max_examples: int
    distinct: int                       # distinct cases evaluated
    results: Path | None                # OUT/results.csv if written
    case: Case | None = None            # the minimal failing case; None: no failure found
    bad: list[dict] = field(default_factory=list)     # its rows that are not `pass`
    note: str = ""                      # how hypothesis ended, when not with the property's own failure

    @property
    def falsified(self) -> bool:
        return self.case is not None


def format_exploration(e: Exploration) -> str:
    if not e.falsified:
        lines = [f"harness: no failure in {e.distinct} distinct cases ({e.max_examples} examples asked for)"]
        if e.results is not None:
            lines.append(f"harness: wrote {e.results}")
        return "\n".join(lines)
    case = e.case
    lines = [f"harness: falsified after {e.distinct} distinct cases; minimal failing case "
             f"{case.case_id} [{case.regime}] {case.label}",
             "# paste into a suite file:",
             case.to_toml(),
             f"# {len(e.bad)} check(s) not passing:"]
    for r in e.bad:
        lines.append(f"#   {r['status'].upper():5s} {r['impl']} {r['output']} vs {r['reference']}: {r.get('reason', '')}")
    lines.append(f"# replay: {e.bad[0].get('replay', '')}")
    lines.append(f"harness: wrote {e.results}")
    return "\n".join(lines)


def explore(impls, specs, device, max_examples, seed, out_dir, overrides=(), budgets_path="",
            strategy=None, log: Callable[[str], None] | None = None) -> Exploration:
    from hypothesis import HealthCheck, Phase, Verbosity, given
    from hypothesis import seed as hseed
    from hypothesis import settings

    from harness.cases.strategies import cases as case_strategy
    from harness.reports.results_io import write_results

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.csv"
    # replay commands point at the results dir: `harness replay` rebuilds the case from its row
    cfg = SweepConfig(list(impls), [], device, out_dir, dict(specs or {}), str(out_dir),
                      list(overrides or []), budgets_path or "", progress=False)
    memo: dict[str, list[dict]] = {}       # case_id -> rows (a case's result is a pure function)
    failing: dict[str, Case] = {}
    state = {"calls": 0, "last": None, "examples": 0}
    call_cap = max(MIN_SHRINK_CALLS, SHRINK_CALLS_PER_EXAMPLE * max_examples) + max_examples

    def evaluate(case: Case) -> list[dict]:
        cid = case.case_id
        if cid not in memo:
            memo[cid] = [r for rows in case_rows(case, cfg, cfg.impls) for r in rows]
        return memo[cid]

    def prop(case: Case):
        state["calls"] += 1
        cid = case.case_id
        if state["calls"] > call_cap and cid not in memo:
            return        # out of shrink budget: unseen candidates count as passing
        rows = evaluate(case)
        bad = [r for r in rows if r.get("status") != "pass"]
        if bad:
            failing[cid] = case
            state["last"] = cid
            raise _Falsified(f"{len(bad)} check(s) not passing on {case.label}: {bad[0].get('reason', '')}")

    test = given(case_strategy() if strategy is None else strategy)(prop)
    test = settings(max_examples=max_examples, derandomize=False, database=None, deadline=None,
                    phases=[Phase.explicit, Phase.generate, Phase.shrink], report_multiple_bugs=False,
                    print_blob=False, verbosity=Verbosity.quiet,
                    suppress_health_check=list(HealthCheck))(test)
    test = hseed(seed)(test)

    if log is not None:
        log(f"harness: hypothesis exploration, {max_examples} examples, seed {seed}, "
            f"{len(cfg.impls)} implementation(s) [{', '.join(i.name for i in cfg.impls)}] on {device}")
    try:
        test()
    except Exception as e:                        # the shrunk failure (or a harness crash)
        cid = state["last"]
        from hypothesis.errors import HypothesisException
        if cid is None or not isinstance(e, (AssertionError, HypothesisException, BaseExceptionGroup)):
            raise                                 # a harness bug is a traceback, never a "case"
        note = ""
        if not isinstance(e, AssertionError):
            note = (f"harness: hypothesis ended with {type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else ''}")
        case = failing[cid]
        rows = memo[cid]
        write_results(results, pd.DataFrame(rows))
        bad = [r for r in rows if r.get("status") != "pass"]
        return Exploration(max_examples, len(memo), results, case, bad, note)
    all_rows = [r for rows in memo.values() for r in rows]
    if all_rows:
        write_results(results, pd.DataFrame(all_rows))
    elif results.exists():
        results.unlink()
    return Exploration(max_examples, len(memo), results if all_rows else None)
