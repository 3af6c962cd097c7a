"""The implementations under test: SiLUGate alone, (x, gate, dy) -> (y, dn, dgate) in the dtype, for
the gate activation asked for (`activation`: silu, or sigmoid: y = x sigmoid(gate)).

Their names are the exhaustive mode's own, prefixed `silugate-`: they are not the sweep's
implementations (harness/impls: the whole gated norm), and share no name with them (a test checks).
Each declares a rounding model of the shared registry (references/models); for SiLUGate alone no
model has a rounding point between its inputs and outputs. Every one computes with eager ATen
(F.silu, aten.silu_backward; torch.sigmoid, aten.sigmoid_backward — on float32: libm's expf on the
CPU, libdevice's on CUDA, IEEE division; no fast-math): the `accurate` math class (docs/budgets.md)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

# Each activation's eager ATen kernels: forward, and its backward as autograd calls it (silu's from
# the input, sigmoid's from its output).
FORWARD = {"silu": F.silu, "sigmoid": torch.sigmoid}


def _backward(activation: str, grad: torch.Tensor, t: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    if activation == "sigmoid":
        return torch.ops.aten.sigmoid_backward(grad, a)
    return torch.ops.aten.silu_backward(grad, t)


def torch_autograd(x: torch.Tensor, g: torch.Tensor, dy: torch.Tensor, activation: str = "silu"):
    """The reference path: eager autograd on leaves x, g of the same shape (x plays n)."""
    x = x.detach().clone().requires_grad_(True)
    g = g.detach().clone().requires_grad_(True)
    y = (x.float() * FORWARD[activation](g.float())).to(x.dtype)
    y.backward(dy.expand_as(y).to(x.dtype))
    return y.detach(), x.grad, g.grad


def torch_fast(x: torch.Tensor, g: torch.Tensor, dy: torch.Tensor, activation: str = "silu"):
    """Autograd-free: the same ATen kernels autograd runs, per gate where nothing depends on x.

    x: [bx], g: [bg], dy: 0-dim, all in the dtype. Returns y [bx, bg], dn [bg], dgate [bx, bg].
    MulBackward gives grad*other (commutative, so the same float32 products); the activation's
    backward is aten.silu_backward(grad, input) or aten.sigmoid_backward(grad, output), called here
    on the same (broadcast) values."""
    dt = x.dtype
    gf = g.float()
    s = FORWARD[activation](gf)
    xf = x.float()
    dyf = dy.float()
    y = (xf[:, None] * s[None, :]).to(dt)
    dn = (dyf * s).to(dt)
    grad = (dyf * xf)[:, None].expand(x.numel(), g.numel())
    wide = (x.numel(), g.numel())
    dgate = _backward(activation, grad, gf[None, :].expand(wide), s[None, :].expand(wide)).to(dt)
    return y, dn, dgate


def mutant_silu_lowp(x: torch.Tensor, g: torch.Tensor, dy: torch.Tensor, activation: str = "silu"):
    """Mutant: the activation (and its derivative) rounded to the dtype before the products."""
    dt = x.dtype
    gf = g.float()
    a = FORWARD[activation](gf)
    s = a.to(dt).float()
    ds = _backward(activation, torch.ones_like(gf), gf, a).to(dt).float()
    xf = x.float()
    dyf = dy.float()
    y = (xf[:, None] * s[None, :]).to(dt)
    dn = (dyf * s).to(dt)
    dgate = ((dyf * xf)[:, None] * ds[None, :]).to(dt)
    return y, dn, dgate


MATH = "accurate"          # the math class of every pass here (the docstring says why)
DEFAULT = "silugate-eager"
IMPLS: dict[str, tuple[str, Callable]] = {
    DEFAULT: ("chain", torch_fast),                     # the eager op chain's SiLUGate (ATen kernels)
    "silugate-silu-lowp": ("chain", mutant_silu_lowp),  # a mutant: the activation rounded to the dtype
}
