"""The judging side of a pair: the case's own inputs, generated again from its id (bit for bit the
implementation side's, never a copy that passed through it), the references computed from them —
once per case and activation dtype, shared by every implementation of the case, and started as
soon as the pair is announced so that they overlap the implementation's calls — and the checks of
the first call's outputs (harness.analysis.check). It runs in a process that never imports or runs
implementation code (harness.pipeline.serve: the implementation's process is its child, forked
before anything ran), in a floating-point environment it checks before reference work."""
from __future__ import annotations

import time
from dataclasses import replace

from harness.analysis.check import checks, unmeasured
from harness.analysis.result import PairResult
from harness.cases.case import Case
from harness.cases.generate import act_format, generate
from harness.impls.base import Implementation
from harness.pipeline import fpenv
from harness.pipeline.call import CallRecord, short
from harness.pipeline.settings import Settings, analysis_device, replay_of, spec_of
from harness.references.bundle import CaseReferences, build
from harness.references.errors import out_of_memory


def declaration(impl: Implementation) -> Implementation:
    """What the judge needs of an implementation: its declared attributes, not its code."""
    return replace(impl, factory=None, supports=None)


def result(case: Case, impl: Implementation, s: Settings, checks_, **more) -> PairResult:
    """A pair's result, with what every result carries (replay command, suite, what ran)."""
    return PairResult(case, declaration(impl), s.device, act_format(case, impl.act_follows).name, tuple(checks_),
                      replay_of(case, impl, s), s.suite_ref, spec_of(impl, s), s.impl_hashes.get(impl.name, ""),
                      **more)


def unmeasured_result(case: Case, impl: Implementation, s: Settings, status: str, text: str, **more) -> PairResult:
    """A pair that measured nothing: `error` (raised, died, hung) or `skip` rows."""
    act = act_format(case, impl.act_follows).name
    return result(case, impl, s, unmeasured(case, impl, act, status, text, s.models), **more)


class FloatEnvironmentError(RuntimeError):
    """The judging process flushes subnormals and could not stop: no reference can be trusted."""


class Judge:
    """References and checks for pair after pair; keeps the last case's references per activation
    dtype (every implementation of a case runs before the next case)."""

    def __init__(self, settings: Settings):
        self.s = settings
        self._case_id: str | None = None
        self._refs: dict[str, CaseReferences] = {}
        self._seconds: dict[str, float] = {}         # reference seconds not yet charged to a pair

    def check_environment(self, pool: bool = False) -> None:
        if fpenv.flushes_subnormals(pool) and not fpenv.restore(pool):
            raise FloatEnvironmentError(f"the judging process: {fpenv.WHAT}, and it cannot be turned off")

    def references(self, case: Case, impl: Implementation) -> CaseReferences:
        """The case's references for the implementation's activation dtype (built on first use)."""
        if case.case_id != self._case_id:
            self._case_id, self._refs, self._seconds = case.case_id, {}, {}
        act = act_format(case, impl.act_follows).name
        if act not in self._refs:
            self.check_environment()
            t0 = time.perf_counter()
            where = analysis_device(case, self.s.device)
            inp = generate(case, impl.act_follows, where)                # on the CPU
            if self.s.golden_dir is None:
                self._refs[act] = build(inp.to(where), self.s.reference_backend)
            else:
                from harness.references.store import cached_build, refs_to
                self._refs[act] = refs_to(cached_build(inp, case.params(), self.s.golden_dir,
                                                       backend=self.s.reference_backend), where)
            self._seconds[act] = time.perf_counter() - t0
        return self._refs[act]

    def judge(self, case: Case, impl: Implementation, rec: CallRecord) -> PairResult:
        """The pair's result from what its implementation side recorded."""
        times = {"impl": rec.seconds, "timing": rec.timing_seconds}
        if rec.status != "ran":
            return unmeasured_result(case, impl, self.s, rec.status, rec.text, notes=rec.notes, times=times)
        try:
            refs = self.references(case, impl)
            self.check_environment()
        except FloatEnvironmentError as e:
            return unmeasured_result(case, impl, self.s, "error", str(e), times=times)
        except Exception as e:
            if not out_of_memory(e):
                raise
            self._case_id = None                  # a case too big for the machine: an error row
            return unmeasured_result(case, impl, self.s, "error", f"out of memory in the references: {short(e)}",
                                     times=times)
        times["references"] = self._seconds.pop(act_format(case, impl.act_follows).name, 0.0)
        t0 = time.perf_counter()
        mp0 = _mp_seconds(refs)
        got = checks(case, impl, refs, rec.outputs, rec.problems, rec.repeats, self.s.overrides,
                     self.s.override_path, self.s.models, self.s.allow_nondeterministic, self.s.top)
        times["analysis"] = time.perf_counter() - t0
        times["mpmath"] = _mp_seconds(refs) - mp0
        return result(case, impl, self.s, got, speed=rec.speed, inputs_modified=rec.inputs_modified,
                      notes=rec.notes, times=times)


def _mp_seconds(refs: CaseReferences) -> float:
    return sum(c.mp_seconds for c in refs.golden.values())
