"""The exact reference: references.closed_forms in float64, with each value's gauge.

The *gauge* of an output is its formula on absolute values (subtraction adds; the BLAS test-ratio
idea): an error of a few u*gauge is what correct finite-precision arithmetic can leave even where
the value itself cancels to ~0 (dx, dweight, and dgate near the root of silu' at t ~ -1.2785).
`Gauged` carries both through the closed forms, so the gauges are derived, never written down.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from harness.references.closed_forms import OUTPUTS, ExactHooks, Op, forward_backward

__all__ = ["OUTPUTS", "Inputs", "Gauged", "FLOAT64", "EXACT_SUMS", "exact_outputs", "float64_error_bound",
           "group_mean", "token_sum"]


@dataclass(frozen=True)
class Inputs:
    """The already-rounded inputs an implementation sees, in their own dtypes, and the operation's
    parameters. group_size None means one group of the whole hidden size."""
    x: torch.Tensor        # [..., H]
    gate: torch.Tensor     # [..., H]
    weight: torch.Tensor   # [H]
    dy: torch.Tensor       # [..., H], in the activation dtype
    eps: float
    zero_centered_gamma: bool
    group_size: int | None = None
    norm_before_gate: bool = True
    activation: str = "silu"         # the gate activation (references.closed_forms.ACTIVATIONS)

    @property
    def hidden(self) -> int:
        return self.x.shape[-1]

    @property
    def tokens(self) -> int:
        return self.x.numel() // max(self.hidden, 1)

    @property
    def group(self) -> int:
        return self.group_size or self.hidden

    @property
    def op(self) -> Op:
        return Op(float(self.eps), bool(self.zero_centered_gamma), self.group, bool(self.norm_before_gate),
                  self.activation)

    def to(self, device, copy: bool = False) -> "Inputs":
        """The inputs on `device`; `copy`: new tensors even where they are there already."""
        return replace(self, x=self.x.to(device, copy=copy), gate=self.gate.to(device, copy=copy),
                       weight=self.weight.to(device, copy=copy), dy=self.dy.to(device, copy=copy))


# ------------------------------------------------------------------ reductions over float64 tensors

def _mean_last(v: torch.Tensor) -> torch.Tensor:
    return v.mean(-1, keepdim=True)


def group_mean(v: torch.Tensor, group: int, mean=_mean_last) -> torch.Tensor:
    """Mean over each consecutive group of `group` channels of the last dim, broadcastable to v;
    `mean`: the mean over the last dim, kept (torch's, or exact_mean_last's)."""
    h = v.shape[-1]
    if group == h:
        return mean(v)
    m = mean(v.reshape(*v.shape[:-1], h // group, group))
    return m.expand(*v.shape[:-1], h // group, group).reshape(v.shape)


def token_sum(v: torch.Tensor) -> torch.Tensor:
    """Sum over every leading dimension: [..., H] -> [H]."""
    return v.reshape(-1, v.shape[-1]).sum(0)


def _two_sum(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, e): s = fl(a + b) and e = a + b - s exactly (Knuth's TwoSum, any order of magnitudes)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def double_double_sum(v: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim, pairwise in double-double arithmetic, rounded once to float64.

    Each level adds pairs (hi, lo) exactly in hi (TwoSum) and rounds only the sums of the low parts
    (each below u of its high part): a level errs by at most ~3u^2 of its terms' absolute sum, so
    log2(n) levels err by far less than u of it, and the result by at most one rounding (0.5u of
    the sum) plus that: within one float64 rounding of the terms' absolute sum, whatever n. An
    infinite or NaN term makes the sum NaN (TwoSum's inf - inf), not inf."""
    if v.shape[-1] == 0:
        return v.sum(-1)
    hi, lo = v, torch.zeros_like(v)
    while hi.shape[-1] > 1:
        if hi.shape[-1] % 2:
            pad = torch.zeros_like(hi[..., :1])
            hi, lo = torch.cat([hi, pad], -1), torch.cat([lo, pad], -1)
        s, e = _two_sum(hi[..., 0::2], hi[..., 1::2])
        hi, lo = _two_sum(s, e + (lo[..., 0::2] + lo[..., 1::2]))
    return (hi + lo)[..., 0]


def exact_mean_last(v: torch.Tensor) -> torch.Tensor:
    """The mean over the last dim, kept, its sum within one rounding (double_double_sum)."""
    return double_double_sum(v).unsqueeze(-1) / v.shape[-1]


def exact_token_sum(v: torch.Tensor) -> torch.Tensor:
    """token_sum within one rounding of each column's terms (double_double_sum)."""
    return double_double_sum(v.reshape(-1, v.shape[-1]).transpose(0, 1))


# ------------------------------------------------------------------ the gauged float64 arithmetic

class Gauged:
    """A float64 value and its gauge, through +, - and * (the gauge of a - b is g_a + g_b)."""
    __slots__ = ("v", "g")

    def __init__(self, v, g):
        self.v, self.g = v, g

    @staticmethod
    def of(c) -> "Gauged":
        return c if isinstance(c, Gauged) else Gauged(c, abs(c))

    def __add__(self, o):
        o = Gauged.of(o)
        return Gauged(self.v + o.v, self.g + o.g)

    __radd__ = __add__

    def __sub__(self, o):
        o = Gauged.of(o)
        return Gauged(self.v - o.v, self.g + o.g)

    def __rsub__(self, o):
        return Gauged.of(o) - self

    def __mul__(self, o):
        o = Gauged.of(o)
        return Gauged(self.v * o.v, self.g * o.g)

    __rmul__ = __mul__

    def __neg__(self):
        return Gauged(-self.v, self.g)


class Float64(ExactHooks):
    """closed_forms' arithmetic on float64 tensors: every hook is the identity."""

    @staticmethod
    def sigmoid(t: Gauged) -> Gauged:
        s = torch.sigmoid(t.v)
        return Gauged(s, s)

    @staticmethod
    def rsqrt(v: Gauged) -> Gauged:
        r = torch.rsqrt(v.v)
        return Gauged(r, r)

    # the values' reductions (a subclass may sum more accurately); a gauge's are always these
    mean_last = staticmethod(_mean_last)
    total = staticmethod(token_sum)

    def mean_of_squares(self, u: Gauged, group: int) -> Gauged:
        m = group_mean(u.v * u.v, group, self.mean_last)
        return Gauged(m, m)

    def group_mean(self, v: Gauged, group: int) -> Gauged:
        return Gauged(group_mean(v.v, group, self.mean_last), group_mean(v.g, group))

    def token_sum(self, v: Gauged) -> Gauged:
        return Gauged(self.total(v.v), token_sum(v.g))


FLOAT64 = Float64()


class ExactSums(Float64):
    """Float64 with every sum (the mean of squares, the projection's mean, dweight's token sum)
    within one rounding of its terms: the error of every output is then that of a case with
    G = T = 2 (float64_error_bound(exact_sums=True))."""
    mean_last = staticmethod(exact_mean_last)
    total = staticmethod(exact_token_sum)


EXACT_SUMS = ExactSums()


def gauged_inputs(inp: Inputs) -> tuple[Gauged, Gauged, Gauged, Gauged]:
    """x, gate, g, dy as Gauged float64 (exact: every input format is a subset of float64); g is
    the gamma (weight + 1 when zero-centred, exact), passed on as the weight with zero-centring done."""
    def g64(t):
        t = t.to(torch.float64)
        return Gauged(t, t.abs())
    w = inp.weight.to(torch.float64)
    g = w + 1 if inp.zero_centered_gamma else w
    return g64(inp.x), g64(inp.gate), Gauged(g, g.abs()), g64(inp.dy)


def exact_outputs(inp: Inputs, with_mid: bool = False, arithmetic: Float64 = FLOAT64
                  ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Exact (float64) values and gauges of y, dx, dgate, dweight (and of mid, dmid: the first op's
    output and its gradient, when asked); `arithmetic` EXACT_SUMS: every sum within one rounding."""
    x, t, g, dy = gauged_inputs(inp)
    op = replace(inp.op, zero_centered_gamma=False)          # g carries the + 1 already
    q = forward_backward(x, t, g, dy, op, arithmetic)
    keys = OUTPUTS + (("mid", "dmid") if with_mid else ())
    return {k: q[k].v for k in keys}, {k: q[k].g for k in keys}


def float64_error_bound(inp: Inputs, exact_sums: bool = False) -> dict[str, float]:
    """Relative-to-gauge bound on the float64 rounding error of `exact_outputs`.

    A generous count of float64 operations on each path: the G-term mean of squares, rsqrt,
    sigmoid/exp (a few ulps each), products, and the G- or T-term sums of the backward; the gate-first
    order adds the activation's exp before the norm (+32). A sigmoid gate has one product fewer than
    silu on each path: the same bound holds for both activations. Used by certification to decide where float64
    cannot tell the correctly rounded answer.

    The G and T terms are the float64 sums' (a sum of n terms errs by at most n - 1 roundings of
    its terms' absolute sum). With `exact_sums` (EXACT_SUMS: every sum within one rounding of its
    terms' absolute sum, a mean's division one more) the bound is that of G = T = 2, whose terms
    count those two roundings; the O(u^2 log n) of the double-double sums is within the constants."""
    u64 = 2.0 ** -53
    g, t = (min(inp.group, 2), min(inp.tokens, 2)) if exact_sums else (inp.group, inp.tokens)
    if inp.norm_before_gate:
        base = 32 + g
        bound = {"y": base, "dgate": base + 16, "dx": 2 * base + g, "dweight": base + t,
                 "mid": base, "dmid": 32}
    else:                                   # silu before the norm; dx and dgate after its backward
        base = 64 + g
        bound = {"y": base, "dgate": 2 * base + g + 16, "dx": 2 * base + g + 32, "dweight": base + t,
                 "mid": 32, "dmid": 2 * base + g}
    return {k: v * u64 for k, v in bound.items()}
