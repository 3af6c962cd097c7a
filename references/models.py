"""Model references: what an implementation of a declared rounding model computes when every
step between its rounding points is exact, widened by the float32 noise it cannot avoid.

Each model output is an interval [lo, hi] of float64 values (the unrounded value before the
output's final rounding). The exact reference is the degenerate interval [v, v].

The trap: an implementation computes n (and dn) in float32 and only then rounds to the activation
dtype. Where the exact n lies within float32 error of a rounding boundary, either neighbour is a
legitimate result. So n_r is the interval [round(n - rho_n*|n|), round(n + rho_n*|n|)], and the
ambiguity is carried into every output that uses it (y and dgate take the hull of both candidates;
dx and dweight an allowance through the linear backward on absolute values).

float32 noise, in units of u32 = 2**-24, relative to each quantity's gauge (docs/budgets.md):
  rho_n     = 6 + log2 H + sqrt H      mean of squares (any SIMD/tree/blocked order), rsqrt, products
  rho_dn    = 8                        sigmoid (exp, add, divide), two products
  rho_y     = 8                        silu and the product, after n
  rho_dgate = 12                       silu' (sigmoid, 1-s, fused form), three products
  rho_dx    = 4 + log2 H + sqrt H      the H-term dot product and the row update, after n and dn
  rho_dw    = 4 + log2 T + sqrt T      the T-term column sums, after n and dn
"""
from __future__ import annotations

import math

import torch

from harness.references.exact import Inputs, norm_parts, rmsnorm_backward, \
    rmsnorm_backward_gauge, silu_parts
from harness.references.formats import Format, round_to

MODELS = ("chain", "fused")
U32 = 2.0 ** -24
# float32 silu/silu' of gates below ~-87 are subnormal: their error is absolute, a few of the
# smallest float32 subnormal, times whatever multiplies them.
TINY32 = 4 * 2.0 ** -149
# float32 sigmoid as 1/(1 + exp(-t)) (PyTorch's CPU kernel, and many others) overflows exp(-t)
# for t < -ln(float32 max) = -88.72 and returns silu = -0 there, although the true silu is still a
# float32 normal down to t ~ -87.3 .. -103. A float32 SiLU may legitimately lose the whole value:
# the model allows anything between the value and 0 (extreme regime: gates below -87).
SILU32_FLUSH = -88.72


def noise(inp: Inputs) -> dict[str, float]:
    h, t = inp.hidden, inp.tokens
    lh, lt = math.log2(max(h, 1)), math.log2(max(t, 1))
    return {"n": (6 + lh + math.sqrt(h)) * U32, **silugate_noise(),
            "dx": (4 + lh + math.sqrt(h)) * U32, "dweight": (4 + lt + math.sqrt(t)) * U32}


def _widen(v, gauge, rho, fmt: Format | None):
    lo, hi = v - rho * gauge, v + rho * gauge
    if fmt is not None:
        lo, hi = round_to(lo, fmt), round_to(hi, fmt)
    return lo, hi


def _hull(a, b):
    return torch.minimum(a, b), torch.maximum(a, b)


def model_reference(inp: Inputs, model: str, act: Format) -> dict[str, tuple]:
    """(lo, hi, gauge) for y, dx, dgate, dweight (and n, dn) under `model` with activation format `act`."""
    if model not in MODELS:
        raise ValueError(f"unknown rounding model {model!r}; known: {', '.join(MODELS)}")
    rho = noise(inp)
    inter = act if model == "chain" else None        # where n and dn get rounded
    x, g, r, xhat = norm_parts(inp)
    t = inp.gate.to(torch.float64)
    dy = inp.dy.to(torch.float64)
    s, silu, dsilu, dsilu_abs = silu_parts(t)
    n = xhat * g
    n_lo, n_hi = _widen(n, n.abs(), rho["n"], inter)
    dn = dy * silu
    floors = underflow_floors(t, dy, n.abs())
    dn_floor = floors["dn"]
    dn_lo, dn_hi = _widen(dn, dn.abs(), rho["dn"], None)
    dn_lo, dn_hi = dn_lo - dn_floor, dn_hi + dn_floor
    if inter is not None:
        dn_lo, dn_hi = round_to(dn_lo, inter), round_to(dn_hi, inter)

    y_lo, y_hi = _hull(n_lo * silu, n_hi * silu)
    n_abs = torch.maximum(n_lo.abs(), n_hi.abs())
    y_g = torch.maximum(y_lo.abs(), y_hi.abs())
    floors = underflow_floors(t, dy, n_abs)
    y_floor = floors["y"]
    dg_lo, dg_hi = _hull(dy * n_lo * dsilu, dy * n_hi * dsilu)
    dg_g = (dy.abs() * n_abs) * dsilu_abs
    dg_floor = floors["dgate"] + silu_grad_cancellation(t, s) * dy.abs() * n_abs

    dn_mid, dn_half = (dn_lo + dn_hi) / 2, (dn_hi - dn_lo) / 2
    dx_mid, dw_mid = rmsnorm_backward(dn_mid, g, r, xhat)
    dx_allow, dw_allow = rmsnorm_backward_gauge(dn_half, g, r, xhat)
    dx_floor, dw_floor = backward_floors(x, g, r)
    dx_allow, dw_allow = dx_allow + dx_floor, dw_allow + dw_floor
    dx_g, dw_g = rmsnorm_backward_gauge(torch.maximum(dn_lo.abs(), dn_hi.abs()), g, r, xhat)
    # n's own float32 error reaches dx/dweight through xhat, relative to the same gauges.
    dx_rho = rho["dx"] + rho["n"]
    dw_rho = rho["dweight"] + rho["n"]

    return {
        "n": (n_lo, n_hi, n.abs()), "dn": (dn_lo, dn_hi, dn.abs()),
        "y": (y_lo - rho["y"] * y_g - y_floor, y_hi + rho["y"] * y_g + y_floor, y_g),
        "dgate": (dg_lo - rho["dgate"] * dg_g - dg_floor, dg_hi + rho["dgate"] * dg_g + dg_floor, dg_g),
        "dx": (dx_mid - dx_allow - dx_rho * dx_g, dx_mid + dx_allow + dx_rho * dx_g, dx_g),
        "dweight": (dw_mid - dw_allow - dw_rho * dw_g, dw_mid + dw_allow + dw_rho * dw_g, dw_g),
    }


def underflow_floors(t, dy, n_abs) -> dict[str, torch.Tensor]:
    """Absolute float32 underflow error of dn, y and dgate, whatever the evaluation order.

    Any partial product (t*s, n*s, dy*n*s, ...) may land in float32's subnormal range and err by
    up to a subnormal quantum; the factors still to come multiply that error. The largest such
    multiplier is the product of max(1, |factor|) over the factors. Below t = -88.72 a float32
    SiLU may flush to -0 and lose the whole value."""
    _, silu, dsilu, _ = silu_parts(t)
    flush = t < SILU32_FLUSH
    one = torch.ones_like(t)
    ft, fdy, fn = torch.maximum(one, t.abs()), torch.maximum(one, dy.abs()), torch.maximum(one, n_abs)
    return {
        "dn": torch.where(flush, (dy * silu).abs(), TINY32 * fdy * ft),
        "y": torch.where(flush, (n_abs * silu).abs(), TINY32 * fn * ft),
        "dgate": torch.where(flush, (dy * n_abs * dsilu).abs(), TINY32 * fdy * fn * (1 + t.abs())),
    }


def backward_floors(x, g, r):
    """Absolute float32 underflow error of the RMSNorm backward (dx, dweight), any evaluation order.

    Partial products such as x * dxhat * r**3 / H can be float32 subnormals even where dn is normal
    (found by hypothesis: H = 1, x = -227.5, gate = -86.6); the factors applied after them (x, r,
    g) multiply the lost quantum. Negligible unless the result itself is near float32 underflow."""
    one = torch.ones_like(x)
    amp = (one + x.abs()) * (one + r) * (one + g.abs())
    return TINY32 * amp, (TINY32 * (one + x.abs()) * (one + r)).reshape(-1, x.shape[-1]).sum(0)


def silu_grad_cancellation(t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """float32 silu'(t) = s*(1 + t*(1 - s)): `1 - s` carries s's rounding (u32*s) as an absolute
    error, times |t|: for large positive t that is |t|*u32, beyond any constant relative bound."""
    return t.abs() * s * U32


def exact_allowance(inp: Inputs, model: str, act: Format) -> dict[str, torch.Tensor]:
    """Absolute per-element allowance around the exact value for an implementation of `model`.

    Relative error budgets (docs/budgets.md) cannot express what underflow does: rounding n or dn
    into the subnormal range of the activation format errs by up to half its smallest subnormal,
    whatever the value; float32 SiLU underflows or flushes; silu' cancels in `1 - s`. These
    absolute terms widen the exact value to [v - A, v + A]; the budgets cover the rest."""
    x, g, r, xhat = norm_parts(inp)
    t = inp.gate.to(torch.float64)
    dy = inp.dy.to(torch.float64)
    s, silu, dsilu, _ = silu_parts(t)
    n = xhat * g
    half_sub = act.min_subnormal / 2 if model == "chain" else 0.0
    n_abs = n.abs() + half_sub
    floors = underflow_floors(t, dy, n_abs)
    dn_floor = floors["dn"] + half_sub
    y = floors["y"] + half_sub * silu.abs()
    dgate = (floors["dgate"] + half_sub * (dy * dsilu).abs()
             + silu_grad_cancellation(t, s) * dy.abs() * n_abs)
    dx, dweight = rmsnorm_backward_gauge(dn_floor, g, r, xhat)
    dx_floor, dw_floor = backward_floors(x, g, r)
    return {"y": y, "dgate": dgate, "dx": dx + dx_floor, "dweight": dweight + dw_floor}

def silugate_noise() -> dict[str, float]:
    """The float32 noise of SiLUGate's own outputs (rho_dn, rho_y, rho_dgate above): shape-independent,
    shared by `noise` and the exhaustive SiLUGate check (harness.exhaustive)."""
    return {"dn": 8 * U32, "y": 8 * U32, "dgate": 12 * U32}
