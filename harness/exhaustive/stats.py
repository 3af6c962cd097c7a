"""One output of one tile: its statistics vector (one pass over the tile, on the device), folded into
an Acc on the host, and the worst-pair search.

A tile is c [R, C] (the implementation's values, rows = x values, columns = gates) against
v = xm[r0 + row] * T[col] with gauge ax[r0 + row] * G[col] (the closed forms' Gauged products:
y = x silu, dn = dy silu, dgate = (dy x) silu'). The pass, eager torch (`eager_stats`) or the
Triton kernel (`triton_pass`), returns the same vector (layout below), the maxima of each block
of BLOCK consecutive elements, and the mask of certification candidates. The worst pairs need
only the blocks whose maximum can enter the list: their elements are recomputed by
metrics.element_errors, which gives the pass's values bit for bit."""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from harness.exhaustive import triton_pass
from harness.exhaustive.accumulate import Acc, Worst
from harness.exhaustive.metrics import INNER_EDGES, N_BINS, TOPK, Consts, element_errors
from harness.references.formats import Format

BLOCK = triton_pass.BLOCK
# the statistics vector: three 16-bin histograms, two sums, four maxima
H_ULP, H_SC, H_FLAGS = 0, 16, 32
SUM_ULP, SUM_SC, MAX_ULP, MAX_SC, MAX_ABS, MAX_REL = range(48, 54)
VEC_LEN = 54
FLAG_MISM, FLAG_NONFIN, FLAG_CAND, FLAG_OVER = 1, 2, 4, 8
BACKENDS = ("auto", "eager", "triton")


@dataclass(frozen=True)
class Rows:
    """The x side of a tile's pairs, as full arrays indexed by r0 + row."""
    xm: torch.Tensor              # float64 row factor (x, dy*x, or [dy] for dn)
    ax: torch.Tensor              # its gauge factor (|x|, |dy x|, [|dy|])
    xv: torch.Tensor              # x values (float64; dn: the range's first x, standing for all)
    bits: torch.Tensor            # x bit patterns (int64, CPU)


@dataclass(frozen=True)
class Tile:
    output: str
    regime: str
    c: torch.Tensor               # [R, C] in the dtype
    rows: Rows
    r0: int
    T: torch.Tensor               # float64 column factor (silu or silu')
    G: torch.Tensor               # its gauge
    gv: torch.Tensor              # gate values (float64, device)
    g_bits: torch.Tensor          # gate bit patterns (int64, CPU)
    weight: int                   # pairs each element stands for (dn: every x value)
    k: Consts

    @property
    def n(self) -> int:
        return self.c.numel()

    def values_at(self, flat: torch.Tensor):
        """Row, column, v and gauge of flat element indices: the same float64 products as the pass."""
        C = self.c.shape[-1]
        row, col = flat // C, flat % C
        ri = row + self.r0
        return row, col, self.rows.xm[ri] * self.T[col], self.rows.ax[ri] * self.G[col]

    def full_values(self):
        R = self.c.numel() // self.c.shape[-1]
        xm, ax = self.rows.xm[self.r0:self.r0 + R], self.rows.ax[self.r0:self.r0 + R]
        return xm[:, None] * self.T[None, :], ax[:, None] * self.G[None, :]


@dataclass(frozen=True)
class TileStats:
    vec: torch.Tensor             # float64 [VEC_LEN] on the device
    bmax: torch.Tensor            # float64 [blocks, 2]: max ulp, max scaled of each BLOCK elements
    cand: torch.Tensor            # [R, C] candidate mask (bool or int8)


_DEV_CONST: dict = {}


def _dev_const(key, values, dtype, dev) -> torch.Tensor:
    k = (key, dtype, str(dev))
    t = _DEV_CONST.get(k)
    if t is None:
        t = _DEV_CONST[k] = torch.tensor(values, dtype=dtype, device=dev)
    return t


def eager_stats(t: Tile, fmt: Format) -> TileStats:
    """The pass in eager torch (the CPU path, and the fallback anywhere)."""
    v, ga = t.full_values()
    el = element_errors(t.c, v, ga, fmt, t.k)
    dev = v.device
    edges = _dev_const("edges", INNER_EDGES, torch.float64, dev)

    def hist(x):
        return torch.bincount(x.reshape(-1), minlength=16).to(torch.float64)
    flags = (el.mism.to(torch.int64) | (el.nonfin.to(torch.int64) << 1) | (el.cand.to(torch.int64) << 2)
             | (el.over.to(torch.int64) << 3))
    err, sc = el.err.reshape(-1), el.scaled.reshape(-1)
    vec = torch.cat([hist(torch.bucketize(err, edges)), hist(torch.bucketize(sc, edges)), hist(flags),
                     torch.stack([err.sum(), sc.sum(), err.max(), sc.max(), el.abs.max(), el.rel.max()])])
    pad = -err.numel() % BLOCK
    both = torch.nn.functional.pad(torch.stack([err, sc], 1), (0, 0, 0, pad))
    return TileStats(vec, both.reshape(-1, BLOCK, 2).amax(1), el.cand)


def triton_stats(t: Tile, fmt: Format) -> TileStats:
    dev = t.c.device
    kvec = _dev_const(("k", t.k), t.k.vector(), torch.float64, dev)
    part_h, part_f, cand = triton_pass.launch(t.c, t.rows.xm, t.rows.ax, t.r0, t.T, t.G, kvec, fmt.emin,
                                              fmt.precision - 1, INNER_EDGES)
    vec = torch.cat([part_h.sum(0, dtype=torch.int64).to(torch.float64), part_f[:, :2].sum(0),
                     part_f[:, 2:].amax(0)])
    return TileStats(vec, part_f[:, 2:4], cand)


class TilePass:
    """The pass a run uses: Triton on CUDA where Triton is installed ("auto"), else eager. A Triton
    failure (no compiler for this GPU, a broken install) warns once and falls back to eager."""

    def __init__(self, backend: str, dev: torch.device):
        if backend not in BACKENDS:
            raise ValueError(f"exhaustive backend {backend!r}: one of {', '.join(BACKENDS)}")
        if backend == "auto":
            backend = "triton" if dev.type == "cuda" and triton_pass.available() else "eager"
        if backend == "triton" and not triton_pass.available():
            raise ValueError("exhaustive backend 'triton': Triton is not installed")
        self.name = backend

    def __call__(self, t: Tile, fmt: Format) -> TileStats:
        if self.name == "triton":
            try:
                return triton_stats(t, fmt)
            except Exception as e:                     # noqa: BLE001 - any compile / launch failure
                print(f"exhaustive: the Triton tile pass failed ({type(e).__name__}: {e}); running eager",
                      file=sys.stderr)
                self.name = "eager"
        return eager_stats(t, fmt)


def fold(acc: Acc, st: list[float], n: int, weight: int) -> None:
    """Counts, sums and maxima of one tile's statistics vector (host list) into `acc`."""
    for name, off in (("hist_ulp", H_ULP), ("hist_scaled", H_SC)):
        h = getattr(acc, name)
        for i in range(N_BINS):
            h[i] += int(st[off + i]) * weight
    flags = st[H_FLAGS:H_FLAGS + 16]

    def count(bit):
        return sum(int(flags[i]) for i in range(16) if i & bit) * weight
    acc.mismatch += count(FLAG_MISM)
    acc.nonfinite += count(FLAG_NONFIN)
    acc.over += count(FLAG_OVER)
    acc.pairs += n * weight
    acc.sum_ulp += st[SUM_ULP] * weight
    acc.sum_scaled += st[SUM_SC] * weight
    acc.max_ulp = max(acc.max_ulp, st[MAX_ULP])
    acc.max_scaled = max(acc.max_scaled, st[MAX_SC])
    acc.max_abs = max(acc.max_abs, st[MAX_ABS])
    acc.max_rel = max(acc.max_rel, st[MAX_REL])


def candidates(st: list[float]) -> int:
    return int(sum(st[H_FLAGS + i] for i in range(16) if i & FLAG_CAND))


def update_worst(acc: Acc, metric: str, t: Tile, ts: TileStats, tile_max: float, fmt: Format) -> bool:
    """Merge the tile's TOPK worst pairs in `metric` into the list; False where the tile cannot
    change it (its maximum is below the current k-th key; an equal key can, by the bits order)."""
    kth = acc.kth_key(metric)
    if kth is not None and tile_max < kth:
        return False
    bm = ts.bmax[:, 0 if metric == "ulp" else 1]
    # every pair that can enter is >= the TOPK-th largest block maximum (with TOPK blocks or more,
    # there are TOPK pairs at least that large) and >= the list's k-th key: thr, the larger
    thr = torch.topk(bm, TOPK).values[-1] if bm.numel() >= TOPK else torch.zeros((), dtype=bm.dtype, device=bm.device)
    if kth is not None:
        thr = torch.clamp(thr, min=kth)
    # fewer than TOPK blocks exceed thr; of those that reach it exactly, the first TOPK hold TOPK
    # pairs at thr before any later block's (ties go by flat order): at most 2 TOPK - 1 blocks
    above, at = (bm > thr).nonzero().reshape(-1), (bm == thr).nonzero().reshape(-1)[:TOPK]
    blocks = torch.cat([above, at])
    flat = (blocks[:, None] * BLOCK + torch.arange(BLOCK, device=bm.device)[None, :]).reshape(-1)
    flat = flat[flat < t.n]
    row, col, v, ga = t.values_at(flat)
    c = t.c.reshape(-1)[flat]
    el = element_errors(c, v, ga, fmt, t.k)
    key = el.err if metric == "ulp" else el.scaled
    sel = (key >= thr).nonzero().reshape(-1)
    # flat order is (x, gate) order: sorted by index, then stably by key, ties stay in bits order
    sel = sel[torch.argsort(flat[sel])]
    top = sel[torch.sort(key[sel], descending=True, stable=True).indices[:TOPK]]
    ri, ci = row[top] + t.r0, col[top]
    cols = [key[top], ri, ci, t.rows.xv[ri], t.gv[ci], c[top].to(torch.float64), v[top], el.golden[top],
            el.err[top], el.scaled[top]]
    k_, r_, c_, xv, gv, got, ref, gold, e_u, e_s = (x.tolist() for x in cols)
    items = [Worst(k_[i], int(t.rows.bits[r_[i]]), int(t.g_bits[c_[i]]), xv[i], gv[i], got[i], ref[i], gold[i],
                   e_u[i], e_s[i]) for i in range(len(k_))]
    acc.add_worst(metric, items)
    return True
