"""A worker's GPU, shared by its two processes: the judge's work on the GPU (a big case's
references and checks, harness.pipeline.serve) and the implementation's timed calls
(harness.pipeline.call) never run at once, so that a speed figure is the implementation's kernels
alone, not the kernels beside the judge's float64 passes (on the H200, a pair timed while its
judge worked read 2.72 ms for 2.34: bench/RESULTS.md).

One lock per worker, made before the fork, so that both sides hold the same one. The other
workers of a sweep on the same GPU are not held back: a speed figure under --jobs N shares the GPU
with them (bench/bench_speed.py runs one worker). Neither side trusts the other to let go: a wait
ends after its limit and the work goes on unheld — a verdict never waits on a lock, and the
implementation's process, whose code is not trusted, can delay the judge by at most JUDGE_WAIT."""
from __future__ import annotations

import multiprocessing
from contextlib import contextmanager

JUDGE_WAIT = 30.0         # seconds the judge waits for the implementation's timing to end
TIMING_WAIT = 120.0       # seconds the implementation's timing waits for the judge's GPU work

_LOCK = None


def create() -> None:
    """This worker's lock: called once in its process before it forks its two sides."""
    global _LOCK
    _LOCK = multiprocessing.get_context("fork").Lock()


@contextmanager
def alone(on: bool, wait: float):
    """Hold the worker's GPU for the block where `on` (the work is on the GPU), waiting at most
    `wait` seconds; no lock (inline pairs: one process), or not `on`, holds nothing. Yields
    whether it is held."""
    held = bool(on and _LOCK is not None and _LOCK.acquire(timeout=wait))
    try:
        yield held
    finally:
        if held:
            _LOCK.release()
