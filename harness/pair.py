"""One (case, implementation) pair, start to finish: the case's inputs and references (kept for the
next implementation of the same case), the implementation's forward and backward, the checks.
This is what a worker process runs (harness.worker), and what runs in-process where a factory
cannot be sent to one."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.check import check, status_rows
from harness.cases.case import Case
from harness.cases.generate import act_format, generate
from harness.execute import run_impl
from harness.impls.base import Implementation
from harness.references.bundle import CaseReferences, build

# Where a case's float64 references and analysis run. On a GPU, every small kernel and host sync of
# the analysis waits its turn behind the other workers' contexts (docs/performance.md: a 32x127
# case's analysis took 1.3 s there and 0.02 s on one CPU core): below this many elements they run
# on the CPU; bigger cases, whose float64 work the GPU does far faster, stay on the device.
ANALYSIS_ON_CPU_BELOW = 1 << 18


@dataclass(frozen=True)
class Settings:
    """Everything a pair needs besides the case and the implementation (sent to each worker)."""
    device: str = "cpu"
    overrides: tuple = ()
    override_path: str = ""
    golden_dir: Path | None = None
    reference_backend: str = "auto"
    suite_ref: str = "quick"                 # what `--cases` replay commands name
    impl_specs: dict = field(default_factory=dict)     # name -> --impl text, for replay commands


def analysis_device(case: Case, device: str) -> str:
    if device.startswith("cuda") and math.prod(case.shape) < ANALYSIS_ON_CPU_BELOW:
        return "cpu"
    return device


def case_inputs(case: Case, act_follows: str, s: Settings):
    """(the inputs on the implementation's device, their references on analysis_device)."""
    inp = generate(case, act_follows)                       # on the CPU
    where = analysis_device(case, s.device)
    if s.golden_dir is None:
        refs = build(inp.to(where), s.reference_backend)
    else:
        from harness.references.store import cached_build, refs_to
        refs = refs_to(cached_build(inp, case.params(), s.golden_dir, backend=s.reference_backend), where)
    return inp.to(s.device), refs


def replay_command(case: Case, spec: str, suite_ref: str, device: str = "", budgets: str = "") -> str:
    """The command that reruns one pair: by case id in a suite, or — for a case from no suite
    (hypothesis, a list given to harness.verify) — with the case itself as JSON."""
    import json
    import shlex
    where = f"--cases {shlex.quote(suite_ref)}" if suite_ref else \
        f"--case {shlex.quote(json.dumps(case.params(), separators=(',', ':')))}"
    cmd = f"harness replay {case.case_id} --impl {shlex.quote(spec)} {where}"
    if device:
        cmd += f" --device {device}"
    if budgets:
        cmd += f" --budgets {shlex.quote(budgets)}"
    return cmd


class PairRunner:
    """Runs pairs with one Settings; keeps the last case's inputs and references per activation dtype."""

    def __init__(self, settings: Settings):
        self.s = settings
        self._case_id: str | None = None
        self._refs: dict[str, tuple] = {}

    def references(self, case: Case, impl: Implementation) -> tuple:
        if case.case_id != self._case_id:
            self._case_id, self._refs = case.case_id, {}
        act = act_format(case, impl.act_follows).name
        if act not in self._refs:
            self._refs[act] = case_inputs(case, impl.act_follows, self.s)
        return self._refs[act]

    def run(self, case: Case, impl: Implementation) -> tuple[list[dict], dict[str, float]]:
        """The pair's rows (each with its replay command) and its stage times."""
        t0 = time.perf_counter()
        times: dict[str, float] = {}
        act = act_format(case, impl.act_follows)
        why = impl.unsupported(case)
        if why is not None:
            rows = status_rows(case, impl, self.s.device, act.name, "skip", why)
        else:
            inp, refs = self.references(case, impl)
            times["references"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            outcome = run_impl(impl, inp, act.dtype, self.s.device, impl.case_kwargs(case))
            t2 = time.perf_counter()
            times["impl"] = t2 - t1
            mp0 = _mp_seconds(refs)
            rows = check(case, impl, self.s.device, refs, outcome, self.s.overrides, self.s.override_path)
            times["analysis"] = time.perf_counter() - t2
            times["mpmath"] = _mp_seconds(refs) - mp0
        spec = self.s.impl_specs.get(impl.name, impl.spec or impl.name)
        replay = replay_command(case, spec, self.s.suite_ref, self.s.device, self.s.override_path)
        seconds = time.perf_counter() - t0
        for r in rows:
            r["replay"] = replay
            r["pair_seconds"] = seconds
        return rows, times


def _mp_seconds(refs: CaseReferences) -> float:
    return sum(c.mp_seconds for c in refs.golden.values())

