"""The fused path (default).

Per tile the GPU (or CPU) makes one fused pass over compact data: the implementation's outputs
(dtype) go in, x-dependent float64 products are formed in registers against per-gate-block
tables, and out come one small float64 vector of statistics per output (cumulative histogram
counts, sums, maxima, counts of mismatches / non-finite / over-budget / certification candidates)
plus one bool mask of candidates per output. The host reads the vector (the tile's one sync) and
touches the tile again only where needed: the candidate indices (nonzero) when the count is
non-zero, the top-k worst pairs only when the tile's maximum beats the current k-th worst.

Results equal the reference path's exactly (histograms, maxima, worst pairs, mismatch / certified /
uncertified counts; the float64 sums behind the means may differ in their last bits, being summed
in another order):
* the tiling is the same (pairs flagged for mpmath are taken in the same order, up to MP_CAP per
  tile; the closed forms below decide their pairs before that cap, so where a tile has more than
  MP_CAP undecided pairs the fused path certifies more of them than the reference path), the gate tables are computed per gate block as before (float64 sigmoid on the CPU is
  position dependent: vectorised and scalar tails differ in the last bit, so one 65536-entry table
  would change low bits of the reference values);
* every float64 operation is the same IEEE operation: v = x * S is one rounded product, v / q and
  dist / q become multiplications by the exact power of two 1/q (same real value, same rounding),
  and |c - v| is max(c, v) - min(c, v), so no compiler can contract the product v into an FMA
  (a*b+c contraction elsewhere only meets products that are exact: u*ga, (r-k), k*q);
* pairs that would go to mpmath are decided in closed form where the exact value is P*(1 + delta)
  with P exact in float64 and 2**-160 < |delta| < 2**-30 (tiny and large gates); there 50-digit
  mpmath returns the same value (tests check it), so counts do not change while no tile has more
  than MP_CAP undecided pairs.
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

from harness.exhaustive import certify
from harness.exhaustive.accumulate import Acc, Result, Ticker, pair_values, worst_pairs
from harness.exhaustive.certify import MP_CAP, closed_form_golden, near_exact_golden
from harness.exhaustive.enumerate import OUTPUTS, REGIMES, gate_blocks, pad_rows, setup
from harness.exhaustive.metrics import _EXP_MASK, EDGES, F64_BOUND, METRIC, TOPK, budget_for, elementwise, \
    kernel_args, use_compile
from harness.references.formats import Format

_INNER = tuple(EDGES[1:-1])
_NB = len(EDGES) - 1
_INV_BIAS = 2046 << 52                  # bits(1/q) = _INV_BIAS - bits(q) for a power of two q
# layout of one output's statistics vector
_S_GT_ULP, _S_GT_SC = 0, len(_INNER)
(_S_SUM_ULP, _S_SUM_SC, _S_MAX_ULP, _S_MAX_SC, _S_MAX_REL, _S_MAX_ABS,
 _S_MISM, _S_NONFIN, _S_CAND, _S_OVER) = range(2 * len(_INNER), 2 * len(_INNER) + 10)
_S_LEN = 2 * len(_INNER) + 10

_KERNEL_ARG_NAMES = ("u", "min_sub", "emin_bits", "pm1_bits", "bound", "fmax")


def _consts(output: str, regime: str, fmt: Format) -> dict:
    return dict(zip(_KERNEL_ARG_NAMES, kernel_args(output, fmt)),
                budget=budget_for(output, regime, fmt), scaled_key=METRIC[output] == "scaled")


def _stats_body(c_low, xm, T, ax, G, *, u, min_sub, emin_bits, pm1_bits, bound, fmax, budget, scaled_key,
                fused=False):
    """One output of one tile: `elementwise` on v = xm[:, None] * T[None, :] (gauge |v|, or
    ax[:, None] * G[None, :]) plus every reduction `analyse` needs, as one vector; and the mask of
    certification candidates. Zero padding (c = 0, xm = 0, ax = 0) contributes nothing."""
    f64 = torch.float64
    c = c_low.to(f64)
    v = xm[:, None] * T[None, :]
    ebits = torch.clamp(v.view(torch.int64) & _EXP_MASK, min=emin_bits)
    qbits = ebits - pm1_bits
    q = qbits.view(f64)
    inv_q = (_INV_BIAS - qbits).view(f64)
    r = v * inv_q                                      # == v / q (exact)
    k = torch.round(r)
    golden = k * q
    golden = torch.where(golden.abs() > fmax, torch.copysign(torch.full_like(golden, math.inf), v), golden)
    same = c == golden
    dist = (torch.maximum(c, v) - torch.minimum(c, v)).abs()          # == |c - v|, no FMA contraction
    dist = torch.where(same & torch.isinf(c), torch.zeros_like(dist), dist)
    dist = torch.nan_to_num(dist, nan=math.inf, posinf=math.inf)
    err = dist * inv_q                                 # == dist / q
    va = v.abs()
    ga = va if ax is None else ax[:, None] * G[None, :]
    scaled = dist / (u * ga + min_sub / 2)
    rel = torch.where(dist == 0, torch.zeros_like(dist), dist / va)
    cand = (r - k).abs() >= 0.5 - 2 * bound * ga * inv_q
    nonfin = ~torch.isfinite(c) & torch.isfinite(golden)
    key = scaled if scaled_key else err
    parts = [_gt_counts(err, fused)]
    parts.append(_gt_counts(scaled, fused) if scaled_key else torch.zeros(len(_INNER), dtype=f64, device=c.device))
    parts.append(torch.stack([err.sum(), scaled.sum(), err.amax(), scaled.amax(), rel.amax(), dist.amax(),
                              (~same).sum().to(f64), nonfin.sum().to(f64), cand.sum().to(f64),
                              (key > budget).sum().to(f64)]))
    return torch.cat(parts), cand


def _gt_counts(err: torch.Tensor, fused: bool) -> torch.Tensor:
    """count(err > edge) for the inner edges (float64). Fused: comparisons (reductions in the same
    kernel); eager: bucketize + bincount (two passes instead of twelve)."""
    if fused:
        return torch.stack([(err > e).sum() for e in _INNER]).to(torch.float64)
    edges = torch.tensor(_INNER, dtype=torch.float64, device=err.device)
    cnt = torch.bincount(torch.bucketize(err.reshape(-1), edges), minlength=_NB)
    return cnt.flip(0).cumsum(0).flip(0)[1:].to(torch.float64)


def _tile_body(cy, cg, x64, dyx, dyx_abs, S, D, DA, *, cy_k: dict, cg_k: dict):
    """y and dgate of one tile in one graph (one fused pass on the device)."""
    sy, cand_y = _stats_body(cy, x64, S, None, None, **cy_k)
    sg, cand_g = _stats_body(cg, dyx, D, dyx_abs, DA, **cg_k)
    return torch.cat([sy, sg]), cand_y, cand_g


_TILE_FNS: dict = {}


def _tile_fn(fmt: Format, regime: str, compiled: bool):
    key = (fmt.name, regime, compiled)
    fn = _TILE_FNS.get(key)
    if fn is None:
        cy_k, cg_k = _consts("y", regime, fmt), _consts("dgate", regime, fmt)
        cy_k["fused"] = cg_k["fused"] = compiled

        def body(cy, cg, x64, dyx, dyx_abs, S, D, DA):
            return _tile_body(cy, cg, x64, dyx, dyx_abs, S, D, DA, cy_k=cy_k, cg_k=cg_k)

        if compiled:
            from harness.references.fast import _inductor_options, _raise_recompile_limit
            _raise_recompile_limit()
            fn = torch.compile(body, dynamic=False, fullgraph=True, options=_inductor_options())
        else:
            fn = body
        _TILE_FNS[key] = fn
    return fn



@dataclass
class _Side:
    """Where a tile's pairs come from: x-side (rows) and gate-side (columns) values."""
    xs: torch.Tensor              # x values of the rows (dtype); for dn: rep_x
    gs: torch.Tensor              # gate values of the columns (dtype)
    xm: torch.Tensor              # float64 row multiplier (x, dy*x or [dy])
    T: torch.Tensor               # float64 column factor (S or D)
    ax: torch.Tensor | None       # |dy*x| rows (dgate gauge) or None
    G: torch.Tensor | None        # DA columns or None
    one_d: bool = False           # dn: per gate, x = rep_x for every pair


def _tile_values(side: _Side, ix: torch.Tensor, ig: torch.Tensor):
    """v and gauge at (row, column) pairs: the same IEEE products as the full tile."""
    v = side.xm[ix] * side.T[ig]
    ga = v.abs() if side.ax is None else side.ax[ix] * side.G[ig]
    return v, ga


def _fold(output: str, regime: str, acc: Acc, st: list, n_pairs: int, weight: int) -> None:
    """Counts, sums and maxima of one tile's statistics vector into `acc`."""
    gt = st[_S_GT_ULP:_S_GT_ULP + len(_INNER)]
    h = [n_pairs - gt[0]] + [gt[i - 1] - gt[i] for i in range(1, len(_INNER))] + [gt[-1]]
    h = torch.tensor([int(n) for n in h], dtype=torch.int64) * weight
    acc.hist_ulp = h if acc.hist_ulp is None else acc.hist_ulp + h
    if METRIC[output] == "scaled":
        gt = st[_S_GT_SC:_S_GT_SC + len(_INNER)]
        h = [n_pairs - gt[0]] + [gt[i - 1] - gt[i] for i in range(1, len(_INNER))] + [gt[-1]]
        h = torch.tensor([int(n) for n in h], dtype=torch.int64) * weight
        acc.hist_scaled = h if acc.hist_scaled is None else acc.hist_scaled + h
    acc.pairs += n_pairs * weight
    acc.sum_ulp += st[_S_SUM_ULP] * weight
    acc.sum_scaled += st[_S_SUM_SC] * weight
    acc.max_ulp = max(acc.max_ulp, st[_S_MAX_ULP])
    acc.max_scaled = max(acc.max_scaled, st[_S_MAX_SC])
    acc.max_rel = max(acc.max_rel, st[_S_MAX_REL])
    acc.max_abs = max(acc.max_abs, st[_S_MAX_ABS])
    acc.over += int(st[_S_OVER]) * weight
    acc.nonfinite += int(st[_S_NONFIN]) * weight
    acc.mismatch += int(st[_S_MISM]) * weight


def _certify_tile(output: str, cand_mask: torch.Tensor, c_low: torch.Tensor, side: _Side, dy: float,
                  fmt: Format, acc: Acc, weight: int, perf: dict) -> None:
    """`analyse`'s certification on the candidates of one (possibly padded) tile."""
    bg = side.T.numel()
    nz = cand_mask.reshape(-1).nonzero().reshape(-1)
    ix, ig = nz // cand_mask.shape[1], nz % cand_mask.shape[1]
    keep = ig < bg                                           # padding is never a candidate; be safe
    ix, ig = ix[keep], ig[keep]
    vb, gb = _tile_values(side, ix, ig)
    und = certify._undecided(vb, F64_BOUND[output] * gb, fmt).nonzero().reshape(-1)
    acc.flagged += und.numel() * weight
    if not und.numel():
        return
    ix, ig, vb, gb = ix[und], ig[und], vb[und], gb[und]
    cb = c_low.reshape(-1, bg)[ix, ig] if not side.one_d else c_low.reshape(-1)[ig]
    mism = elementwise(cb, vb, None if side.ax is None else gb, *kernel_args(output, fmt))[3]
    c64 = cb.to(torch.float64)
    xt = side.xs.to(vb.device).expand(ix.numel()) if side.one_d else side.xs[ix]
    gt = side.gs[ig]
    mismatch = 0
    # closed forms decide every pair they cover (vectorised, no cap); mpmath the rest, MP_CAP a tile
    for name, decide in (("near_exact", near_exact_golden), ("closed_form", closed_form_golden)):
        if not vb.numel():
            break
        ok, gold = decide(output, xt, gt, dy, vb, fmt)
        perf[name] = perf.get(name, 0) + int(ok.sum())
        mismatch += int((c64[ok] != gold[ok]).sum()) - int(mism[ok].sum())
        acc.certified += int(ok.sum()) * weight
        rest = ~ok
        xt, gt, vb, c64, mism = xt[rest], gt[rest], vb[rest], c64[rest], mism[rest]
    acc.uncertified += max(vb.numel() - MP_CAP, 0) * weight
    take = slice(0, MP_CAP)
    xt, gt, vb, c64, mism = xt[take], gt[take], vb[take], c64[take], mism[take]
    if vb.numel():
        perf["mpmath"] = perf.get("mpmath", 0) + vb.numel()
        t0 = time.perf_counter()
        g_mp = certify._mp_golden(output, xt.double().tolist(), gt.double().tolist(), dy, fmt)
        perf["s_mpmath"] = perf.get("s_mpmath", 0.0) + time.perf_counter() - t0
        gold = torch.tensor(g_mp, dtype=torch.float64, device=vb.device)
        mismatch += int((c64 != gold).sum()) - int(mism.sum())
        acc.certified += vb.numel() * weight
    acc.mismatch += mismatch * weight


def _worst_tile(output: str, acc: Acc, st: list, c_low: torch.Tensor, side: _Side, fmt: Format,
                perf: dict) -> None:
    """`analyse`'s top-k worst pairs, recomputed on the real tile only where its maximum beats the
    current k-th worst (a tile max equal to it cannot change the list: equal keys sort after it)."""
    need = []
    for metric, tmax in (("ulp", st[_S_MAX_ULP]), ("scaled", st[_S_MAX_SC])):
        if metric == "scaled" and METRIC[output] != "scaled":
            continue
        lst = acc.worst[metric]
        if len(lst) < TOPK or tmax > lst[-1].key:
            need.append(metric)
    if not need:
        return
    perf["topk_tiles"] = perf.get("topk_tiles", 0) + 1
    if side.one_d:
        v, gauge = side.xm[0] * side.T, None
    else:
        v = side.xm[:, None] * side.T[None, :]
        gauge = None if side.ax is None else side.ax[:, None] * side.G[None, :]
    shape = v.shape
    err, scaled = elementwise(c_low.reshape(shape), v, gauge, *kernel_args(output, fmt))[:2]
    for metric in need:
        flat = (err if metric == "ulp" else scaled).reshape(-1)
        vals, idx = torch.topk(flat, min(TOPK, flat.numel()))
        xi, gi = pair_values(idx, shape, side.xs, side.gs, side.xs)     # one_d: side.xs is rep_x
        acc.add_worst(metric, worst_pairs(vals, idx, xi, gi, c_low, v, err, scaled, fmt))


def run_fused(dtype: str, impl: str = "torch", device: str = "cpu", x_range=(0, 1 << 16),
              gate_range=(0, 1 << 16), dy: float = 1.0, chunk: int = 1 << 22,
              impl_fn: Callable | None = None, progress: Callable[[str], None] | None = None,
              compile: bool | None = None, max_x_tiles: int | None = None) -> Result:
    """The fused path over every finite (x, gate) pair of the ranges (see the module docstring).
    max_x_tiles limits the x tiles per gate block (a warm-up that compiles the exact tile shapes)."""
    su = setup(dtype, impl, device, x_range, gate_range, dy, impl_fn, compile)
    fmt, fn, dev, xs, dy_t, dy_v, compile = su.fmt, su.fn, su.dev, su.xs, su.dy_t, su.dy_v, su.compile
    use_compile(compile)
    acc = {(o, r): Acc() for o in OUTPUTS for r in REGIMES}
    perf = {"tiles": 0, "syncs": 0}
    n_x = xs.numel()
    tick = Ticker(n_x * su.n_gates, progress)
    chunk = max(int(chunk), 1)
    rep_x = xs[:1].double()
    for regime in REGIMES:
        for gb, S, D, DA in gate_blocks(su.gsets[regime], chunk):     # per gate block, as the reference path
            bx = max(1, chunk // gb.numel())
            BX = min(bx, n_x)                            # static tile rows: the last tile is padded
            n_tiles = -(-n_x // BX)
            pad = n_tiles * BX
            x64 = pad_rows(xs.double(), pad)
            dyx = dy_v * x64                             # exact
            dyx_abs = dyx.abs()
            tile = _tile_fn(fmt, regime, compile)
            dn_done = False
            for it, x0 in enumerate(range(0, n_x, BX)):
                if max_x_tiles is not None and it >= max_x_tiles:
                    break
                xb = xs[x0:x0 + BX]
                nb = xb.numel()
                t0 = time.perf_counter()
                y, dn, dgate = fn(xb, gb, dy_t)
                t1 = time.perf_counter()
                perf["s_impl_launch"] = perf.get("s_impl_launch", 0.0) + t1 - t0
                if not dn_done:                          # per gate, stands for every x value
                    side = _Side(rep_x, gb, dy_t.double().reshape(1), S, None, None, one_d=True)
                    st, cand = _stats_body(dn.reshape(1, -1), side.xm, S, None, None, **_consts("dn", regime, fmt))
                    st = st.tolist()
                    perf["syncs"] += 1
                    a = acc[("dn", regime)]
                    _fold("dn", regime, a, st, gb.numel(), n_x)
                    if st[_S_CAND]:
                        _certify_tile("dn", cand, dn, side, dy_v, fmt, a, n_x, perf)
                    _worst_tile("dn", a, st, dn, side, fmt, perf)
                    dn_done = True
                sl = slice(x0, x0 + BX)
                args = (pad_rows(y, BX), pad_rows(dgate, BX), x64[sl], dyx[sl], dyx_abs[sl], S, D, DA)
                try:
                    stats, cand_y, cand_g = tile(*args)
                except Exception as e:                   # a compile failure: fall back to eager
                    if not compile:
                        raise
                    print(f"exhaustive: torch.compile failed ({type(e).__name__}: {e}); running eager",
                          file=sys.stderr)
                    compile = False
                    use_compile(False)
                    tile = _tile_fn(fmt, regime, False)
                    stats, cand_y, cand_g = tile(*args)
                t2 = time.perf_counter()
                st = stats.tolist()                      # the tile's one sync
                t3 = time.perf_counter()
                perf["s_dn_tile_launch"] = perf.get("s_dn_tile_launch", 0.0) + t2 - t1
                perf["s_sync"] = perf.get("s_sync", 0.0) + t3 - t2
                perf["syncs"] += 1
                perf["tiles"] += 1
                for output, off, c_low, cmask in (("y", 0, y, cand_y), ("dgate", _S_LEN, dgate, cand_g)):
                    s_o = st[off:off + _S_LEN]
                    a = acc[(output, regime)]
                    if output == "y":
                        side = _Side(xb, gb, x64[x0:x0 + nb], S, None, None)
                    else:
                        side = _Side(xb, gb, dyx[x0:x0 + nb], D, dyx_abs[x0:x0 + nb], DA)
                    _fold(output, regime, a, s_o, nb * gb.numel(), 1)
                    if s_o[_S_CAND]:
                        perf["cand_tiles"] = perf.get("cand_tiles", 0) + 1
                        _certify_tile(output, cmask, c_low, side, dy_v, fmt, a, 1, perf)
                    t4 = time.perf_counter()
                    _worst_tile(output, a, s_o, c_low, side, fmt, perf)
                    t5 = time.perf_counter()
                    perf["s_certify"] = perf.get("s_certify", 0.0) + t4 - t3
                    perf["s_worst"] = perf.get("s_worst", 0.0) + t5 - t4
                    t3 = t5
                tick.add(nb * gb.numel())
    return tick.result(su, dtype, impl, dev, x_range, gate_range, dy_v, xs.numel(), acc, perf)
