"""Pipeline.run(case, implementation) -> PairResult: the one way a pair runs, for the sweep, the
pytest plugin, hypothesis exploration, bisect's judge and replay.

Isolated (the default wherever the implementation can be sent to a worker: an --impl text, or a
factory that pickles), the implementation's calls run in a worker's implementation process and the
references and checks in its judge (harness.worker, harness.pipeline.serve): nothing the
implementation does to its process — flush-to-zero, a patched torch function, a wrapped harness
function, a crash — reaches a reference or a verdict, and the command keeps the PairResult its
judge sent. Inline (`--isolate inline`, and a factory that does not pickle) both sides run in this
process, one after the other: the inputs are still private and the first call's outputs still
cloned, the floating-point environment is checked and put back around the judging, but a plug-in
that patches what the judging uses in this process is not stopped, and a crash ends the process."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Iterable, Iterator

from harness.analysis.result import PairResult
from harness.cases.case import Case
from harness.impls.base import Implementation
from harness.pipeline.settings import Settings
from harness.worker import DEFAULT_TIMEOUT


def picklable(impl) -> bool:
    import pickle
    try:
        pickle.dumps(impl)
        return True
    except Exception:
        return False


def isolated(impl: Implementation, isolate: str) -> bool:
    """Whether a pair of `impl` runs in a worker under --isolate `isolate`."""
    return isolate == "process" or (isolate == "auto" and bool(impl.spec or picklable(impl)))


class Pipeline:
    """Runs pairs with one Settings. `env`, `on_start`, `log`, `pinned`: the worker's
    (harness.pipeline.remote.Worker)."""

    def __init__(self, settings: Settings, isolate: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                 env: dict | None = None, on_start: Callable | None = None, log: Callable[[str], None] | None = None,
                 pinned: tuple[str, list[str]] | None = None):
        self.s, self.isolate, self.timeout, self.log = settings, isolate, timeout, log
        self._worker_args = dict(env=env, on_start=on_start, log=log, pinned=pinned)
        self._worker = None
        self._judge = None
        self.ready_at: float | None = None          # time.monotonic() when its worker was first ready

    def run(self, case: Case, impl: Implementation) -> PairResult:
        return next(self.run_many([(case, impl)]))

    def run_many(self, pairs: Iterable[tuple[Case, Implementation]]) -> Iterator[PairResult]:
        """Each pair's result, in order, `pairs` read as they are needed; a stretch of isolated
        ones pipelined through the worker (the next pair's calls while the judge checks the one
        before: harness.pipeline.remote)."""
        pairs = iter(pairs)
        inline: list = []

        def stretch(first):
            yield first
            for pair in pairs:
                if not isolated(pair[1], self.isolate):
                    inline.append(pair)                # ends the stretch; run below
                    return
                yield pair
        for pair in pairs:
            if isolated(pair[1], self.isolate):
                yield from self._isolated(stretch(pair))
            else:
                inline.append(pair)
            while inline:
                case, impl = inline.pop()
                t0 = time.perf_counter()
                yield replace(self._inline(case, impl), pair_seconds=time.perf_counter() - t0)

    def _isolated(self, pairs: Iterator) -> Iterator[PairResult]:
        from harness.pipeline.judge import unmeasured_result
        from harness.pipeline.remote import Worker
        if self._worker is None:
            self._worker = Worker(self.s, **self._worker_args)
        t0 = time.perf_counter()
        for case, impl, result, why in self._worker.run_many(pairs, self.timeout):
            if result is None:
                if self.log:
                    self.log(f"harness: {impl.name} {case.case_id} [{case.label}]: {why}")
                result = unmeasured_result(case, impl, self.s, "error", why)
            t1 = time.perf_counter()
            yield replace(result, pair_seconds=t1 - t0)
            t0 = t1

    def _inline(self, case: Case, impl: Implementation) -> PairResult:
        from harness.pipeline.call import run_calls
        from harness.pipeline.judge import Judge, unmeasured_result
        from harness.pipeline.serve import escaped
        if self._judge is None:
            self._judge = Judge(self.s)
        try:
            return self._judge.judge(case, impl, run_calls(case, impl, self.s))
        except KeyboardInterrupt:
            raise
        except BaseException as e:           # SystemExit too: an implementation's exit is an error row
            why = escaped(e)
            if self.log:
                self.log(f"harness: {impl.name} {case.case_id} [{case.label}]: {why}")
            return unmeasured_result(case, impl, self.s, "error", why)

    def close(self) -> None:
        if self._worker is not None:
            self.ready_at = self._worker.ready_at
            self._worker.stop()
            self._worker = None
