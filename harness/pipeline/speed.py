"""A pair's speed figures on a GPU: its GPU time (harness.pipeline.gputime) beside the wall time
per call, and the share of the bandwidth floor that GPU time reaches — the bytes the call must move
at least (harness.pipeline.call.bytes_moved), over what a device-to-device copy moves in the same
time."""
from __future__ import annotations

import math
from typing import Callable

import torch

from harness.analysis.result import Speed


def gpu_speed(new_call: Callable[[], object], run: Callable[[object], dict], first: dict,
              same: Callable[[dict, dict], bool], repeats: int, wall: float, moved: Callable[[], int],
              device: str, name: str = "") -> Speed:
    """The call's GPU time beside its wall time `wall`: `new_call()` a call on fresh copies,
    `run(call)` its outputs, `same(first, outputs)` whether they are the judged ones bit for bit,
    `moved()` its bytes. Everything compared is already compared: whatever goes wrong here (the
    capture, the profiler, the bandwidth probe's memory) leaves the GPU columns empty and never
    touches a verdict."""
    from harness.pipeline.gputime import gpu_time
    try:
        seconds, method = gpu_time(new_call, run, first, same, repeats, key=name)
        nbytes = moved()
        floor = nbytes / copy_bandwidth(device) / seconds if seconds > 0 else math.nan   # NaN: no GPU time
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        return Speed(wall)
    return Speed(wall, seconds, method, nbytes, floor)


_BANDWIDTH: dict = {}


def copy_bandwidth(device: str) -> float:
    """Bytes per second a device-to-device copy of 1 GiB moves (read + write), measured once."""
    if device not in _BANDWIDTH:
        a = torch.empty(1 << 30, dtype=torch.uint8, device=device)
        b = torch.empty_like(a)
        b.copy_(a)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            b.copy_(a)
        end.record()
        end.synchronize()
        _BANDWIDTH[device] = 10 * 2 * a.numel() / (start.elapsed_time(end) / 1e3)
        del a, b
    return _BANDWIDTH[device]
