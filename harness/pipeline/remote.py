"""The command's handle on one worker (its processes: harness.worker, harness.pipeline.serve): pairs
in, PairResults out.

Pairs are pipelined: as soon as a pair's record has gone to the judge, the next pair goes to the
implementation's process, so that its calls run while the judge checks the one before (and the
judge starts the next case's references as soon as it is free). Results come back in order. A pair
that kills or hangs the implementation's process is an error; the judge, its parent, is still alive
and first finishes the pair it holds. On a GPU, a pair whose calls raised ends the worker before
the next pair runs: a CUDA error can poison the process's context.

While the command sends a record to the judge, the judge may be sending the answer before it: that
answer (a PairResult: numbers and a few words per check) fits in the socket's buffer, so neither
waits on the other."""
from __future__ import annotations

import sys
import time
from multiprocessing.connection import wait
from typing import Callable, Iterable, Iterator

from harness.worker import _SPARE, START_TIMEOUT, Process, base_env, describe_exit


class WorkerStartError(RuntimeError):
    """A worker process could not start (before any implementation's code ran): the harness's or
    the environment's problem, never a row."""


class Worker:
    """`on_start(pid)` is called for every worker it starts (the run directory's lock file lists
    them; a worker's implementation process is its judge's child and dies with it); `log(line)`
    hears of a worker that died between pairs (a thread of the last pair's implementation, say),
    which no row can carry. `pinned` (top-level package, import roots): the implementation's process
    imports that package from those roots only (harness bisect)."""

    def __init__(self, settings, env: dict | None = None, on_start: Callable[[int], None] | None = None,
                 log: Callable[[str], None] | None = None, pinned: tuple[str, list[str]] | None = None):
        self.settings, self.env, self.on_start, self.log, self.pinned = settings, env, on_start, log, pinned
        self.p: Process | None = None
        self.ready_at: float | None = None              # time.monotonic() when it was first ready
        self.last = ""                                  # the last pair it ran, for that line

    @property
    def pid(self) -> int | None:
        return self.p.pid if self.p is not None else None

    def start(self) -> str | None:
        """Start a worker — or take a spare started with the same environment that listed its
        built-ins (if any) on this import path, and is still waiting — and wait until both its
        processes are ready; None, or why it could not start. A spare that fails to start (its
        implementation's process died or hung while it imported) is replaced by a fresh worker, and
        one forked from a template that failed by a fresh interpreter (which says why)."""
        env = base_env() if self.env is None else dict(self.env)
        path = list(sys.path)
        spare = next((k for k, (e, p) in enumerate(_SPARE)
                      if e == env and (p.path is None or p.path == path) and p.waiting()), None)
        first = _SPARE.pop(spare)[1] if spare is not None else Process(env)
        why = self._start(first)
        if why is not None and (spare is not None or first.forked):
            why = self._start(Process(env, fresh=first.forked))
        return why

    def _start(self, p: Process) -> str | None:
        self.p = p
        pid = p.pid                      # a forked worker's: once its template has forked it
        if self.on_start is not None and pid is not None:
            self.on_start(pid)
        try:
            # the command's import path: a plug-in or API factory found there is found by the worker too
            self.p.impl.send(("settings", self.settings, list(sys.path), self.pinned))
            self.p.judge.send(("settings", self.settings))
            if not (self.p.impl.poll(START_TIMEOUT) and self.p.judge.poll(START_TIMEOUT)):
                self.stop()
                return f"the worker did not start within {START_TIMEOUT:g} s"
            said = self.p.impl.recv_bytes()
            kind, *payload = self.p.judge.recv()
        except (EOFError, OSError):
            return "the worker died while starting: " + describe_exit(self._end())
        if said != b"ready" or kind != "ready":
            why = said.decode(errors="replace") if said != b"ready" else payload[0]
            self.stop()
            return f"the worker could not start: {why}"
        self.p.impl_pid = payload[1]
        if self.ready_at is None:
            self.ready_at = time.monotonic()
        return None

    def _ready(self) -> Process:
        if self.p is not None and (self.p.proc.poll() is not None or self.p.impl.poll(0)):   # not a pair's doing
            why = describe_exit(self.p.impl_ended() if self.p.proc.poll() is None else self.p.proc.returncode)
            self._end()
            if self.log:
                self.log(f"harness: warning: a worker died between pairs, after {self.last}: {why}")
        if self.p is None:
            why = self.start()
            if why is not None:
                raise WorkerStartError(f"could not start a worker process: {why}")
        return self.p

    def _result(self, p: Process, timeout: float):
        """The judge's answer for the pair it holds: (PairResult, None) or (None, why)."""
        try:
            if not p.judge.poll(timeout):
                self.stop()
                return None, f"the judging of the pair took over {timeout:g} s (--timeout); the worker was killed"
            kind, payload = p.judge.recv()
        except (EOFError, OSError):
            return None, "the judging process ended: " + describe_exit(self._end())
        if kind == "result":
            return payload, None
        self.stop()                 # the pair escaped the judge's own handling: a fresh worker next
        return None, payload

    def run_many(self, pairs: Iterable, timeout: float) -> Iterator[tuple]:
        """(case, impl, PairResult or None, why) for each (case, impl) in order; `timeout` counts
        from sending a pair, for its calls and again for its judging. The implementation travels
        as its --impl text (resolved again in the worker) unless it has none (an API factory:
        pickled); the judge gets its declaration."""
        from harness.pipeline.judge import declaration
        from harness.pipeline.wire import status_of
        held = None                                      # (case, impl): with the judge, not yet answered
        for case, impl in pairs:
            p = self._ready() if held is None else self.p
            self.last = f"{impl.name} {case.case_id} [{case.label}]"
            record, why, broken, t0 = None, "", False, time.monotonic()
            try:
                p.judge.send(("pair", case, declaration(impl)))
                p.impl.send(("pair", case, impl.spec if impl.spec else impl))
                while record is None:
                    ready = wait([p.impl] + ([p.judge] if held else []), max(0.0, timeout - (time.monotonic() - t0)))
                    if held and p.judge in ready:
                        yield (*held, *self._result(p, timeout))
                        held = None
                        if self.p is None:               # that judging failed: the worker is gone
                            why = "the worker was stopped while this pair ran (the pair before it: see its row)"
                            break
                    elif p.impl in ready:
                        record = p.impl.recv_bytes()     # bytes: never unpickled here
                    else:
                        why = f"timed out after {timeout:g} s (--timeout); the worker was killed"
                        break
            except (EOFError, OSError):
                broken = True
            if record is None:
                if held:                                 # the judge outlives its child: its answer first
                    yield (*held, *self._result(p, timeout))
                    held = None
                if broken:
                    why = describe_exit(p.impl_ended()) if self.p is p else "the worker was stopped"
                self.stop()
                yield case, impl, None, why
                continue
            try:
                p.judge.send(("record",))
                p.judge.send_bytes(record)               # the judge reads it once it has answered `held`
            except OSError:
                if held:
                    yield (*held, *self._result(p, timeout))
                    held = None
                yield case, impl, None, "the judging process ended: " + describe_exit(self._end())
                continue
            if held:                                     # the calls were faster than the judging before
                yield (*held, *self._result(p, timeout))
                held = None
                if self.p is not p:
                    yield case, impl, None, "the worker was stopped while this pair ran (the pair before it: see its row)"
                    continue
            held = (case, impl)
            if self.settings.device.startswith("cuda") and status_of(record) == "error":
                yield (*held, *self._result(p, timeout))
                held = None
                self.stop()              # a CUDA error poisons the context: the next pair gets a new one
        if held:
            yield (*held, *self._result(self.p, timeout))

    def _end(self) -> int | None:
        p, self.p = self.p, None
        return None if p is None else p.end()

    def stop(self) -> None:
        """Kill the worker and everything it started (nothing of an implementation outlives it),
        and reap it."""
        self._end()
