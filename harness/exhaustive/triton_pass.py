"""The tile pass as one hand-written Triton kernel (CUDA; Triton's interpreter on the CPU in tests).

It knows no gate activation: the activation enters only through the column factors T and G (the
per-gate float64 tables of enumerate.gate_table: silu or sigmoid, their derivatives and gauges) and
the computed values c, which the eager pass reads the same way — so a sigmoid sweep runs this very
kernel, equal to the eager pass by construction (tests/test_exhaustive.py runs sigmoid ranges
through both, in the interpreter or on CUDA).

One program takes BLOCK consecutive elements of a tile [R, C] (row-major: row = an x value, column
= a gate), forms v = xm[r0 + row] * T[col] and gauge = ax[r0 + row] * G[col] in float64, and
computes exactly harness.exhaustive.metrics.element_errors: the same IEEE operations in the same
order (v / q as v * (1/q), exact since q is a power of two; round-half-even as (r + 2**52) - 2**52;
|c - v| as max - min), with floating-point contraction off (enable_fp_fusion=False), so both passes
agree bit for bit. Each program writes one partial row: three 16-bin histograms (the ULP bin, the
scaled bin, and a 4-bit flag code mism | nonfin << 1 | cand << 2 | over << 3, so one histogram
counts all four flags) and six float64 (two sums, four maxima); and the candidate mask. The host
sums the rows (stats.triton_stats); the rows' maxima are the per-block maxima the worst-pair search
uses.

Compiled once per dtype per Triton cache: the integer arguments are not specialised (R = 1 for
dn, offsets, sizes), the float scalars come in a float64 tensor (a Python float would be passed as
float32), and every pointer is a fresh allocation (16-byte aligned). The computed values come in
as their 16-bit patterns and are decoded to float64 by integer operations (`_decode`): no
float32 conversion that could flush a subnormal (Triton's interpreter does)."""
from __future__ import annotations

import importlib.util

import torch

BLOCK = 1024
NUM_WARPS = 8
N_PART_H = 48                          # three 16-bin histograms
N_PART_F = 6                           # sum ulp, sum scaled, max ulp, max scaled, max abs, max rel


def available() -> bool:
    """Triton is installed (the CPU CI has none: the eager pass runs there)."""
    return importlib.util.find_spec("triton") is not None


_EDGES: dict = {}


def launch(c: torch.Tensor, xm: torch.Tensor, ax: torch.Tensor, r0: int, T: torch.Tensor, G: torch.Tensor,
           kvec: torch.Tensor, emin: int, pm1: int, inner_edges: tuple) -> tuple:
    """Partial rows (int32 [P, 48], float64 [P, 6]) and the int8 candidate mask of tile `c` [R, C]
    whose rows are xm[r0:r0 + R] (P = ceil(R C / BLOCK))."""
    dev = c.device
    n, ncols = c.numel(), c.shape[-1]
    edges = _EDGES.get(dev)
    if edges is None:
        edges = _EDGES[dev] = torch.tensor(inner_edges, dtype=torch.float64, device=dev)
    from harness.exhaustive.triton_kernel import stats_kernel
    progs = -(-n // BLOCK)
    part_h = torch.empty((progs, N_PART_H), dtype=torch.int32, device=dev)
    part_f = torch.empty((progs, N_PART_F), dtype=torch.float64, device=dev)
    cand = torch.empty(c.shape, dtype=torch.int8, device=dev)
    stats_kernel[(progs,)](c.view(torch.int16), xm, ax, T, G, kvec, edges, part_h, part_f, cand, n, ncols, r0,
                            EMIN=emin, PM1=pm1, NE=len(inner_edges), BLOCK=BLOCK, num_warps=NUM_WARPS,
                            enable_fp_fusion=False)
    return part_h, part_f, cand
