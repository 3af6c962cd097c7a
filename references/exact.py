"""Closed-form float64 forward and backward of RMSNorm -> SiLUGate (the primary reference).

With r = (mean(x^2) + eps)^(-1/2), xhat = x*r, g = weight (+1 when zero-centred), s = sigmoid(t):
    n      = xhat * g                      silu(t)  = t*s
    y      = n * silu(gate)                silu'(t) = s * (1 + t*(1 - s)),  1 - s = sigmoid(-t)
    dn     = dy * silu(gate)
    dgate  = dy * n * silu'(gate)
    dx     = r * (dn*g - xhat * mean(dn*g*xhat))        (the RMSNorm backward, derived in docs)
    dweight= sum over leading dims of dn * xhat

The *gauge* of each output is the same formula on absolute values (the BLAS test-ratio idea):
an error of a few u*gauge is what correct finite-precision arithmetic can leave, even where the
value itself cancels to ~0 (dx, dweight, and dgate near the root of silu' at t ~ -1.2785).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

OUTPUTS = ("y", "dx", "dgate", "dweight")


@dataclass(frozen=True)
class Inputs:
    """The already-rounded inputs an implementation sees, in their own dtypes."""
    x: torch.Tensor        # [..., H]
    gate: torch.Tensor     # [..., H]
    weight: torch.Tensor   # [H]
    dy: torch.Tensor       # [..., H], in the activation dtype
    eps: float
    zero_centered_gamma: bool

    @property
    def hidden(self) -> int:
        return self.x.shape[-1]

    @property
    def tokens(self) -> int:
        return self.x.numel() // max(self.hidden, 1)

    def to(self, device) -> "Inputs":
        return Inputs(self.x.to(device), self.gate.to(device), self.weight.to(device),
                      self.dy.to(device), self.eps, self.zero_centered_gamma)


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64)   # exact: every input format is a subset of float64


def silu_parts(t: torch.Tensor):
    """sigmoid, silu and silu' in float64; 1 - s as sigmoid(-t) keeps its relative accuracy."""
    s = torch.sigmoid(t)
    one_minus_s = torch.sigmoid(-t)
    return s, t * s, s * (1 + t * one_minus_s), s * (1 + t.abs() * one_minus_s)


def norm_parts(inp: Inputs):
    x = _f64(inp.x)
    w = _f64(inp.weight)
    g = w + 1 if inp.zero_centered_gamma else w
    r = torch.rsqrt((x * x).mean(-1, keepdim=True) + inp.eps)
    xhat = x * r
    return x, g, r, xhat


def rmsnorm_backward(dn: torch.Tensor, g: torch.Tensor, r: torch.Tensor, xhat: torch.Tensor):
    """dx and dweight of n = xhat*g for an upstream dn (float64, any leading dims)."""
    dxhat = dn * g
    dx = r * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdim=True))
    dweight = (dn * xhat).reshape(-1, dn.shape[-1]).sum(0)
    return dx, dweight


def rmsnorm_backward_gauge(dn_abs: torch.Tensor, g, r, xhat):
    """The RMSNorm backward on absolute values: the scale of its rounding errors."""
    a = dn_abs * g.abs()
    dx_g = r * (a + xhat.abs() * (a * xhat.abs()).mean(-1, keepdim=True))
    dw_g = (dn_abs * xhat.abs()).reshape(-1, dn_abs.shape[-1]).sum(0)
    return dx_g, dw_g


def intermediates(inp: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """n = xhat * g and dn = dy * silu(gate) in float64 (the same operations as exact_outputs)."""
    _, g, _, xhat = norm_parts(inp)
    t = _f64(inp.gate)
    return xhat * g, _f64(inp.dy) * silu_parts(t)[1]


def completed_on_use(inp: Inputs, values: dict, gauges: dict) -> tuple["Derived", "Derived"]:
    """What exact_outputs returns, from a pass that wrote only the values of y, dx, dgate, dweight
    and the gauges of dx, dgate, dweight: n and dn (computed together, once) and the |value|
    gauges of y, n, dn follow on first use."""
    memo: list = []

    def inter(i: int) -> torch.Tensor:
        if not memo:
            memo.append(intermediates(inp))
        return memo[0][i]
    vals = Derived(values, n=lambda: inter(0), dn=lambda: inter(1))
    return vals, Derived(gauges, y=lambda: vals["y"].abs(), n=lambda: vals["n"].abs(), dn=lambda: vals["dn"].abs())


class Derived(dict):
    """A dict whose missing entries are computed on first use by the functions given by name."""

    def __init__(self, data: dict, **make):
        super().__init__(data)
        self._make = make

    def __missing__(self, key):
        if key not in self._make:
            raise KeyError(key)
        value = self[key] = self._make[key]()       # a recipe that raises stays, its error shows again
        del self._make[key]
        return value

    def pending(self) -> tuple:
        """Names not computed yet."""
        return tuple(self._make)


def exact_outputs(inp: Inputs) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Exact (float64) values and gauges of y, dx, dgate, dweight, plus the intermediates n, dn."""
    x, g, r, xhat = norm_parts(inp)
    t = _f64(inp.gate)
    dy = _f64(inp.dy)
    s, silu, dsilu, dsilu_abs = silu_parts(t)
    n = xhat * g
    dn = dy * silu
    dx, dweight = rmsnorm_backward(dn, g, r, xhat)
    dx_g, dw_g = rmsnorm_backward_gauge(dn.abs(), g, r, xhat)
    values = {"n": n, "dn": dn, "y": n * silu, "dgate": dy * n * dsilu, "dx": dx, "dweight": dweight}
    gauges = {"n": n.abs(), "dn": dn.abs(), "y": (n * silu).abs(),
              "dgate": (dy * n).abs() * dsilu_abs, "dx": dx_g, "dweight": dw_g}
    return values, gauges


def float64_error_bound(inp: Inputs) -> dict[str, float]:
    """Relative-to-gauge bound on the float64 rounding error of `exact_outputs`.

    A generous count of float64 operations on each path: the H-term mean of squares, rsqrt,
    sigmoid/exp (a few ulps each), products, and the H- or T-term sums of the backward. Used by
    certification to decide where float64 cannot tell the correctly rounded answer."""
    u64 = 2.0 ** -53
    h, t = inp.hidden, inp.tokens
    base = 32 + h
    return {"n": base * u64, "dn": 32 * u64, "y": base * u64, "dgate": (base + 16) * u64,
            "dx": (2 * base + h) * u64, "dweight": (base + t) * u64}
