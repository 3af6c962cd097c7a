"""What is enumerated: 16-bit pattern ranges and their finite values, the regime split of the gates,
the gate blocks (the unit of progress and resume), the x tiles, and the per-gate float64 tables.

Invariants:
* a gate block is the finite gates of one aligned span of GATE_BLOCK bit patterns within the gate
  range, so blocks are the same whatever the chunk, and a resumed run can skip finished ones;
* within a block, gates are split by regime (normal / extreme = gate < EXTREME_GATE, where float32
  silu becomes subnormal or flushes to -0) and kept in ascending bit order; x values likewise;
* the float64 tables (silu, silu' and their gauges) are references.closed_forms.silu_terms over
  the Gauged float64 arithmetic, evaluated once on the CPU over all 65536 patterns of the dtype and
  indexed by a gate's bits: float64 sigmoid on the CPU depends on an element's position in the
  vector (vectorised body and scalar tail differ in the last bit), so one canonical table makes
  every sub-range, chunk and device see the same reference values.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from harness.references.closed_forms import silu_terms
from harness.references.errors import UsageError
from harness.references.exact import FLOAT64, Gauged
from harness.references.formats import Format, fmt_of
from harness.references.models import resolve

OUTPUTS = ("y", "dn", "dgate")
REGIMES = ("normal", "extreme")
EXTREME_GATE = -87.0                   # gates below: float32 silu subnormal or flushed (extreme)
GATE_BLOCK = 1 << 12                   # bit patterns per gate block (progress / resume unit)
CUDA_CHUNK = 1 << 26                   # pairs per tile on CUDA
CPU_CHUNK = 1 << 20                    # pairs per tile on the CPU (float64 temporaries fit in cache-ish sizes)
MAX_TILE = (1 << 31) - 1               # the Triton kernel indexes a tile with int32


def default_chunk(device: str | torch.device) -> int:
    """Pairs per tile when --chunk is not given: what the CLI and the bench both use."""
    return CUDA_CHUNK if torch.device(device).type == "cuda" else CPU_CHUNK


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


def pattern_values(lo: int, hi: int, dtype: torch.dtype) -> torch.Tensor:
    """The values of bit patterns lo..hi-1 (CPU), NaN and inf included."""
    bits = torch.arange(lo, hi, dtype=torch.int32)
    return torch.where(bits >= 1 << 15, bits - (1 << 16), bits).to(torch.int16).view(dtype)


def finite_values(lo: int, hi: int, dtype: torch.dtype, device) -> torch.Tensor:
    v = pattern_values(lo, hi, dtype)
    return v[torch.isfinite(v)].to(device)


def bits_of(v: torch.Tensor) -> torch.Tensor:
    """16-bit patterns (as non-negative int64) of bf16 / fp16 values."""
    return v.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF


def case_hash(dtype: str, xr, gr, dy_bits: int) -> str:
    key = f"{dtype}:{xr[0]:x}:{xr[1]:x}:{gr[0]:x}:{gr[1]:x}:{dy_bits:x}"
    return hashlib.sha1(key.encode()).hexdigest()[:8]


_TABLES: dict = {}


def gate_table(fmt: Format) -> torch.Tensor:
    """[4, 65536] float64 on the CPU, indexed by a gate's bits: silu, its gauge, silu', its gauge
    (references.closed_forms.silu_terms over Gauged float64)."""
    tab = _TABLES.get(fmt.name)
    if tab is None:
        t = pattern_values(0, 1 << 16, fmt.dtype).to(torch.float64)
        silu, dsilu = silu_terms(Gauged(t, t.abs()), FLOAT64)
        tab = _TABLES[fmt.name] = torch.stack([silu.v, silu.g, dsilu.v, dsilu.g])
    return tab


@dataclass(frozen=True)
class GateSet:
    """The gates of one (block, regime): values (dtype, on the device), bits (CPU) and tables."""
    regime: str
    gs: torch.Tensor              # gate values, dtype, on the device
    bits: torch.Tensor            # their patterns (int64, CPU)
    S: torch.Tensor               # silu (float64, device)
    Sg: torch.Tensor              # silu's gauge |t| s
    D: torch.Tensor               # silu'
    Dg: torch.Tensor              # silu''s gauge s (1 + |t| sigmoid(-t))


@dataclass(frozen=True)
class Block:
    lo: int                       # gate bit patterns [lo, hi)
    hi: int
    sets: tuple                   # GateSet per non-empty regime, normal first


@dataclass
class Setup:
    """A run's checked arguments and enumerated values."""
    fmt: Format
    rounding: str
    fn: Callable
    dev: torch.device
    xs: torch.Tensor              # finite x values of the range (dtype, on dev), ascending bits
    x_bits: torch.Tensor          # their patterns (int64, CPU)
    gate_range: tuple[int, int]
    n_gates: dict                 # regime -> finite gates of the range in that regime
    dy_t: torch.Tensor            # dy rounded to the dtype (0-dim, on dev)
    dy_v: float
    dy_bits: int

    def blocks(self, skip=frozenset()) -> Iterator[Block]:
        """The gate blocks of the range in order, those in `skip` ((lo, hi) pairs) left out."""
        lo, hi = self.gate_range
        tab = gate_table(self.fmt).to(self.dev)                # indexed on the device: one copy a gate set
        pat = pattern_values(0, 1 << 16, self.fmt.dtype).to(self.dev)
        for b0 in range(lo - lo % GATE_BLOCK, hi, GATE_BLOCK):
            blo, bhi = max(lo, b0), min(hi, b0 + GATE_BLOCK)
            if (blo, bhi) in skip:
                continue
            g = pattern_values(blo, bhi, self.fmt.dtype)
            bits = torch.arange(blo, bhi, dtype=torch.int64)
            fin = torch.isfinite(g)
            g, bits = g[fin], bits[fin]
            extreme = g.float() < EXTREME_GATE
            sets = []
            for regime, sel in (("normal", ~extreme), ("extreme", extreme)):
                if bool(sel.any()):
                    b = bits[sel]
                    bd = b.to(self.dev)
                    sets.append(GateSet(regime, pat[bd], b, *(tab[i, bd] for i in range(4))))
            yield Block(blo, bhi, tuple(sets))

    def block_spans(self) -> list[tuple[int, int]]:
        lo, hi = self.gate_range
        return [(max(lo, b0), min(hi, b0 + GATE_BLOCK)) for b0 in range(lo - lo % GATE_BLOCK, hi, GATE_BLOCK)]


def setup(dtype: str, impl: str, device: str, x_range, gate_range, dy: float,
          impl_fn: Callable | None = None) -> Setup:
    from harness.exhaustive.impls import IMPLS
    fmt = fmt_of(dtype)
    dt = fmt.dtype
    if impl_fn is None and impl not in IMPLS:
        raise UsageError(f"--impl {impl}: the exhaustive mode runs SiLUGate alone, as {', '.join(IMPLS)} "
                         f"(the sweep's implementations are whole gated norms)")
    rounding, fn = IMPLS[impl] if impl_fn is None else ("chain", impl_fn)
    rounding = resolve(rounding).name                  # a model of the shared registry
    dev = torch.device(device)
    xv = pattern_values(*x_range, dt)
    xfin = torch.isfinite(xv)
    g_all = pattern_values(*gate_range, dt)
    g_all = g_all[torch.isfinite(g_all)]
    if not bool(xfin.any()) or g_all.numel() == 0:
        raise UsageError("the ranges hold no finite values")
    dy_t = torch.tensor(dy, dtype=torch.float64).to(dt)
    dy_v = float(dy_t)
    if not math.isfinite(dy_v):
        raise UsageError(f"--dy {dy}: not finite in {dtype}")
    dy_bits = int(bits_of(dy_t.reshape(1))[0])
    n_ext = int((g_all.float() < EXTREME_GATE).sum())
    return Setup(fmt, rounding, fn, dev, xv[xfin].to(dev), torch.arange(*x_range, dtype=torch.int64)[xfin],
                 tuple(gate_range), {"normal": g_all.numel() - n_ext, "extreme": n_ext}, dy_t.to(dev), dy_v,
                 dy_bits)


def x_tiles(n_x: int, n_gates: int, chunk: int) -> Iterator[tuple[int, int]]:
    """(x0, x1) row spans of the tiles of one gate set: about `chunk` pairs a tile."""
    bx = max(1, min(chunk, MAX_TILE) // max(n_gates, 1))
    for x0 in range(0, n_x, bx):
        yield x0, min(n_x, x0 + bx)
