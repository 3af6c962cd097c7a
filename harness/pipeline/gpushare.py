"""A worker's GPU, shared by its two processes: the judge's work on the GPU (a big case's
references and checks, harness.pipeline.serve) and the implementation's timed calls
(harness.pipeline.call) do not run at once, so that a speed figure is the implementation's kernels
alone, not the kernels beside the judge's float64 passes (on the H200, a pair timed while its
judge worked read 2.72 ms for 2.34: bench/RESULTS.md).

One lock per worker, made before the fork, so that both sides hold the same one. The other
workers of a sweep on the same GPU are not held back: a speed figure under --jobs N shares the GPU
with them (bench/bench_speed.py runs one worker). Neither side trusts the other to let go: a wait
ends after its limit, or as soon as the other side has died (a semaphore is not released by a
dead holder), and the work goes on unheld — the judge, whose verdicts an implementation must not
stall, waits at most JUDGE_WAIT; timed calls that could not hold the GPU give no GPU figure."""
from __future__ import annotations

import multiprocessing
import time
from contextlib import contextmanager
from typing import Callable

JUDGE_WAIT = 30.0         # seconds the judge waits for the implementation's timing to end
TIMING_WAIT = 120.0       # seconds the implementation's timing waits for the judge's GPU work
SLICE = 0.1               # seconds between looks at whether the other side is gone

_LOCK = None
_WAITED = 0.0             # seconds this process has waited for the other side, in all


def waited() -> float:
    """Seconds this process has waited, in all, for the other side to let go of the worker's GPU:
    the implementation's process keeps them out of its timed-call seconds (harness.pipeline.call),
    which count what the implementation costs (the judge waits outside its timed steps)."""
    return _WAITED


def create() -> None:
    """This worker's lock: called once in its process before it forks its two sides."""
    global _LOCK
    _LOCK = multiprocessing.get_context("fork").Lock()


@contextmanager
def alone(on: bool, wait: float, gone: Callable[[], bool] = lambda: False):
    """Hold the worker's GPU for the block where `on` (the work is on the GPU), waiting at most
    `wait` seconds and no longer once `gone()` (the other side has died); not `on` holds nothing.
    Yields whether the block has the GPU to itself: held, or `on` with no lock at all (an inline
    pair: its judge and its calls are one process, one after the other, with no other side to wait
    for; other processes on the same GPU — pytest-xdist workers running inline pairs — share it as
    a sweep's other workers do)."""
    global _WAITED
    held = False
    if on and _LOCK is not None:
        start = time.monotonic()
        end = start + wait
        while not (held := _LOCK.acquire(timeout=min(SLICE, max(0.0, end - time.monotonic())))):
            if time.monotonic() >= end or gone():
                break
        _WAITED += time.monotonic() - start
    try:
        yield held or (on and _LOCK is None)
    finally:
        if held:
            _LOCK.release()
