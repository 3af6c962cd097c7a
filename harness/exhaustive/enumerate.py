"""What is enumerated: 16-bit pattern ranges and their finite values, the regime split of the gates,
the gate blocks (the unit of progress and resume), the x tiles, and the per-gate float64 tables.

Invariants:
* a gate block is the finite gates of one aligned span of GATE_BLOCK bit patterns within the gate
  range, so blocks are the same whatever the chunk, and a resumed run can skip finished ones;
* within a block, gates are split by regime (normal / extreme = gate < EXTREME_GATE, where float32
  silu or sigmoid becomes subnormal or flushes to 0 / saturated, sigmoid only: gate > the format's
  `saturation`, where a float32 sigmoid is so close to 1 that s (1 - s) loses dgate — see there)
  and kept in ascending bit order; x values likewise;
* the float64 tables (the activation, its derivative and their gauges) are
  references.closed_forms.gate_terms over the Gauged float64 arithmetic, evaluated once on the CPU over all 65536 patterns of the dtype and
  indexed by a gate's bits: float64 sigmoid on the CPU depends on an element's position in the
  vector (vectorised body and scalar tail differ in the last bit), so one canonical table makes
  every sub-range, chunk and device see the same reference values.
"""
from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from harness.references.closed_forms import ACTIVATIONS, gate_terms
from harness.references.errors import UsageError
from harness.references.exact import FLOAT64, Gauged
from harness.references.formats import Format, fmt_of
from harness.references.models import resolve
from harness.references.models.noise import SIGMOID32, U32

OUTPUTS = ("y", "dn", "dgate")
REGIMES = ("normal", "extreme", "saturated")
EXTREME_GATE = -87.0                   # gates below: float32 silu / sigmoid subnormal or flushed (extreme)
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


def case_hash(dtype: str, xr, gr, dy_bits: int, activation: str = "silu") -> str:
    key = f"{dtype}:{xr[0]:x}:{xr[1]:x}:{gr[0]:x}:{gr[1]:x}:{dy_bits:x}"
    if activation != "silu":           # silu's hashes (case ids, progress files) as before the axis
        key += f":{activation}"
    return hashlib.sha1(key.encode()).hexdigest()[:8]


def saturation(fmt: Format) -> float:
    """The gate above which a sigmoid gate's dgate is reported, not gated (regime `saturated`).

    A float32 sigmoid' = s (1 - s) loses s's own error SIGMOID32 u32 s in `1 - s` (for t > 16.6 a
    float32 s is 1 and s (1 - s) is 0): relative to dgate's gauge |dy x| s sigmoid(-t) that is
    SIGMOID32 u32 / sigmoid(-t), unbounded as t grows. The exact budget's final rounding leaves half
    a u_o of the output for it (its 1 in the scaled error is 0.5 of correct rounding and 0.5 of
    room): sigmoid(-t) >= 2 SIGMOID32 u32 / u_o, t <= ln(u_o / (2 SIGMOID32 u32) - 1) — bf16 9.01,
    fp16 6.93. (The sweep's model reference holds this absolute error per element instead.)"""
    return math.log(fmt.u / (2 * SIGMOID32 * U32) - 1)


def regimes_of(g: torch.Tensor, activation: str, fmt: Format) -> dict[str, torch.Tensor]:
    """Each regime's mask over gate values `g`."""
    gf = g.float()
    extreme = gf < EXTREME_GATE
    saturated = (gf > saturation(fmt)) if activation == "sigmoid" else torch.zeros_like(extreme)
    return {"normal": ~extreme & ~saturated, "extreme": extreme, "saturated": saturated}


_TABLES: dict = {}


def gate_table(fmt: Format, activation: str = "silu") -> torch.Tensor:
    """[4, 65536] float64 on the CPU, indexed by a gate's bits: the activation, its gauge, its
    derivative, its gauge (references.closed_forms.gate_terms over Gauged float64)."""
    tab = _TABLES.get((fmt.name, activation))
    if tab is None:
        t = pattern_values(0, 1 << 16, fmt.dtype).to(torch.float64)
        a, da = gate_terms(Gauged(t, t.abs()), FLOAT64, activation)
        tab = _TABLES[(fmt.name, activation)] = torch.stack([a.v, a.g, da.v, da.g])
    return tab


@dataclass(frozen=True)
class GateSet:
    """The gates of one (block, regime): values (dtype, on the device), bits (CPU) and tables."""
    regime: str
    gs: torch.Tensor              # gate values, dtype, on the device
    bits: torch.Tensor            # their patterns (int64, CPU)
    S: torch.Tensor               # the activation (float64, device): silu, or sigmoid
    Sg: torch.Tensor              # its gauge: |t| s, or s
    D: torch.Tensor               # its derivative: silu', or sigmoid' = s sigmoid(-t)
    Dg: torch.Tensor              # its gauge: s (1 + |t| sigmoid(-t)), or s sigmoid(-t)


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
    activation: str = "silu"

    def blocks(self, skip=frozenset()) -> Iterator[Block]:
        """The gate blocks of the range in order, those in `skip` ((lo, hi) pairs) left out."""
        lo, hi = self.gate_range
        tab = gate_table(self.fmt, self.activation).to(self.dev)   # indexed on the device: one copy a gate set
        pat = pattern_values(0, 1 << 16, self.fmt.dtype).to(self.dev)
        for b0 in range(lo - lo % GATE_BLOCK, hi, GATE_BLOCK):
            blo, bhi = max(lo, b0), min(hi, b0 + GATE_BLOCK)
            if (blo, bhi) in skip:
                continue
            g = pattern_values(blo, bhi, self.fmt.dtype)
            bits = torch.arange(blo, bhi, dtype=torch.int64)
            fin = torch.isfinite(g)
            g, bits = g[fin], bits[fin]
            sets = []
            for regime, sel in regimes_of(g, self.activation, self.fmt).items():
                if bool(sel.any()):
                    b = bits[sel]
                    bd = b.to(self.dev)
                    sets.append(GateSet(regime, pat[bd], b, *(tab[i, bd] for i in range(4))))
            yield Block(blo, bhi, tuple(sets))

    def block_spans(self) -> list[tuple[int, int]]:
        lo, hi = self.gate_range
        return [(max(lo, b0), min(hi, b0 + GATE_BLOCK)) for b0 in range(lo - lo % GATE_BLOCK, hi, GATE_BLOCK)]


def setup(dtype: str, impl: str, device: str, x_range, gate_range, dy: float,
          impl_fn: Callable | None = None, activation: str = "silu") -> Setup:
    from harness.exhaustive.impls import IMPLS
    fmt = fmt_of(dtype)
    dt = fmt.dtype
    if impl_fn is None and impl not in IMPLS:
        raise UsageError(f"--impl {impl}: the exhaustive mode runs SiLUGate alone, as {', '.join(IMPLS)} "
                         f"(the sweep's implementations are whole gated norms)")
    if activation not in ACTIVATIONS:
        raise UsageError(f"--activation {activation}: one of {', '.join(ACTIVATIONS)}")
    rounding, fn = IMPLS[impl] if impl_fn is None else ("chain", impl_fn)
    if impl_fn is None:
        fn = functools.partial(fn, activation=activation)
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
    n_gates = {r: int(sel.sum()) for r, sel in regimes_of(g_all, activation, fmt).items()}
    return Setup(fmt, rounding, fn, dev, xv[xfin].to(dev), torch.arange(*x_range, dtype=torch.int64)[xfin],
                 tuple(gate_range), n_gates, dy_t.to(dev), dy_v, dy_bits, activation)


def x_tiles(n_x: int, n_gates: int, chunk: int) -> Iterator[tuple[int, int]]:
    """(x0, x1) row spans of the tiles of one gate set: about `chunk` pairs a tile."""
    bx = max(1, min(chunk, MAX_TILE) // max(n_gates, 1))
    for x0 in range(0, n_x, bx):
        yield x0, min(n_x, x0 + bx)
