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


def case_hash(dtype: str, xr, gr, dy_bits: int) -> str:
    key = f"{dtype}:{xr[0]:x}:{xr[1]:x}:{gr[0]:x}:{gr[1]:x}:{dy_bits:x}"
    return hashlib.sha1(key.encode()).hexdigest()[:8]


def run_exhaustive(dtype: str, impl: str = "torch", device: str = "cpu", x_range=(0, 1 << 16),
                   gate_range=(0, 1 << 16), dy: float = 1.0, chunk: int = 1 << 22,
                   impl_fn: Callable | None = None, progress: Callable[[str], None] | None = None,
                   compile: bool | None = None) -> Result:
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
