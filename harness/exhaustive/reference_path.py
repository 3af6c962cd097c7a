"""The original per-tile path (eager float64 temporaries, `analyse` per output, mpmath for every
undecided pair within MP_CAP). Kept as the reference the fused path is tested against, bit for bit:
change it only together with harness.exhaustive.fused."""
from __future__ import annotations

import sys
from typing import Callable

import torch

from harness.exhaustive import certify
from harness.exhaustive.accumulate import Acc, Result, Ticker, pair_values, worst_pairs
from harness.exhaustive.certify import MP_CAP, near_exact_golden
from harness.exhaustive.enumerate import OUTPUTS, REGIMES, gate_blocks, setup
from harness.exhaustive.metrics import EDGES, F64_BOUND, METRIC, TOPK, _ELEMENTWISE, budget_for, elementwise, \
    kernel_args, use_compile
from harness.references.formats import Format


def _bins(err: torch.Tensor, edges: torch.Tensor, weight: int) -> torch.Tensor:
    idx = torch.bucketize(err.reshape(-1), edges[1:-1])      # (lo, hi], first bin [0, 0.5]
    return torch.bincount(idx, minlength=len(EDGES) - 1).to(torch.int64).cpu() * weight


def analyse(output: str, regime: str, c_low: torch.Tensor, v: torch.Tensor, gauge: torch.Tensor | None,
            xs: torch.Tensor, gs: torch.Tensor, dy: float, fmt: Format, acc: Acc, edges: torch.Tensor,
            weight: int = 1, rep_x: torch.Tensor | None = None) -> None:
    """Fold one tile of one output into `acc`.

    c_low: computed values in the dtype, v: float64 exact values (same shape, [bx, bg] or [bg]);
    gauge: None where it is |v| (y, dn); xs / gs: the tile's x and gate values (for the worst
    pairs and mpmath). `weight` multiplies every count (dn: one per-gate value stands for all x)."""
    shape = v.shape
    ew_args = (c_low, v, gauge, *kernel_args(output, fmt))
    try:
        err, scaled, cand, mism, nonfin, rel_max, abs_max = _ELEMENTWISE["fn"](*ew_args)
    except Exception as e:                             # a compile failure: fall back to eager
        if _ELEMENTWISE["fn"] is elementwise:
            raise
        print(f"exhaustive: torch.compile failed ({type(e).__name__}: {e}); running eager", file=sys.stderr)
        use_compile(False)
        err, scaled, cand, mism, nonfin, rel_max, abs_max = elementwise(*ew_args)
    budget = budget_for(output, regime, fmt)
    key = err if METRIC[output] == "ulp" else scaled

    # correct rounding: candidates where float64 might not decide, narrowed exactly, then mpmath
    mismatch = int(mism.sum())
    cand = cand.reshape(-1).nonzero().reshape(-1)
    if cand.numel():
        vb = v.reshape(-1)[cand]
        gb = vb.abs() if gauge is None else gauge.reshape(-1)[cand]
        und = cand[certify._undecided(vb, F64_BOUND[output] * gb, fmt)]
        acc.flagged += und.numel() * weight
        if und.numel():                                # near-exact products: decided without mpmath
            xt, gt = _pair_tensors(und, shape, xs, gs, rep_x)
            ok, gold_ne = near_exact_golden(output, xt, gt, dy, v.reshape(-1)[und], fmt)
            if bool(ok.any()):
                sel = und[ok]
                c_sel = c_low.reshape(-1)[sel].to(torch.float64)
                mismatch += int((c_sel != gold_ne[ok]).sum()) - int(mism.reshape(-1)[sel].sum())
                acc.certified += sel.numel() * weight
                und = und[~ok]
        take, rest = und[:MP_CAP], und[MP_CAP:]
        acc.uncertified += rest.numel() * weight
        if take.numel():
            xi, gi = pair_values(take, shape, xs, gs, rep_x)
            gold_mp = torch.tensor(certify._mp_golden(output, xi, gi, dy, fmt), dtype=torch.float64,
                                   device=v.device)
            c_sel = c_low.reshape(-1)[take].to(torch.float64)
            mismatch += int((c_sel != gold_mp).sum()) - int(mism.reshape(-1)[take].sum())
            acc.certified += take.numel() * weight
    acc.mismatch += mismatch * weight
    acc.nonfinite += int(nonfin.sum()) * weight

    acc.pairs += v.numel() * weight
    h = _bins(err, edges, weight)
    acc.hist_ulp = h if acc.hist_ulp is None else acc.hist_ulp + h
    if METRIC[output] == "scaled":
        h = _bins(scaled, edges, weight)
        acc.hist_scaled = h if acc.hist_scaled is None else acc.hist_scaled + h
    acc.sum_ulp += float(err.sum()) * weight
    acc.sum_scaled += float(scaled.sum()) * weight
    tile_max = {"ulp": float(err.max()), "scaled": float(scaled.max())}
    acc.max_ulp = max(acc.max_ulp, tile_max["ulp"])
    acc.max_scaled = max(acc.max_scaled, tile_max["scaled"])
    acc.max_rel = max(acc.max_rel, float(rel_max))
    acc.max_abs = max(acc.max_abs, float(abs_max))
    acc.over += int((key > budget).sum()) * weight

    for metric, m in (("ulp", err), ("scaled", scaled)):
        if metric == "scaled" and METRIC[output] != "scaled":
            continue
        flat = m.reshape(-1)
        if len(acc.worst[metric]) >= TOPK and tile_max[metric] < acc.worst[metric][-1].key:
            continue
        vals, idx = torch.topk(flat, min(TOPK, flat.numel()))
        xi, gi = pair_values(idx, shape, xs, gs, rep_x)
        acc.add_worst(metric, worst_pairs(vals, idx, xi, gi, c_low, v, err, scaled, fmt))


def _pair_tensors(flat_idx: torch.Tensor, shape, xs, gs, rep_x):
    """x and gate values (device tensors) of flat tile indices."""
    if len(shape) == 1:
        return rep_x.to(gs.device).expand(flat_idx.numel()), gs[flat_idx]
    return xs[flat_idx // shape[1]], gs[flat_idx % shape[1]]


def run_reference_path(dtype: str, impl: str = "torch", device: str = "cpu", x_range=(0, 1 << 16),
                       gate_range=(0, 1 << 16), dy: float = 1.0, chunk: int = 1 << 22,
                       impl_fn: Callable | None = None, progress: Callable[[str], None] | None = None,
                       compile: bool | None = None) -> Result:
    """The reference path over every finite (x, gate) pair of the ranges (see the module docstring)."""
    su = setup(dtype, impl, device, x_range, gate_range, dy, impl_fn, compile)
    fmt, fn, dev, xs, dy_t, dy_v = su.fmt, su.fn, su.dev, su.xs, su.dy_t, su.dy_v
    edges = torch.tensor(EDGES, dtype=torch.float64, device=dev)
    use_compile(su.compile)
    acc = {(o, r): Acc() for o in OUTPUTS for r in REGIMES}
    x64 = xs.double()
    dyx_abs = (dy_v * x64).abs()                         # exact in float64
    tick = Ticker(xs.numel() * su.n_gates, progress)
    chunk = max(int(chunk), 1)
    rep_x = xs[:1].double().cpu()
    for regime in REGIMES:
        for gb, S, D, DA in gate_blocks(su.gsets[regime], chunk):
            bx = max(1, chunk // gb.numel())
            dn_done = False
            for x0 in range(0, xs.numel(), bx):
                xb = xs[x0:x0 + bx]
                y, dn, dgate = fn(xb, gb, dy_t)
                if not dn_done:                        # per gate, stands for every x value
                    analyse("dn", regime, dn, dy_v * S, None, xs, gb, dy_v, fmt,
                            acc[("dn", regime)], edges, weight=xs.numel(), rep_x=rep_x.to(dev))
                    dn_done = True
                xbd = x64[x0:x0 + bx]
                analyse("y", regime, y, xbd[:, None] * S[None, :], None, xb, gb, dy_v, fmt,
                        acc[("y", regime)], edges)
                analyse("dgate", regime, dgate, (dy_v * xbd)[:, None] * D[None, :],
                        dyx_abs[x0:x0 + bx][:, None] * DA[None, :], xb, gb, dy_v, fmt,
                        acc[("dgate", regime)], edges)
                tick.add(xb.numel() * gb.numel())
    return tick.result(su, dtype, impl, dev, x_range, gate_range, dy_v, xs.numel(), acc)
