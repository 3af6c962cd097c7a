"""What is enumerated: 16-bit pattern ranges, their finite values, the regime split of the gates,
the gate blocks with their float64 tables (references.exact.silu_parts) and the x tiles."""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from harness.references.errors import UsageError
from harness.exhaustive.impls import IMPLS
from harness.references.exact import silu_parts
from harness.references.formats import Format, fmt_of

OUTPUTS = ("y", "dn", "dgate")
REGIMES = ("normal", "extreme")
EXTREME_GATE = -87.0                   # gates below: float32 silu subnormal or flushed (extreme)


def parse_range(text: str | None, what: str) -> tuple[int, int]:
    if text is None:
        return 0, 1 << 16
    try:
        lo_s, hi_s = text.split(":")
        lo, hi = int(lo_s.strip(), 0), int(hi_s.strip(), 0)
    except ValueError:
        raise UsageError(f"{what} {text!r}: expected LO:HI bit patterns (hex 0x.. or int), half-open") from None
    if not (0 <= lo < hi <= 1 << 16):
        raise UsageError(f"{what} {text!r}: need 0 <= LO < HI <= 0x10000 (16-bit patterns)")
    return lo, hi


def finite_values(lo: int, hi: int, dtype: torch.dtype, device) -> torch.Tensor:
    bits = torch.arange(lo, hi, dtype=torch.int32)
    bits = torch.where(bits >= 1 << 15, bits - (1 << 16), bits).to(torch.int16)
    v = bits.view(dtype)
    return v[torch.isfinite(v)].to(device)


def bits_of(v: torch.Tensor) -> torch.Tensor:
    """16-bit patterns (as non-negative int64) of bf16 / fp16 values."""
    return v.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF


def case_hash(dtype: str, xr, gr, dy_bits: int) -> str:
    key = f"{dtype}:{xr[0]:x}:{xr[1]:x}:{gr[0]:x}:{gr[1]:x}:{dy_bits:x}"
    return hashlib.sha1(key.encode()).hexdigest()[:8]


@dataclass
class Setup:
    """A run's checked arguments and enumerated values (shared by the fused and reference paths)."""
    fmt: Format
    rounding: str
    fn: Callable
    dev: torch.device
    xs: torch.Tensor              # finite x values of the range (dtype, on dev)
    gsets: dict                   # regime -> finite gate values of the range in that regime
    n_gates: int                  # all finite gates of the range
    dy_t: torch.Tensor            # dy rounded to the dtype (0-dim, on dev)
    dy_v: float
    dy_bits: int
    compile: bool


def setup(dtype: str, impl: str, device: str, x_range, gate_range, dy: float, impl_fn: Callable | None,
          compile: bool | None) -> Setup:
    fmt = fmt_of(dtype)
    dt = fmt.dtype
    rounding, fn = IMPLS[impl] if impl_fn is None else ("chain", impl_fn)
    dev = torch.device(device)
    xs = finite_values(*x_range, dt, dev)
    gs_all = finite_values(*gate_range, dt, dev)
    if xs.numel() == 0 or gs_all.numel() == 0:
        raise UsageError("the ranges hold no finite values")
    dy_t = torch.tensor(dy, dtype=torch.float64).to(dt).to(dev)
    dy_v = float(dy_t)
    dy_bits = int(bits_of(dy_t.reshape(1).cpu())[0])
    if not math.isfinite(dy_v):
        raise UsageError(f"--dy {dy}: not finite in {dtype}")
    if compile is None:                 # default: fuse on CUDA; HARNESS_EXHAUSTIVE_COMPILE=0/1 overrides
        env = os.environ.get("HARNESS_EXHAUSTIVE_COMPILE")
        compile = dev.type == "cuda" if env is None else env not in ("0", "", "false", "no")
    extreme = gs_all.float() < EXTREME_GATE
    gsets = {"normal": gs_all[~extreme], "extreme": gs_all[extreme]}
    return Setup(fmt, rounding, fn, dev, xs, gsets, gs_all.numel(), dy_t, dy_v, dy_bits, compile)


def gate_blocks(gsr: torch.Tensor, chunk: int) -> Iterator[tuple]:
    """Blocks of at most `chunk` gates of one regime, each with its float64 table (S, D, DA) =
    (silu, silu', |silu'| gauge), computed per block: float64 sigmoid on the CPU is position
    dependent (vectorised and scalar tails differ in the last bit), so the blocking is part of the
    result."""
    bg = min(gsr.numel(), chunk)
    for g0 in range(0, gsr.numel(), max(bg, 1)):
        gb = gsr[g0:g0 + bg]
        _, S, D, DA = silu_parts(gb.double())
        yield gb, S, D, DA


def pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    if t.shape[0] == rows:
        return t
    out = t.new_zeros((rows,) + tuple(t.shape[1:]))
    out[:t.shape[0]] = t
    return out
