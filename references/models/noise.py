"""The float32 noise every implementation may add, whatever its rounding model (docs/budgets.md).

Relative to each step's gauge, in units of u32 = 2**-24, for groups of G channels and T tokens:
  rho_n     = 6 + log2 G + sqrt G      the norm's mean of squares (any SIMD/tree/blocked order),
                                       rsqrt and products, up to the normalised value (and gamma)
  rho_gate  = 8                        silu (exp, add, divide) and its product: y, dn, h, dx (gate first)
  rho_dgate = 12                       silu' (sigmoid, 1 - s, fused forms) and three products
  rho_bwd   = 4 + log2 G + sqrt G      the norm backward's G-term dot product and row update
  rho_sum   = 4 + log2 T + sqrt T      the dweight column sums over T tokens
plus absolute floors for float32 underflow (`floor`): a partial product may land among float32's
subnormals and lose up to a few of their quanta, times the factors still to come; and below
t = -88.72 a float32 SiLU computed as t / (1 + exp(-t)) overflows exp and flushes silu to -0, so the
whole value may be lost.
"""
from __future__ import annotations

import math

import torch

U32 = 2.0 ** -24
TINY32 = 4 * 2.0 ** -149           # a few of float32's smallest subnormal
SILU32_FLUSH = -88.72              # below: a float32 SiLU may return -0


def rho(group: int, tokens: int) -> dict[str, float]:
    lg, lt = math.log2(max(group, 1)), math.log2(max(tokens, 1))
    rho_n = 6 + lg + math.sqrt(group)
    return {"n": rho_n, "gate": 8.0, "dgate": 12.0, "bwd": 4 + lg + math.sqrt(group),
            "sum": 4 + lt + math.sqrt(tokens)}


def node_noise(group: int, tokens: int) -> dict[str, float]:
    """rho (u32 units) at each named step of references.closed_forms. The norm's backward and dweight
    carry rho_n too: the normalised value's own float32 error reaches them through xhat and rstd."""
    r = rho(group, tokens)
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


def exact_path_noise(output: str, norm_before_gate: bool, group: int, tokens: int) -> float:
    """All the float32 noise on an output's path from the inputs (u32 units, relative to its gauge),
    for budgets against the exact reference: EXACT_PATH's terms at this group and token count."""
    r = rho(group, tokens)
    return sum(k * r[term] for term, k in EXACT_PATH[bool(norm_before_gate)][output].items())


def gate_floor(u_abs, t, extra=None):
    """Underflow of u * silu(t) (or d * silu(t)): a few float32 quanta times max(1, |u|) max(1, |t|);
    below the flush point the whole value."""
    s = torch.sigmoid(t)
    flush = t < SILU32_FLUSH
    one = torch.ones_like(t)
    return torch.where(flush, u_abs * (t * s).abs(), TINY32 * torch.maximum(one, u_abs) * torch.maximum(one, t.abs()))


def dgate_floor(d_abs, u_abs, t):
    """Underflow of d * u * silu'(t), and float32 silu'(t) = s (1 + t (1 - s)): `1 - s` carries s's
    rounding (u32 s) as an absolute error, times |t| — for large positive t that is |t| u32, beyond
    any constant relative bound."""
    s = torch.sigmoid(t)
    dsilu = s * (1 + t * torch.sigmoid(-t))
    one = torch.ones_like(t)
    under = torch.where(t < SILU32_FLUSH, d_abs * u_abs * dsilu.abs(),
                        TINY32 * torch.maximum(one, d_abs) * torch.maximum(one, u_abs) * (1 + t.abs()))
    return under + t.abs() * s * U32 * d_abs * u_abs


def backward_floor(u_abs, r, g_abs):
    """Underflow in the norm backward, du = r duhat - u r^3 mean(duhat u): a partial product (d g,
    duhat u, duhat uhat) can be a float32 subnormal even where the result is normal (found by
    hypothesis, G = 1, x = -227.5, gate = -86.6), and the factors applied after it multiply the lost
    quantum: r after duhat, r^2 after duhat uhat, r^3 u after duhat u (autograd's order; hypothesis
    again: G = 1, r = 9.5, a subnormal dx 21 ULP outside a floor that counted only 1 + r). Not a bare
    r^3: at r = 1/sqrt(eps) it would admit a dn rounded to bf16 in a normal float32 dx."""
    return TINY32 * (1 + u_abs) * (1 + r + r * r + r ** 3 * u_abs) * (1 + g_abs)


def xhat_floor(r):
    """Underflow of uhat = u r itself: a float32 subnormal loses its half quantum, which the forward's
    gamma and SiLU products and the backward (it reuses uhat) multiply (hypothesis: fp32, x
    subnormal, large gates, y 70 ULP outside)."""
    return TINY32 * (1 + r)


def dweight_floor(u_abs, r):
    return (TINY32 * (1 + u_abs) * (1 + r)).reshape(-1, u_abs.shape[-1]).sum(0)
