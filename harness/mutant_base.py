"""What the mutants (harness/mutants.py) break: the correct model written out step by step, and the
autograd pieces that let a mutant break one gradient alone.

`Mutant` is the chain model (or the fused one, for a mutant declaring no `mid` point) with each step
a method; `GradRoundedTo` rounds a gradient on its way to an input; `PerTokenWeight` hands a backward
every token's dweight term, so that `DweightSummedBy` can sum them as a broken kernel did."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.impls.torch_ref import GatedRMSNorm


class Mutant(GatedRMSNorm):
    """The chain model written out step by step, each step a method a mutant can break; without
    the `mid` point (a mutant declaring fused), the first op's output is not rounded."""

    def rstd(self, u):
        return torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + self.eps)

    def gamma(self):
        g = self.weight.float()
        return g + 1 if self.zero_centered_gamma else g

    def silu(self, gate):
        return F.silu(gate.float())

    def norm(self, u):
        shape, g = u.shape, self.group_size
        v = u.reshape(*shape[:-1], shape[-1] // g, g)
        return (v * self.rstd(v)).reshape(shape) * self.gamma()

    def mid(self, t, act):
        return t.to(act).float() if "mid" in self.points else t

    def forward(self, x, gate):
        if not self.norm_before_gate:
            h = self.mid(x.float() * self.silu(gate), x.dtype)
            return self.norm(h).to(x.dtype)
        n = self.mid(self.norm(x.float()), x.dtype)
        return (n * self.silu(gate)).to(x.dtype)


class GradRoundedTo(torch.autograd.Function):
    """Identity forward; the gradient rounded to `dtype` before it reaches the input."""
    @staticmethod
    def forward(ctx, t, dtype):
        ctx.dtype = dtype
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.dtype).to(grad.dtype), None


class PerTokenWeight(torch.autograd.Function):
    """The weight (as float32) expanded to one row per token: the backward receives every token's
    dweight term, grad [tokens, hidden], and a subclass's backward decides how they are summed."""
    @staticmethod
    def forward(ctx, w, rows):
        ctx.dtype = w.dtype
        return w.float().expand(rows, w.shape[0])


class DweightSummedBy(Mutant):
    """The chain model whose dweight token sum is the `reduction` (a PerTokenWeight) backward's."""
    reduction: type[PerTokenWeight]

    def gamma(self):
        g = self.reduction.apply(self.weight, self._rows)
        return g + 1 if self.zero_centered_gamma else g

    def norm(self, u):
        self._rows = u.numel() // u.shape[-1]
        shape = u.shape
        return super().norm(u.reshape(self._rows, shape[-1])).reshape(shape)
