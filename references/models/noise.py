"""The float32 noise an implementation of a math class may add, whatever its rounding model
(docs/budgets.md; the classes and their instruction bounds: references.mathclass).

Relative to each step's gauge, in units of u32 = 2**-24, for groups of G channels and T tokens:
  rho_n     = 6 + log2 G + sqrt G      the norm's mean of squares (any SIMD/tree/blocked order),
                                       rsqrt and products, up to the normalised value (and gamma)
  rho_gate  = 8                        silu (exp, add, divide) and its product: y, dn, h, dx (gate first)
  rho_dgate = 12                       silu' (sigmoid, 1 - s, fused forms) and three products
  rho_bwd   = 4 + log2 G + sqrt G      the norm backward's G-term dot product and row update
  rho_sum   = 4 + log2 T + sqrt T      the dweight column sums over T tokens
the `fast` class adds FAST_RSTD to rho_n and FAST_NORM_BACKWARD to rho_bwd (approximate sqrt and
division), and at the gate steps a noise that grows with |t| (`fast_gate_noise`: the rounded
argument of ex2.approx), which is per element. Plus absolute floors for float32 underflow (`floor`):
a partial product may land among float32's subnormals and lose up to a few of their quanta (under
FTZ: the whole subnormal), times the factors still to come; and below t = -88.72 a float32 SiLU
computed as t / (1 + exp(-t)) overflows exp and flushes silu to -0 (fast or FTZ: below -87.34), so
the whole value may be lost.

The gate activation (references.closed_forms.ACTIVATIONS) changes only what a gate step's floors
and per-element terms are made of, never the rho terms: a sigmoid gate step (sigmoid, then the
product) is silu's without its product by t, so rho_gate and rho_dgate bound it too (docs/budgets.md,
"The gate activation"). Its flush point is silu's — the same sigmoid underflows — but what it loses
there is a float32 subnormal, sigmoid(t) < 2^-126, not silu's normal |t| sigmoid(t); and sigmoid'
= s (1 - s) has no factor t: `1 - s` carries s's whole float32 error SIGMOID32 as an absolute
error, where the exact sigmoid' ~ e^-t shrinks (for t > 17 a float32 s is 1 and s (1 - s) is 0).
"""
from __future__ import annotations

import math

import torch

from harness.references.mathclass import (ACCURATE, FAST_NORM_BACKWARD, FAST_RSTD, FAST_SILU_FLUSH,
                                          MIN_NORMAL32, U32, MathClass, sigmoid_error)

TINY32 = 4 * 2.0 ** -149           # a few of float32's smallest subnormal
TINY32_FTZ = 4 * MIN_NORMAL32      # under FTZ a float32 result below 2^-126 is lost whole
SILU32_FLUSH = -88.72              # below: a float32 sigmoid (so SiLU) may return 0 (exp(-t) overflows)
# A float32 sigmoid's relative error, accurate class (u32): exp within one ulp (2 u32), the add and
# the division correctly rounded (1 u32 each); the stable form exp(t) / (1 + exp(t)) alike.
# tests/test_mathclass.py checks torch.sigmoid's float32 error against mpmath over the gate ranges.
SIGMOID32 = 4.0


def tiny(mc: MathClass) -> float:
    """The quantum an underflowing float32 partial product may lose, times a few."""
    return TINY32_FTZ if mc.ftz else TINY32


def silu_flush(mc: MathClass) -> float:
    """Below this gate a float32 SiLU (or sigmoid) may be 0: exp overflows below -88.72; a fast or
    flushing one loses it from -126 ln 2 on (div.approx returns 0 past 2^126; FTZ flushes sigmoid's
    subnormals). Both activations flush at the same t: the sigmoid inside them underflows."""
    return FAST_SILU_FLUSH if (mc.fast or mc.ftz) else SILU32_FLUSH


def rho(group: int, tokens: int, mc: MathClass = ACCURATE) -> dict[str, float]:
    lg, lt = math.log2(max(group, 1)), math.log2(max(tokens, 1))
    rho_n = 6 + lg + math.sqrt(group) + (FAST_RSTD if mc.fast else 0.0)
    return {"n": rho_n, "gate": 8.0, "dgate": 12.0,
            "bwd": 4 + lg + math.sqrt(group) + (FAST_NORM_BACKWARD if mc.fast else 0.0),
            "sum": 4 + lt + math.sqrt(tokens)}


def node_noise(group: int, tokens: int, mc: MathClass = ACCURATE) -> dict[str, float]:
    """rho (u32 units) at each named step of references.closed_forms. The norm's backward and dweight
    carry rho_n too: the normalised value's own float32 error reaches them through xhat and rstd."""
    r = rho(group, tokens, mc)
    return {"gate.out": r["gate"], "gate.dinput": r["gate"], "gate.dgate": r["dgate"],
            "norm.xhat": r["n"], "norm.dinput": r["bwd"] + r["n"], "norm.dweight": r["sum"] + r["n"]}


# The float32 noise on each output's path from the inputs, as multiples of the rho terms, per op
# order (True: norm first). Gate first, h's noise (rho_gate) reaches y through rstd and xhat twice,
# and the norm backward's result up to five times (docs/budgets.md).
EXACT_PATH = {
    True: {"y": {"n": 1, "gate": 1}, "dgate": {"n": 1, "dgate": 1},
           "dx": {"n": 1, "gate": 1, "bwd": 1}, "dweight": {"n": 1, "gate": 1, "sum": 1}},
    False: {"y": {"gate": 2, "n": 1}, "dgate": {"gate": 5, "n": 1, "bwd": 1, "dgate": 1},
            "dx": {"gate": 6, "n": 1, "bwd": 1}, "dweight": {"gate": 2, "n": 1, "sum": 1}},
}


def exact_path_noise(output: str, norm_before_gate: bool, group: int, tokens: int,
                     mc: MathClass = ACCURATE) -> float:
    """All the constant float32 noise on an output's path from the inputs (u32 units, relative to its
    gauge), for budgets against the exact reference: EXACT_PATH's terms at this group and token
    count. (The per-element noise of a fast exp reaches the exact budgets through the exact value's
    allowance, references.models.reference.exact_allowance.)"""
    r = rho(group, tokens, mc)
    return sum(k * r[term] for term, k in EXACT_PATH[bool(norm_before_gate)][output].items())


def fast_gate_noise(node: str, f: dict, mc: MathClass, activation: str = "silu"):
    """A fast sigmoid's extra error at a gate step (absolute, per element), or None. `f` holds the
    step's factors as gauges (`u`, `d`) and the gate `t`. With E the sigmoid's relative error
    (mathclass.sigmoid_error) and s' = s (1 + E):
      u silu(t), d silu(t)         relative E of the value: E |u t s|;
      d u silu'(t), silu' = s (1 + t (1 - s)):  s' moves it by |s E| (1 + |t| (1 - s) + |t| s),
                                   i.e. at most |d u| s E (1 + |t|) — `1 - s` by subtraction
                                   carries s's whole error, times t (for large positive t the
                                   division's 2 ulp of s ~ 1, times t);
      u sigmoid(t), d sigmoid(t)   E |u s|;
      d u sigmoid'(t), sigmoid' = s (1 - s):  s' moves it by |1 - 2 s| s E <= s E: |d u| s E."""
    if not mc.fast or not node.startswith("gate."):
        return None
    t = f["t"]
    s = torch.sigmoid(t)
    e = sigmoid_error(t, mc) * U32
    if activation == "sigmoid":
        return (f["d"] * f["u"] if node == "gate.dgate" else f["u"]) * s * e
    if node == "gate.dgate":
        return f["d"] * f["u"] * s * e * (1 + t.abs())
    return f["u"] * (t * s).abs() * e


def gate_floor(u_abs, t, mc: MathClass = ACCURATE, activation: str = "silu"):
    """Underflow of u * a(t) (or d * a(t)): a few float32 quanta of the activation, times max(1, |u|)
    — silu's also times max(1, |t|), its product by t; below the flush point the whole value (silu's
    a float32 normal up to 2.6e-37, sigmoid's a subnormal below 2.9e-39, times |u|). (The flush
    branch is formed only where some gate is below the flush point: rarely.)"""
    u_abs, t = torch.broadcast_tensors(u_abs, t)          # the floor has the step's shape
    flush = t < silu_flush(mc)
    if activation == "sigmoid":
        floor = tiny(mc) * u_abs.clamp(min=1.0)
        return torch.where(flush, u_abs * torch.sigmoid(t), floor) if bool(flush.any()) else floor
    floor = tiny(mc) * u_abs.clamp(min=1.0) * t.abs().clamp(min=1.0)
    return torch.where(flush, u_abs * (t * torch.sigmoid(t)).abs(), floor) if bool(flush.any()) else floor


def dgate_floor(d_abs, u_abs, t, mc: MathClass = ACCURATE, activation: str = "silu"):
    """Underflow of d * u * a'(t), and the cancellation in float32 a'(t):
      silu' = s (1 + t (1 - s)): `1 - s` carries s's rounding (u32 s) as an absolute error, times |t|
              — for large positive t that is |t| u32, beyond any constant relative bound;
      sigmoid' = s (1 - s): `1 - s` carries s's whole float32 error (SIGMOID32 u32 s) as an absolute
              error, where sigmoid' itself is ~e^-t (and 0 in float32 past t ~ 17)."""
    s = torch.sigmoid(t)
    flush = t < silu_flush(mc)
    any_flush = bool(flush.any())
    if activation == "sigmoid":
        under = tiny(mc) * d_abs.clamp(min=1.0) * u_abs.clamp(min=1.0)
        if any_flush:
            under = torch.where(flush, d_abs * u_abs * s * torch.sigmoid(-t), under)
        return under + SIGMOID32 * s * U32 * d_abs * u_abs
    under = tiny(mc) * d_abs.clamp(min=1.0) * u_abs.clamp(min=1.0) * (1 + t.abs())
    if any_flush:
        under = torch.where(flush, d_abs * u_abs * (s * (1 + t * torch.sigmoid(-t))).abs(), under)
    return under + t.abs() * s * U32 * d_abs * u_abs


def backward_floor(u_abs, r, g_abs, mc: MathClass = ACCURATE):
    """Underflow in the norm backward, du = r duhat - u r^3 mean(duhat u): a partial product (d g,
    duhat u, duhat uhat) can be a float32 subnormal even where the result is normal (found by
    hypothesis, G = 1, x = -227.5, gate = -86.6), and the factors applied after it multiply the lost
    quantum: r after duhat, r^2 after duhat uhat, r^3 u after duhat u (autograd's order; hypothesis
    again: G = 1, r = 9.5, a subnormal dx 21 ULP outside a floor that counted only 1 + r). Not a bare
    r^3: at r = 1/sqrt(eps) it would admit a dn rounded to bf16 in a normal float32 dx."""
    return tiny(mc) * (1 + u_abs) * (1 + r + r * r + r ** 3 * u_abs) * (1 + g_abs)


def xhat_floor(r, mc: MathClass = ACCURATE):
    """Underflow of uhat = u r itself: a float32 subnormal loses its half quantum, which the forward's
    gamma and SiLU products and the backward (it reuses uhat) multiply (hypothesis: fp32, x
    subnormal, large gates, y 70 ULP outside)."""
    return tiny(mc) * (1 + r)


def dweight_floor(u_abs, r, mc: MathClass = ACCURATE):
    return (tiny(mc) * (1 + u_abs) * (1 + r)).reshape(-1, u_abs.shape[-1]).sum(0)
