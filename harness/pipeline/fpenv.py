"""The floating-point environment a process computes in: whether subnormals survive arithmetic.

Flush-to-zero and denormals-are-zero (x86's MXCSR FTZ/DAZ, which a library built with -Ofast or
-ffast-math turns on when it loads, and `torch.set_flush_denormal(True)`) are per-thread state that
lasts: a plug-in that turns them on changes every later computation of its thread — its own next
pair, another implementation's, and a reference computed there. The judging process checks it
before reference work; the implementation's process checks it around each pair and puts it back."""
from __future__ import annotations

import torch

# float32 and float64 subnormals (2^-140, 2^-1060): gone under DAZ on input or FTZ on output.
_F32, _F64 = 2.0 ** -140, 2.0 ** -1060
# elements per intra-op task of an elementwise kernel: enough of them reach every thread of the pool
_GRAIN = 32768


def flushes_subnormals(pool: bool = False) -> bool:
    """Whether subnormals flush to zero here: in Python's float arithmetic and this thread's torch
    kernels (~0.1 ms), and with `pool` on any thread of torch's intra-op pool, each of which has its
    own state (tens of ms on a busy machine: a process start's check, not a pair's)."""
    if _F64 * 1.5 == 0.0:
        return True
    if float(torch.tensor([_F32], dtype=torch.float32) * 1.5) == 0.0 or \
            float(torch.tensor([_F64], dtype=torch.float64) * 1.5) == 0.0:
        return True
    if not pool:
        return False
    many = torch.full((_GRAIN * max(2, torch.get_num_threads()),), _F32, dtype=torch.float32)
    return bool(((many * 1.5) == 0).any())


def restore(pool: bool = False) -> bool:
    """Turn flushing off in this thread (torch.set_flush_denormal); True when subnormals then
    survive wherever flushes_subnormals(pool) looks."""
    torch.set_flush_denormal(False)
    return not flushes_subnormals(pool)


WHAT = "subnormals flush to zero (FTZ/DAZ: torch.set_flush_denormal(True), or a library built with -Ofast)"
