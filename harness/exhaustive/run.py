"""The entry point of a run: the fused path, or the kept reference path."""
from __future__ import annotations

from typing import Callable

from harness.exhaustive.accumulate import Result
from harness.exhaustive.fused import run_fused
from harness.exhaustive.reference_path import run_reference_path


def run_exhaustive(dtype: str, impl: str = "torch", device: str = "cpu", x_range=(0, 1 << 16),
                   gate_range=(0, 1 << 16), dy: float = 1.0, chunk: int = 1 << 22,
                   impl_fn: Callable | None = None, progress: Callable[[str], None] | None = None,
                   compile: bool | None = None, reference: bool = False,
                   max_x_tiles: int | None = None) -> Result:
    """Every finite (x, gate) pair of the ranges through the implementation, against the exact values.

    reference=True runs the original path (`run_reference_path`). max_x_tiles limits the x tiles
    per gate block (a warm-up that compiles the exact tile shapes of a full run)."""
    if reference:
        return run_reference_path(dtype, impl, device, x_range, gate_range, dy, chunk, impl_fn, progress, compile)
    return run_fused(dtype, impl, device, x_range, gate_range, dy, chunk, impl_fn, progress, compile, max_x_tiles)
