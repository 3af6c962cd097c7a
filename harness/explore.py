"""`harness run --cases hypothesis`: property-based exploration of the case space.

Hypothesis draws cases (harness.cases.strategies), every implementation runs each exactly as in a
sweep (harness.pipeline: in a worker where it can be sent to one), and any check that is neither
pass nor skip falsifies the property. Hypothesis then shrinks to a minimal failing case; its rows go to
OUT/results.csv (from which `harness replay ID --cases OUT` rebuilds it) and the case is printed as
a `[[case]]` suite entry. The active hypothesis profile applies (its database keeps failing examples
for the next run); only the too_slow health check is waived, because a case is an expensive example
by nature."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from harness.analysis.check import rows as result_rows
from harness.cases.case import Case
from harness.pipeline.drive import Pipeline
from harness.pipeline.settings import Settings
from harness.reports.rundir import RunDir
from harness.worker import DEFAULT_TIMEOUT

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
    bad: list[dict] = field(default_factory=list)     # its rows that failed or errored
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
             f"{case.case_id} [{case.regime}] {case.label}", "# paste into a suite file:", case.to_toml(),
             f"# {len(e.bad)} check(s) not passing:"]
    lines += [f"#   {r['status'].upper():5s} {r['impl']} {r['output']} vs {r['reference']}: {r.get('reason', '')}"
              for r in e.bad]
    lines.append(f"# replay: {e.bad[0].get('replay', '')}")
    lines.append(f"harness: wrote {e.results}")
    return "\n".join(lines)


def explore(impls, settings: Settings, max_examples: int, seed: int | None, out_dir, strategy=None,
            timeout: float = DEFAULT_TIMEOUT, log: Callable[[str], None] | None = None) -> Exploration:
    from hypothesis import HealthCheck, Phase, given
    from hypothesis import seed as hseed
    from hypothesis import settings as hsettings
    from hypothesis.errors import HypothesisException

    from harness.cases.strategies import cases as case_strategy

    rd = RunDir(out_dir).create()
    settings = replace(settings, suite_ref=str(rd.path))          # replay commands rebuild the case from OUT
    pipe = Pipeline(settings, timeout=timeout)
    memo: dict[str, list[dict]] = {}       # case_id -> rows (a case's result is a pure function)
    failing: dict[str, Case] = {}
    state = {"calls": 0, "last": None}
    call_cap = max(MIN_SHRINK_CALLS, SHRINK_CALLS_PER_EXAMPLE * max_examples) + max_examples

    def prop(case: Case):
        state["calls"] += 1
        cid = case.case_id
        if state["calls"] > call_cap and cid not in memo:
            return        # out of shrink budget: unseen candidates count as passing
        if cid not in memo:
            memo[cid] = [r for impl in impls for r in result_rows(pipe.run(case, impl))]
        bad = [r for r in memo[cid] if r.get("status") not in ("pass", "skip")]
        if bad:
            failing[cid] = case
            state["last"] = cid
            raise _Falsified(f"{len(bad)} check(s) not passing on {case.label}: {bad[0].get('reason', '')}")

    test = given(case_strategy() if strategy is None else strategy)(prop)
    test = hsettings(hsettings.default, max_examples=max_examples, deadline=None, report_multiple_bugs=False,
                     phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink], print_blob=False,
                     suppress_health_check=[HealthCheck.too_slow])(test)
    if seed is not None:
        test = hseed(seed)(test)
    if log is not None:
        log(f"harness: hypothesis exploration, {max_examples} examples, seed {seed}, "
            f"{len(impls)} implementation(s) [{', '.join(i.name for i in impls)}] on {settings.device}")
    try:
        test()
    except Exception as e:                        # the shrunk failure (or a harness crash)
        cid = state["last"]
        if cid is None or not isinstance(e, (AssertionError, HypothesisException, BaseExceptionGroup)):
            raise                                 # a harness bug is a traceback, never a "case"
        note = "" if isinstance(e, AssertionError) else \
            f"harness: hypothesis ended with {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rows = memo[cid]
        rd.write_results(pd.DataFrame(rows))
        return Exploration(max_examples, len(memo), rd.results, failing[cid],
                           [r for r in rows if r.get("status") not in ("pass", "skip")], note)
    finally:
        pipe.close()
    all_rows = [r for rows in memo.values() for r in rows]
    if all_rows:
        rd.write_results(pd.DataFrame(all_rows))
    return Exploration(max_examples, len(memo), rd.results if all_rows else None)
