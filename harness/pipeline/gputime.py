"""The GPU time of one forward + backward: what the kernels take, without the host's Python and
launch overhead (which, for a sub-millisecond fused call, is most of the wall time and varies by up
to 2x from run to run: bench/RESULTS.md).

Two ways, the first that works:
- `graph`: the call captured once in a CUDA graph and replayed back to back between two events.
  Trusted only if a replay reproduces the judged first call's outputs bit for bit (a call whose
  work depends on the host — a data-dependent branch, a host sync, a launch the capture did not
  see — is not what the graph replays).
- `profiler`: torch.profiler over eager calls, the device events' (kernels, copies, fills) summed
  durations per call.

Timing never changes a verdict: it runs after the judged call, the repeat checks and the wall
timing, on copies of its own; whatever fails here (a plug-in that cannot be captured, a profiler
that cannot start) leaves the GPU columns empty, never an error row. A failed capture is ended on
its own stream and the caller's stream put back: the implementation's process is never left
capturing."""
from __future__ import annotations

import math
import time
from typing import Callable

import torch

from harness.references.errors import out_of_memory

# Replays (or profiled calls) timed together: enough that the first launch's latency is under 1 %
# of the window, at most this many seconds of GPU time.
WINDOW_SECONDS = 0.01
MAX_CALLS = 1000
WINDOWS = 3                  # the median of this many windows


def _calls_for(seconds: float, least: int) -> int:
    return int(min(MAX_CALLS, max(least, math.ceil(WINDOW_SECONDS / max(seconds, 1e-7)))))


def capture(prepare: Callable[[], object], run: Callable[[object], dict], warmups: int = 2):
    """(CUDAGraph, the static outputs it writes) of `run(prepare())`: one forward + backward on
    fresh inputs (prepared outside the capture: the copies are not the call's work), warmed up on a
    side stream as torch requires; raises if it cannot be captured, with the caller's stream
    restored and no capture left open."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            run(prepare())
    torch.cuda.current_stream().wait_stream(side)
    call = prepare()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):           # its __exit__ restores the stream whatever happens below
        # thread_local: another thread's CUDA calls (a plug-in's) neither fail nor spoil the capture
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            outputs = run(call)
        finally:
            # on the capturing stream, even where `run` raised or left another stream current
            with torch.cuda.stream(side):
                graph.capture_end()
    torch.cuda.synchronize()
    return graph, outputs


def replay_seconds(graph, least: int) -> float:
    """Median over WINDOWS of one replay's GPU time, each window `least` or more replays back to back."""
    graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    n = _calls_for(time.perf_counter() - t0, least)
    times = []
    for _ in range(WINDOWS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / n)
    return sorted(times)[len(times) // 2]


def device_seconds(events) -> float:
    """The summed duration, in seconds, of the device-side events (kernels, copies, fills) among a
    profiler's events."""
    from torch.autograd import DeviceType
    return sum(e.time_range.elapsed_us() for e in events if e.device_type == DeviceType.CUDA) / 1e6


def profiler_seconds(prepare: Callable[[], object], run: Callable[[object], dict], least: int) -> float:
    """The device time per call of `run`, summed by torch.profiler over `least` calls on inputs
    prepared before it starts."""
    from torch.profiler import ProfilerActivity, profile
    calls = [prepare() for _ in range(least)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for call in calls:
            run(call)
        torch.cuda.synchronize()
    seconds = device_seconds(prof.events())
    if not seconds > 0:
        raise RuntimeError("the profiler saw no device time")
    return seconds / least


# The implementations (by `key`) whose call, in this process, raised in the capture (not for want of
# memory: that may be one case's size): later pairs go straight to the profiler instead of paying a
# capture attempt each (and some torch versions leak a private memory pool on a failed capture). A
# replay that did not give the judged bits is not remembered: it may be one case's.
NO_GRAPH: set[str] = set()


def gpu_time(prepare: Callable[[], object], run: Callable[[object], dict], first: dict,
             same: Callable[[dict, dict], bool], least: int, key: str = "") -> tuple[float, str]:
    """(seconds of GPU time per call, "graph" or "profiler"), or (NaN, "") where neither worked;
    never raises for what the implementation does. `same(first, outputs)`: whether a replay's
    outputs are the judged call's, bit for bit. `key`: the implementation's name, remembered in
    NO_GRAPH when its capture raises ("" remembers nothing)."""
    if key not in NO_GRAPH:
        try:
            graph, outputs = capture(prepare, run)
            graph.replay()
            torch.cuda.synchronize()
            if same(first, outputs):
                return replay_seconds(graph, least), "graph"
        except BaseException as e:    # noqa: BLE001 — not capturable (a plug-in's SystemExit too): the profiler's way
            if isinstance(e, KeyboardInterrupt):
                raise
            settle()
            if key and not out_of_memory(e):
                NO_GRAPH.add(key)
    try:
        return profiler_seconds(prepare, run, least), "profiler"
    except BaseException as e:    # noqa: BLE001 — no GPU time: the columns stay empty
        if isinstance(e, KeyboardInterrupt):
            raise
        settle()
        return math.nan, ""


def settle() -> None:
    """After a failed capture or profile: wait for the device (a non-sticky capture error is
    cleared by then); a device that no longer answers is for the next call to report."""
    try:
        torch.cuda.synchronize()
    except Exception:             # noqa: BLE001
        pass
