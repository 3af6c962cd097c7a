"""The float64 reference pass against the memory-bandwidth floor: references.accel.exact_outputs at
8192 x 4096 bf16 (the values of y, dx, dgate, dweight and the gauges of dx, dgate, dweight), per
backend — the Triton kernel (what "auto" runs there), Inductor's compiled closed forms, and eager —
timed with CUDA events over --repeat back-to-back calls after a warm-up. The floor (as in every earlier
run, docs/performance.md) is reading x, gate, dy once and writing y, dx, dgate once in float64 — 30
bytes an element — at the copy bandwidth measured in the same process; the gauges the pass also
writes make 65 % of that floor the ceiling.

    python3 bench/bench_reference.py [--repeat 50] [--shape 8192,4096]"""
from __future__ import annotations

import argparse
import sys

import torch

from harness.pipeline.speed import copy_bandwidth
from harness.references import accel
from harness.references.accel import triton_regs
from harness.references.accel.inductor import exact_outputs_compiled
from harness.references.exact import Inputs, exact_outputs


def inputs(shape) -> Inputs:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(shape, generator=g, device="cuda").bfloat16()
    t = (3 * torch.randn(shape, generator=g, device="cuda")).bfloat16()
    w = (1 + 0.1 * torch.randn(shape[-1], generator=g, device="cuda")).bfloat16()
    dy = torch.randn(shape, generator=g, device="cuda").bfloat16()
    return Inputs(x, t, w, dy, 1e-5, False)


def timed(fn, inp, repeat: int) -> float:
    fn(inp)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(repeat):
        fn(inp)
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3 / repeat


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--shape", default="8192,4096")
    args = ap.parse_args()
    shape = tuple(int(s) for s in args.shape.split(","))
    inp = inputs(shape)
    n, h = inp.x.numel(), inp.hidden
    moved = n * (3 * 2 + 3 * 8) + h * 8                  # x, gate, dy in (bf16); y, dx, dgate out (float64); dweight
    bw = copy_bandwidth("cuda")
    floor = moved / bw
    print(f"{shape} bf16: {moved / 1e9:.3f} GB to move; copy bandwidth {bw / 1e12:.2f} TB/s; floor {floor * 1e3:.3f} ms")
    print(f"auto picks: {accel.pass_for(inp)}")
    for name, fn in (("triton (regs)", triton_regs.exact_outputs), ("inductor", exact_outputs_compiled),
                     ("eager", exact_outputs)):
        try:
            t = timed(fn, inp, args.repeat if name != "eager" else 3)
            print(f"{name:14s} {t * 1e3:8.3f} ms  {100 * floor / t:5.1f} % of the floor")
        except Exception as e:                          # noqa: BLE001 - reported
            print(f"{name:14s} failed: {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
