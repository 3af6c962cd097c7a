"""Exhaustive check of SiLUGate alone over every finite (x, gate) pair of bf16 / fp16.

The implementation under test computes, for one upstream gradient value dy (x plays n's role):
    y     = x * silu(gate)          rounded to the dtype
    dn    = dy * silu(gate)         (the gradient to x)
    dgate = dy * x * silu'(gate)
and is compared with the exact values (float64 closed forms, decided by mpmath where float64
cannot tell the correctly rounded result).

Layout and cost. The pair grid is tiled: the gates of the range are split by regime (normal /
extreme = gate < -87, where float32 silu becomes subnormal or flushes to -0), each regime's gates in
blocks of at most `chunk` values, and for each gate block the x values in blocks so that one tile
holds about `chunk` pairs. Everything that depends on the gate alone (float32 silu, the float64
silu, silu', gauge) is computed once per gate block and broadcast. dn does not depend on x at all:
it is computed once per gate (the same elementwise kernel the autograd path runs, on the same gate
values) and its counts are weighted by the number of x values; tests check that the per-pair
autograd x.grad equals it.

Per tile the work is elementwise (float64 on the device) plus small reductions: histogram
(bucketize + bincount), top-k worst pairs, max / sum, counts of not-correctly-rounded elements. The
correct-rounding test needs the golden value: it is float64's rounding, except where the float64
value is within its error bound of a rounding boundary. A cheap conservative filter picks those
candidates, references.certify.undecided narrows them exactly, and mpmath (50 digits) decides them
(at most MP_CAP per tile; any beyond are counted as uncertified).
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from harness.errors import UsageError
from references.exact import silu_parts
from references.formats import Format, fmt_of, round_to, ulp

OUTPUTS = ("y", "dn", "dgate")
REGIMES = ("normal", "extreme")
EXTREME_GATE = -87.0                   # gates below: float32 silu subnormal or flushed (extreme)
U32 = 2.0 ** -24
U64 = 2.0 ** -53
# float64 error of the closed forms, in units of u64 times the gauge (references.exact
# float64_error_bound with H = T = 1: y 32 + H, dn 32, dgate 32 + H + 16).
F64_BOUND = {"y": 33 * U64, "dn": 32 * U64, "dgate": 49 * U64}
METRIC = {"y": "ulp", "dn": "ulp", "dgate": "scaled"}
NOISE = {"y": 8, "dn": 8, "dgate": 12}          # float32 noise on each path, in u32 (docs/budgets.md)
EDGES = (0.0, 0.5, 0.5000001, 0.51, 0.6, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 1024.0, math.inf)
TOPK = 8
MP_CAP = 20_000                         # mpmath decisions per tile, beyond: uncertified


# ----------------------------------------------------------------------------------------------
# implementations under test (SiLUGate alone)

def torch_autograd(x: torch.Tensor, g: torch.Tensor, dy: torch.Tensor):
    """The reference path: eager autograd on leaves x, g of the same shape (x plays n)."""
    x = x.detach().clone().requires_grad_(True)
    g = g.detach().clone().requires_grad_(True)
    y = (x.float() * F.silu(g.float())).to(x.dtype)
    y.backward(dy.expand_as(y).to(x.dtype))
    return y.detach(), x.grad, g.grad


def torch_fast(x: torch.Tensor, g: torch.Tensor, dy: torch.Tensor):
    """Autograd-free: the same ATen kernels autograd runs, per gate where nothing depends on x.

    x: [bx], g: [bg], dy: 0-dim, all in the dtype. Returns y [bx, bg], dn [bg], dgate [bx, bg].
    MulBackward gives grad*other (commutative, so the same float32 products); SiLU's backward is
    aten.silu_backward(grad, input), called here on the same (broadcast) values."""
    dt = x.dtype
    gf = g.float()
    s = F.silu(gf)
    xf = x.float()
    dyf = dy.float()
    y = (xf[:, None] * s[None, :]).to(dt)
    dn = (dyf * s).to(dt)
    grad = (dyf * xf)[:, None].expand(x.numel(), g.numel())
    dgate = torch.ops.aten.silu_backward(grad, gf[None, :].expand(x.numel(), g.numel())).to(dt)
    return y, dn, dgate


def mutant_silu_lowp(x: torch.Tensor, g: torch.Tensor, dy: torch.Tensor):
    """Mutant: SiLU (and its derivative) rounded to the dtype before the products."""
    dt = x.dtype
    gf = g.float()
    s = F.silu(gf).to(dt).float()
    ds = torch.ops.aten.silu_backward(torch.ones_like(gf), gf).to(dt).float()
    xf = x.float()
    dyf = dy.float()
    y = (xf[:, None] * s[None, :]).to(dt)
    dn = (dyf * s).to(dt)
    dgate = ((dyf * xf)[:, None] * ds[None, :]).to(dt)
    return y, dn, dgate


IMPLS: dict[str, tuple[str, Callable]] = {
    "torch": ("chain", torch_fast),
    "torch-fused": ("fused", torch_fast),       # SiLUGate alone: the same computation
    "mutant-silu-lowp": ("chain", mutant_silu_lowp),
}


# ----------------------------------------------------------------------------------------------
# argument handling

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


def budget_for(output: str, regime: str, fmt: Format) -> float:
    if regime == "extreme":
        return math.inf
    final = 0.5 if METRIC[output] == "ulp" else 1.0
    return final + NOISE[output] * U32 / fmt.u


# ----------------------------------------------------------------------------------------------
# accumulation

@dataclass
class Worst:
    key: float
    x: float
    g: float
    got: float
    ref: float
    golden: float
    ulp: float
    scaled: float


@dataclass
class Acc:
    """Running statistics of one (output, regime)."""
    pairs: int = 0
    hist_ulp: torch.Tensor | None = None
    hist_scaled: torch.Tensor | None = None
    sum_ulp: float = 0.0
    sum_scaled: float = 0.0
    max_ulp: float = 0.0
    max_scaled: float = 0.0
    max_abs: float = 0.0
    max_rel: float = 0.0
    over: int = 0                  # pairs over budget (in the budget metric)
    mismatch: int = 0              # computed != correctly rounded golden
    flagged: int = 0               # float64 undecided (pairs)
    certified: int = 0
    uncertified: int = 0
    nonfinite: int = 0             # NaN / inf where the golden value is finite
    worst: dict = field(default_factory=lambda: {"ulp": [], "scaled": []})

    def add_worst(self, metric: str, items: list[Worst]):
        w = self.worst[metric] + items
        w.sort(key=lambda r: -r.key if not math.isnan(r.key) else -math.inf)
        self.worst[metric] = w[:TOPK]


def _bins(err: torch.Tensor, edges: torch.Tensor, weight: int) -> torch.Tensor:
    idx = torch.bucketize(err.reshape(-1), edges[1:-1])      # (lo, hi], first bin [0, 0.5]
    return torch.bincount(idx, minlength=len(EDGES) - 1).to(torch.int64).cpu() * weight


def _mp_golden(output: str, x: list[float], g: list[float], dy: float, fmt: Format) -> list[float]:
    import mpmath
    from references.mp import round_mpf
    out = []
    with mpmath.workdps(50):
        d = mpmath.mpf(dy)
        for xi, ti in zip(x, g):
            t = mpmath.mpf(ti)
            s = 1 / (1 + mpmath.exp(-t))
            if output == "y":
                v = mpmath.mpf(xi) * t * s
            elif output == "dn":
                v = d * t * s
            else:
                v = d * mpmath.mpf(xi) * s * (1 + t * (1 - s))
            out.append(round_mpf(v, fmt))
    return out


_EXP_MASK = 0x7FF0000000000000


def elementwise(c_low: torch.Tensor, v: torch.Tensor, gauge: torch.Tensor | None, u: float, min_sub: float,
                emin_bits: int, pm1_bits: int, bound: float, fmax: float):
    """Per-element errors of computed `c_low` (dtype) against exact float64 `v` (pure, fusible).

    ulp(v) comes from v's float64 exponent field clamped to the format's emin (references.formats
    .ulp); golden = round-half-even(v / ulp) * ulp (references.formats.round_to, v is finite).
    Returns ulp error, scaled error, float64-undecidable candidates (the nearest rounding boundary
    within twice the float64 error bound), computed != golden, non-finite where golden is finite,
    and the largest relative and absolute errors."""
    c = c_low.to(torch.float64)
    ebits = torch.clamp(v.view(torch.int64) & _EXP_MASK, min=emin_bits)
    q = (ebits - pm1_bits).view(torch.float64)
    r = v / q                                          # exact: q is a power of two
    k = torch.round(r)
    golden = k * q
    golden = torch.where(golden.abs() > fmax, torch.copysign(torch.full_like(golden, math.inf), v), golden)
    same = c == golden                                 # +0 == -0; inf == inf
    dist = torch.where(same & torch.isinf(c), torch.zeros_like(v), (c - v).abs())
    dist = torch.nan_to_num(dist, nan=math.inf, posinf=math.inf)
    err = dist / q
    va = v.abs()
    ga = va if gauge is None else gauge
    scaled = dist / (u * ga + min_sub / 2)
    rel = torch.where(dist == 0, torch.zeros_like(dist), dist / va)
    cand = (r - k).abs() >= 0.5 - 2 * bound * ga / q
    nonfin = ~torch.isfinite(c) & torch.isfinite(golden)
    return err, scaled, cand, ~same, nonfin, rel.amax(), dist.amax()


_ELEMENTWISE = {"fn": elementwise}


def use_compile(on: bool) -> None:
    """Fuse `elementwise` with torch.compile (one kernel per tile on CUDA); eager when off."""
    _ELEMENTWISE["fn"] = torch.compile(elementwise, dynamic=True) if on else elementwise


def analyse(output: str, regime: str, c_low: torch.Tensor, v: torch.Tensor, gauge: torch.Tensor | None,
            xs: torch.Tensor, gs: torch.Tensor, dy: float, fmt: Format, acc: Acc, edges: torch.Tensor,
            weight: int = 1, rep_x: torch.Tensor | None = None) -> None:
    """Fold one tile of one output into `acc`.

    c_low: computed values in the dtype, v: float64 exact values (same shape, [bx, bg] or [bg]);
    gauge: None where it is |v| (y, dn); xs / gs: the tile's x and gate values (for the worst
    pairs and mpmath). `weight` multiplies every count (dn: one per-gate value stands for all x)."""
    shape = v.shape
    ew_args = (c_low, v, gauge, fmt.u, fmt.min_subnormal, (fmt.emin + 1023) << 52, (fmt.precision - 1) << 52,
               F64_BOUND[output], fmt.max)
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
        und = cand[_undecided(vb, F64_BOUND[output] * gb, fmt)]
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
            xi, gi = _pair_values(take, shape, xs, gs, rep_x)
            gold_mp = torch.tensor(_mp_golden(output, xi, gi, dy, fmt), dtype=torch.float64, device=v.device)
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
        xi, gi = _pair_values(idx, shape, xs, gs, rep_x)
        vals_l = vals.tolist()
        c = c_low.reshape(-1)[idx].to(torch.float64)
        vv = v.reshape(-1)[idx]
        got, ref = c.tolist(), vv.tolist()
        gold = round_to(vv, fmt).tolist()
        eu = err.reshape(-1)[idx].tolist()
        es = scaled.reshape(-1)[idx].tolist()
        acc.add_worst(metric, [Worst(vals_l[j], xi[j], gi[j], got[j], ref[j], gold[j], eu[j], es[j])
                               for j in range(len(vals_l))])


def _undecided(v: torch.Tensor, bound: torch.Tensor, fmt: Format) -> torch.Tensor:
    from references.certify import undecided
    return undecided(v, bound, fmt)


NEAR_EXACT_DELTA = 2.0 ** -40


def near_exact_golden(output: str, x: torch.Tensor, t: torch.Tensor, dy: float, v: torch.Tensor, fmt: Format):
    """Correctly rounded values where the exact result is P * (1 + delta), P exact in float64.

    For gates t >= 2 whose sigmoid(-t) = m is tiny, the exact values are
        y = x*t*(1 - m), dn = dy*t*(1 - m)          (P = x*t or dy*t, delta = -m < 0)
        dgate = dy*x*(1 + m*(t - 1 - t*m))            (P = dy*x, 0 < delta <= t*m)
    P is a product of two values of at most 11 significant bits (exact in float64), so any rounding
    boundary other than P itself lies at least |P| * 2**-23 from P. Where |delta| <= t*m < 2**-40
    the exact value rounds like P nudged by 2**-40 in delta's direction (a tie at P goes that way),
    whatever the exact size of delta (m may even underflow in float64). These are the exact ties of
    x*t that float64 cannot decide (sigmoid(t) rounds to 1 there); they need no mpmath.
    Returns (mask of pairs decided this way, their golden values as float64)."""
    x = x.to(torch.float64)
    t = t.to(torch.float64)
    m = torch.sigmoid(-t)
    if output == "y":
        P, sign = x * t, -1.0
    elif output == "dn":
        P, sign = dy * t, -1.0
    else:
        P, sign = dy * x, 1.0
    ok = (t >= 2) & (t * m * 1.01 < NEAR_EXACT_DELTA) & torch.isfinite(P) & torch.isfinite(v)
    ok &= (v - P).abs() <= P.abs() * 2.0 ** -30      # v is the float64 value of the same pair
    golden = round_to(P * (1 + sign * NEAR_EXACT_DELTA), fmt)
    return ok, golden


def _pair_tensors(flat_idx: torch.Tensor, shape, xs, gs, rep_x):
    """x and gate values (device tensors) of flat tile indices."""
    if len(shape) == 1:
        return rep_x.to(gs.device).expand(flat_idx.numel()), gs[flat_idx]
    return xs[flat_idx // shape[1]], gs[flat_idx % shape[1]]


def _pair_values(flat_idx: torch.Tensor, shape, xs, gs, rep_x):
    if len(shape) == 1:                                  # per-gate output (dn)
        gi = gs[flat_idx]
        xi = rep_x.expand(flat_idx.numel())
    else:
        ix, ig = flat_idx // shape[1], flat_idx % shape[1]
        xi, gi = xs[ix], gs[ig]
    return xi.double().tolist(), gi.double().tolist()


# ----------------------------------------------------------------------------------------------
# the run

@dataclass
class Result:
    dtype: str
    impl: str
    rounding: str
    device: str
    x_range: tuple[int, int]
    gate_range: tuple[int, int]
    dy: float
    dy_bits: int
    n_x: int
    n_gate: dict
    acc: dict                   # (output, regime) -> Acc
    seconds: float
    case_hash: str
    perf: dict = field(default_factory=dict)     # counters of the fused path (tiles, syncs, ...)


def case_hash(dtype: str, xr, gr, dy_bits: int) -> str:
    key = f"{dtype}:{xr[0]:x}:{xr[1]:x}:{gr[0]:x}:{gr[1]:x}:{dy_bits:x}"
    return hashlib.sha1(key.encode()).hexdigest()[:8]


def _run_reference_path(dtype: str, impl: str = "torch", device: str = "cpu", x_range=(0, 1 << 16),
                        gate_range=(0, 1 << 16), dy: float = 1.0, chunk: int = 1 << 22,
                        impl_fn: Callable | None = None, progress: Callable[[str], None] | None = None,
                        compile: bool | None = None) -> Result:
    """The original per-tile path (eager float64 temporaries, `analyse` per output, mpmath for every
    undecided pair within MP_CAP). Kept as the reference the fused path is tested against."""
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
    edges = torch.tensor(EDGES, dtype=torch.float64, device=dev)
    if compile is None:                 # default: fuse on CUDA; HARNESS_EXHAUSTIVE_COMPILE=0/1 overrides
        env = os.environ.get("HARNESS_EXHAUSTIVE_COMPILE")
        compile = dev.type == "cuda" if env is None else env not in ("0", "", "false", "no")
    use_compile(compile)
    acc = {(o, r): Acc() for o in OUTPUTS for r in REGIMES}
    x64 = xs.double()
    dyx_abs = (dy_v * x64).abs()                         # exact in float64
    extreme = gs_all.float() < EXTREME_GATE
    gsets = {"normal": gs_all[~extreme], "extreme": gs_all[extreme]}
    total = xs.numel() * gs_all.numel()
    done = 0
    t0 = last = time.perf_counter()
    chunk = max(int(chunk), 1)
    rep_x = xs[:1].double().cpu()
    for regime in REGIMES:
        gsr = gsets[regime]
        bg = min(gsr.numel(), chunk)
        for g0 in range(0, gsr.numel(), max(bg, 1)):
            gb = gsr[g0:g0 + bg]
            t = gb.double()
            _, S, D, DA = silu_parts(t)
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
                done += xb.numel() * gb.numel()
                now = time.perf_counter()
                if progress and (now - last > 2.0 or done == total):
                    progress(f"exhaustive: {done / total:6.1%} {done:.3g}/{total:.3g} pairs, "
                             f"{done / max(now - t0, 1e-9):.3g} pairs/s")
                    last = now
    if dev.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    return Result(dtype, impl, rounding, str(dev.type), tuple(x_range), tuple(gate_range), dy_v, dy_bits,
                  xs.numel(), {r: gsets[r].numel() for r in REGIMES}, acc, secs,
                  case_hash(dtype, x_range, gate_range, dy_bits))


# ----------------------------------------------------------------------------------------------
# the fused path (default)
#
# Per tile the GPU (or CPU) makes one fused pass over compact data: the implementation's outputs
# (dtype) go in, x-dependent float64 products are formed in registers against per-gate-block
# tables, and out come one small float64 vector of statistics per output (cumulative histogram
# counts, sums, maxima, counts of mismatches / non-finite / over-budget / certification candidates)
# plus one bool mask of candidates per output. The host reads the vector (the tile's one sync) and
# touches the tile again only where needed: the candidate indices (nonzero) when the count is
# non-zero, the top-k worst pairs only when the tile's maximum beats the current k-th worst.
#
# Results equal the reference path's exactly (histograms, maxima, worst pairs, mismatch / certified /
# uncertified counts; the float64 sums behind the means may differ in their last bits, being summed
# in another order):
# * the tiling is the same (pairs flagged for mpmath are taken in the same order, up to MP_CAP per
#   tile), the gate tables are computed per gate block as before (float64 sigmoid on the CPU is
#   position dependent: vectorised and scalar tails differ in the last bit, so one 65536-entry table
#   would change low bits of the reference values);
# * every float64 operation is the same IEEE operation: v = x * S is one rounded product, v / q and
#   dist / q become multiplications by the exact power of two 1/q (same real value, same rounding),
#   and |c - v| is max(c, v) - min(c, v), so no compiler can contract the product v into an FMA
#   (a*b+c contraction elsewhere only meets products that are exact: u*ga, (r-k), k*q);
# * pairs that would go to mpmath are decided in closed form where the exact value is P*(1 + delta)
#   with P exact in float64 and 2**-160 < |delta| < 2**-30 (tiny and large gates); there 50-digit
#   mpmath returns the same value (tests check it), so counts do not change.

_INNER = tuple(EDGES[1:-1])
_NB = len(EDGES) - 1
_INV_BIAS = 2046 << 52                  # bits(1/q) = _INV_BIAS - bits(q) for a power of two q
# layout of one output's statistics vector
_S_GT_ULP, _S_GT_SC = 0, len(_INNER)
(_S_SUM_ULP, _S_SUM_SC, _S_MAX_ULP, _S_MAX_SC, _S_MAX_REL, _S_MAX_ABS,
 _S_MISM, _S_NONFIN, _S_CAND, _S_OVER) = range(2 * len(_INNER), 2 * len(_INNER) + 10)
_S_LEN = 2 * len(_INNER) + 10


def _consts(output: str, regime: str, fmt: Format) -> dict:
    return dict(u=fmt.u, min_sub=fmt.min_subnormal, emin_bits=(fmt.emin + 1023) << 52,
                pm1_bits=(fmt.precision - 1) << 52, bound=F64_BOUND[output], fmax=fmt.max,
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
            from references.fast import _inductor_options, _raise_recompile_limit
            _raise_recompile_limit()
            fn = torch.compile(body, dynamic=False, fullgraph=True, options=_inductor_options())
        else:
            fn = body
        _TILE_FNS[key] = fn
    return fn


CLOSED_FORM_TINY = 2.0 ** -30           # |gate| at most this: delta = O(gate)
CLOSED_FORM_LARGE = 2.0 ** -32          # gates >= 2 with gate * sigmoid(-gate) below this


def closed_form_golden(output: str, x: torch.Tensor, t: torch.Tensor, dy: float, v: torch.Tensor, fmt: Format):
    """Correctly rounded values where the exact result is P * (1 + delta), P exact in float64 and
    delta small with a known sign (the argument of near_exact_golden, for the pairs it leaves):
      tiny gates |t| <= 2**-30, with th = tanh(t/2) (2*sigmoid(t) = 1 + th):
        y = (x*t/2) (1 + th), dn = (dy*t/2) (1 + th),  dgate = (dy*x/2) (1 + th + (t/2)(1 - th**2));
        delta has t's sign, 0 < |delta| <= |t|;
      large gates t >= 2 with t*m < 2**-32, m = sigmoid(-t): y, dn = P (1 - m), dgate = P (1 + m(t - 1 - t m)).
    Any rounding boundary other than P lies at least |P| 2**-22 from P (P has at most 22 significant
    bits), so the exact value rounds like P nudged by 2**-40 towards it. In this domain
    2**-136 < |delta| < 2**-30, far above 50-digit mpmath's error (~1e-50): mpmath returns the same."""
    x = x.to(torch.float64)
    t = t.to(torch.float64)
    tiny = (t != 0) & (t.abs() <= CLOSED_FORM_TINY)
    m = torch.sigmoid(-t)
    large = (t >= 2) & (t * m * 1.01 < CLOSED_FORM_LARGE)
    if output == "y":
        P_t, P_l = x * t * 0.5, x * t
    elif output == "dn":
        P_t, P_l = dy * t * 0.5, dy * t
    else:
        P_t, P_l = dy * x * 0.5, dy * x
    sign_l = 1.0 if output == "dgate" else -1.0
    P = torch.where(tiny, P_t, P_l)
    sign = torch.where(tiny, torch.sign(t), torch.full_like(t, sign_l))
    ok = (tiny | large) & torch.isfinite(P) & (P != 0) & torch.isfinite(v)
    ok &= (v - P).abs() <= P.abs() * 2.0 ** -30
    golden = round_to(P * (1 + sign * NEAR_EXACT_DELTA), fmt)
    return ok, golden


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
    und = _undecided(vb, F64_BOUND[output] * gb, fmt).nonzero().reshape(-1)
    acc.flagged += und.numel() * weight
    if not und.numel():
        return
    ix, ig, vb, gb = ix[und], ig[und], vb[und], gb[und]
    cb = c_low.reshape(-1, bg)[ix, ig] if not side.one_d else c_low.reshape(-1)[ig]
    fmt_args = (fmt.u, fmt.min_subnormal, (fmt.emin + 1023) << 52, (fmt.precision - 1) << 52,
                F64_BOUND[output], fmt.max)
    mism = elementwise(cb, vb, None if side.ax is None else gb, *fmt_args)[3]
    c64 = cb.to(torch.float64)
    xt = side.xs.to(vb.device).expand(ix.numel()) if side.one_d else side.xs[ix]
    gt = side.gs[ig]
    mismatch = 0
    ok, gold = near_exact_golden(output, xt, gt, dy, vb, fmt)
    if bool(ok.any()):
        mismatch += int((c64[ok] != gold[ok]).sum()) - int(mism[ok].sum())
        acc.certified += int(ok.sum()) * weight
        rest = ~ok
        xt, gt, vb, c64, mism = xt[rest], gt[rest], vb[rest], c64[rest], mism[rest]
    take = slice(0, MP_CAP)
    acc.uncertified += max(vb.numel() - MP_CAP, 0) * weight
    xt, gt, vb, c64, mism = xt[take], gt[take], vb[take], c64[take], mism[take]
    if vb.numel():
        ok, gold = closed_form_golden(output, xt, gt, dy, vb, fmt)
        mp = (~ok).nonzero().reshape(-1)
        perf["closed_form"] = perf.get("closed_form", 0) + int(ok.sum())
        if mp.numel():
            perf["mpmath"] = perf.get("mpmath", 0) + mp.numel()
            g_mp = _mp_golden(output, xt[mp].double().tolist(), gt[mp].double().tolist(), dy, fmt)
            gold = gold.clone()
            gold[mp] = torch.tensor(g_mp, dtype=torch.float64, device=gold.device)
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
        v = side.xm[0] * side.T
        gauge = None
        shape = v.shape
    else:
        v = side.xm[:, None] * side.T[None, :]
        gauge = None if side.ax is None else side.ax[:, None] * side.G[None, :]
        shape = v.shape
    err, scaled = elementwise(c_low.reshape(shape), v, gauge, fmt.u, fmt.min_subnormal, (fmt.emin + 1023) << 52,
                              (fmt.precision - 1) << 52, F64_BOUND[output], fmt.max)[:2]
    for metric in need:
        m = err if metric == "ulp" else scaled
        flat = m.reshape(-1)
        vals, idx = torch.topk(flat, min(TOPK, flat.numel()))
        if side.one_d:
            gi = side.gs[idx].double().tolist()
            xi = side.xs.expand(idx.numel()).double().tolist()
        else:
            ix, ig = idx // shape[1], idx % shape[1]
            xi, gi = side.xs[ix].double().tolist(), side.gs[ig].double().tolist()
        vals_l = vals.tolist()
        c = c_low.reshape(-1)[idx].to(torch.float64)
        vv = v.reshape(-1)[idx]
        got, ref = c.tolist(), vv.tolist()
        gold = round_to(vv, fmt).tolist()
        eu = err.reshape(-1)[idx].tolist()
        es = scaled.reshape(-1)[idx].tolist()
        acc.add_worst(metric, [Worst(vals_l[j], xi[j], gi[j], got[j], ref[j], gold[j], eu[j], es[j])
                               for j in range(len(vals_l))])


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    if t.shape[0] == rows:
        return t
    out = t.new_zeros((rows,) + tuple(t.shape[1:]))
    out[:t.shape[0]] = t
    return out


def run_exhaustive(dtype: str, impl: str = "torch", device: str = "cpu", x_range=(0, 1 << 16),
                   gate_range=(0, 1 << 16), dy: float = 1.0, chunk: int = 1 << 22,
                   impl_fn: Callable | None = None, progress: Callable[[str], None] | None = None,
                   compile: bool | None = None, reference: bool = False,
                   max_x_tiles: int | None = None) -> Result:
    """Every finite (x, gate) pair of the ranges through the implementation, against the exact values.

    reference=True runs the original path (`_run_reference_path`). max_x_tiles limits the x tiles
    per gate block (a warm-up that compiles the exact tile shapes of a full run)."""
    if reference:
        return _run_reference_path(dtype, impl, device, x_range, gate_range, dy, chunk, impl_fn, progress, compile)
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
    use_compile(compile)
    acc = {(o, r): Acc() for o in OUTPUTS for r in REGIMES}
    perf = {"tiles": 0, "syncs": 0}
    n_x = xs.numel()
    extreme = gs_all.float() < EXTREME_GATE
    gsets = {"normal": gs_all[~extreme], "extreme": gs_all[extreme]}
    total = n_x * gs_all.numel()
    done = 0
    t0 = last = time.perf_counter()
    chunk = max(int(chunk), 1)
    rep_x = xs[:1].double()
    for regime in REGIMES:
        gsr = gsets[regime]
        bg = min(gsr.numel(), chunk)
        for g0 in range(0, gsr.numel(), max(bg, 1)):
            gb = gsr[g0:g0 + bg]
            _, S, D, DA = silu_parts(gb.double())        # per gate block, as the reference path
            bx = max(1, chunk // gb.numel())
            BX = min(bx, n_x)                            # static tile rows: the last tile is padded
            n_tiles = -(-n_x // BX)
            pad = n_tiles * BX
            x64 = _pad_rows(xs.double(), pad)
            dyx = dy_v * x64                             # exact
            dyx_abs = dyx.abs()
            tile = _tile_fn(fmt, regime, compile)
            dn_done = False
            for it, x0 in enumerate(range(0, n_x, BX)):
                if max_x_tiles is not None and it >= max_x_tiles:
                    break
                xb = xs[x0:x0 + BX]
                nb = xb.numel()
                y, dn, dgate = fn(xb, gb, dy_t)
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
                args = (_pad_rows(y, BX), _pad_rows(dgate, BX), x64[sl], dyx[sl], dyx_abs[sl], S, D, DA)
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
                st = stats.tolist()                      # the tile's one sync
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
                    _worst_tile(output, a, s_o, c_low, side, fmt, perf)
                done += nb * gb.numel()
                now = time.perf_counter()
                if progress and (now - last > 2.0 or done == total):
                    progress(f"exhaustive: {done / total:6.1%} {done:.3g}/{total:.3g} pairs, "
                             f"{done / max(now - t0, 1e-9):.3g} pairs/s")
                    last = now
    if dev.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    return Result(dtype, impl, rounding, str(dev.type), tuple(x_range), tuple(gate_range), dy_v, dy_bits,
                  xs.numel(), {r: gsets[r].numel() for r in REGIMES}, acc, secs,
                  case_hash(dtype, x_range, gate_range, dy_bits), perf)


# ----------------------------------------------------------------------------------------------
# outputs

def _hex_of(v: float, dt: torch.dtype) -> str:
    return f"0x{int(bits_of(torch.tensor([v], dtype=torch.float64).to(dt))[0]):04x}"


def case_id(res: Result, regime: str) -> str:
    return f"exhaustive-{res.dtype}-{res.case_hash}-{regime}"


def rows(res: Result) -> list[dict]:
    fmt = fmt_of(res.dtype)
    out = []
    for (o, regime), a in res.acc.items():
        if a.pairs == 0:
            continue
        budget = budget_for(o, regime, fmt)
        metric = METRIC[o]
        worst_list = a.worst[metric]
        w = worst_list[0] if worst_list else None
        worst_metric = a.max_ulp if metric == "ulp" else a.max_scaled
        if a.nonfinite:
            status, reason = "fail", f"{o}: {a.nonfinite} non-finite outputs where the reference is finite"
        elif not worst_metric <= budget:
            status = "fail"
            reason = f"{o} {metric} error {worst_metric:.4g} > budget {budget:.4g} ({a.over} pairs over)"
        else:
            status, reason = "pass", ""
        xr, gr = res.x_range, res.gate_range
        inputs = ""
        if w is not None:
            inputs = f"x={_hex_of(w.x, fmt.dtype)} gate={_hex_of(w.g, fmt.dtype)} dy=0x{res.dy_bits:04x}"
        out.append({
            "case_id": case_id(res, regime),
            "label": f"exhaustive {res.dtype} x[0x{xr[0]:04x}:0x{xr[1]:04x}) gate[0x{gr[0]:04x}:0x{gr[1]:04x}) "
                     f"dy={res.dy:g} ({regime})",
            "regime": regime, "impl": res.impl, "rounding": res.rounding, "device": res.device,
            "dtype": res.dtype, "gate_dtype": res.dtype, "weight_dtype": res.dtype,
            "act_dtype": res.dtype, "out_dtype": res.dtype,
            "shape": f"{res.n_x}x{res.n_gate[regime]}", "hidden": 1, "tokens": a.pairs,
            "zero_centered_gamma": False, "eps": 0.0,
            "x_dist": f"bits[0x{xr[0]:04x}:0x{xr[1]:04x})",
            "gate_dist": f"bits[0x{gr[0]:04x}:0x{gr[1]:04x}) {regime}",
            "gamma_dist": "", "seed": 0,
            "output": o, "reference": "exact",
            "max_ulp": a.max_ulp, "mean_ulp": a.sum_ulp / a.pairs, "p99_ulp": _p99(a),
            "max_abs_err": a.max_abs, "max_rel_err": a.max_rel, "max_scaled_err": a.max_scaled,
            "mean_scaled_err": a.sum_scaled / a.pairs,
            "budget_metric": metric, "budget": budget, "budget_source": "exhaustive default",
            "status": status, "reason": reason,
            "count_over": a.over, "n_elements": a.pairs, "cr_mismatch": a.mismatch,
            "certified": a.certified, "uncertified": a.uncertified,
            "worst_index": "", "worst_got": w.got if w else "", "worst_ref": w.ref if w else "",
            "worst_inputs": inputs,
            "replay": (f"harness exhaustive --dtype {res.dtype} --impl {res.impl} "
                       f"--x-range 0x{_hex_of(w.x, fmt.dtype)[2:]}:0x{int(_hex_of(w.x, fmt.dtype), 16) + 1:04x} "
                       f"--gate-range 0x{_hex_of(w.g, fmt.dtype)[2:]}:0x{int(_hex_of(w.g, fmt.dtype), 16) + 1:04x} "
                       f"--dy {res.dy!r} --device cpu") if w else "",
        })
    return out


def _p99(a: Acc) -> float:
    """Upper edge of the histogram bin holding the 99th percentile of the ULP error."""
    h = a.hist_ulp.tolist()
    target, run = 0.99 * sum(h), 0
    for i, n in enumerate(h):
        run += n
        if run >= target:
            return EDGES[i + 1]
    return EDGES[-1]


def histogram_rows(res: Result) -> list[dict]:
    out = []
    for (o, regime), a in res.acc.items():
        if a.pairs == 0:
            continue
        for metric, h in (("ulp", a.hist_ulp), ("scaled", a.hist_scaled)):
            if h is None:
                continue
            for i, n in enumerate(h.tolist()):
                out.append({"case_id": case_id(res, regime), "impl": res.impl, "output": o, "regime": regime,
                            "metric": metric, "bin_lo": EDGES[i], "bin_hi": EDGES[i + 1], "count": int(n)})
    return out


def worst_rows(res: Result) -> list[dict]:
    dt = fmt_of(res.dtype).dtype
    out = []
    for (o, regime), a in res.acc.items():
        for metric, lst in a.worst.items():
            for rank, w in enumerate(lst):
                out.append({"case_id": case_id(res, regime), "impl": res.impl, "output": o, "regime": regime,
                            "metric": metric, "rank": rank, "x_bits": _hex_of(w.x, dt),
                            "gate_bits": _hex_of(w.g, dt), "dy_bits": f"0x{res.dy_bits:04x}",
                            "x": w.x, "gate": w.g, "dy": res.dy, "got_bits": _hex_of(w.got, dt),
                            "got": w.got, "ref": w.ref, "golden": w.golden,
                            "ulp_err": w.ulp, "scaled_err": w.scaled})
    return out


def _replace_rows(path: Path, new, keys: list[str]):
    import pandas as pd
    df = pd.DataFrame(new)
    if path.exists() and path.stat().st_size:
        old = pd.read_csv(path)
        if set(keys) <= set(old.columns) and len(df):
            mine = set(map(tuple, df[keys].astype(str).values.tolist()))
            keep = [tuple(r) not in mine for r in old[keys].astype(str).values.tolist()]
            df = pd.concat([old[keep], df], ignore_index=True)
    return df


def write_outputs(res: Result, out_dir: Path) -> None:
    """results.csv: rows of the same (case_id, impl) are replaced, others kept (append);
    histogram.csv and worst.csv likewise."""
    from reports.results_io import write_results
    out_dir.mkdir(parents=True, exist_ok=True)
    keys = ["case_id", "impl"]
    write_results(out_dir / "results.csv", _replace_rows(out_dir / "results.csv", rows(res), keys))
    for name, rs in (("histogram.csv", histogram_rows(res)), ("worst.csv", worst_rows(res))):
        df = _replace_rows(out_dir / name, rs, keys)
        tmp = out_dir / (name + ".tmp")
        df.to_csv(tmp, index=False)
        os.replace(tmp, out_dir / name)


def summary(res: Result) -> str:
    lines = [f"exhaustive {res.dtype} impl={res.impl} ({res.rounding}) on {res.device}: "
             f"{res.n_x} x values x {res.n_gate['normal']}+{res.n_gate['extreme']} gates (normal+extreme), "
             f"dy={res.dy:g}, {res.seconds:.2f} s, "
             f"{res.n_x * sum(res.n_gate.values()) / max(res.seconds, 1e-9):.3g} pairs/s"]
    lines.append(f"{'output':6s} {'regime':7s} {'pairs':>12s} {'max_ulp':>10s} {'max_scaled':>10s} "
                 f"{'budget':>12s} {'not_CR':>10s} {'certified':>9s} {'uncert':>6s} {'nonfin':>6s}  status")
    for r in rows(res):
        a = res.acc[(r["output"], r["regime"])]
        lines.append(f"{r['output']:6s} {r['regime']:7s} {a.pairs:12d} {a.max_ulp:10.7g} {a.max_scaled:10.7g} "
                     f"{r['budget_metric'] + ' ' + format(r['budget'], '.6g'):>12s} {a.mismatch:10d} "
                     f"{a.certified:9d} {a.uncertified:6d} {a.nonfinite:6d}  {r['status']}")
        hist = " ".join(f"<={EDGES[i + 1]:.8g}:{n}" for i, n in enumerate(a.hist_ulp.tolist()) if n)
        lines.append(f"{'':15s} ulp histogram {hist}")
        if r["status"] != "pass":
            lines.append(f"{'':15s} {r['reason']}; worst {r['worst_inputs']}")
    return "\n".join(lines)


def exhaustive_command(args) -> int:
    if args.impl not in IMPLS:
        raise UsageError(f"--impl {args.impl}: exhaustive mode supports {', '.join(IMPLS)}")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device available")
    xr = parse_range(args.x_range, "--x-range")
    gr = parse_range(args.gate_range, "--gate-range")
    try:
        dy = float(args.dy)
    except ValueError:
        raise UsageError(f"--dy {args.dy!r}: not a number") from None
    if args.chunk < 1:
        raise UsageError("--chunk: must be >= 1")
    res = run_exhaustive(args.dtype, args.impl, device, xr, gr, dy, args.chunk,
                         progress=lambda s: print(s, file=sys.stderr, flush=True))
    out = Path(args.out)
    write_outputs(res, out)
    print(summary(res))
    failed = any(r["status"] != "pass" for r in rows(res))
    print(f"harness: wrote {out / 'results.csv'}, {out / 'histogram.csv'}, {out / 'worst.csv'}")
    return 1 if failed else 0
