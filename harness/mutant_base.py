"""What the mutants (harness/mutants.py) break: the correct model written out step by step, and the
autograd pieces that let a mutant break one gradient alone.

`Mutant` is the chain model (or the fused one, for a mutant declaring no `mid` point) with each step
a method; `GradRoundedTo` rounds a gradient on its way to an input; `PerTokenWeight` hands a backward
every token's dweight term, so that `DweightSummedBy` can sum them as a broken kernel did;
`ExpArgumentInBf16` and `ExpCubic` are the fast-math emulation's arithmetic (harness/impls/fastmath.py)
with an exp beyond the fast math class; `ActivationIgnored`, and `SigmoidGate` of `SigmoidGradOfSilu` or
`SigmoidGradInBf16`, break the gate activation axis (issue 28): silu for a sigmoid case, a sigmoid
whose derivative is wrong; `DxGetsDz` is fla #155's backward; `InferencePathSiluInBf16` is right
only while autograd records (issue 28's inference path)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.impls.fastmath import FastMath
from harness.impls.torch_ref import GatedRMSNorm
from harness.references.mathclass import LOG2E_F32


class Mutant(GatedRMSNorm):
    """The chain model written out step by step, each step a method a mutant can break; without
    the `mid` point (a mutant declaring fused), the first op's output is not rounded."""

    def rstd(self, u):
        return torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + self.eps)

    def gamma(self):
        g = self.weight.float()
        return g + 1 if self.zero_centered_gamma else g

    def act(self, gate):
        """The gate activation (the case's: silu or sigmoid) in float32."""
        return self.act_fn(gate.float())

    def norm(self, u):
        shape, g = u.shape, self.group_size
        v = u.reshape(*shape[:-1], shape[-1] // g, g)
        return (v * self.rstd(v)).reshape(shape) * self.gamma()

    def mid(self, t, act):
        return t.to(act).float() if "mid" in self.points else t

    def forward(self, x, gate):
        if not self.norm_before_gate:
            h = self.mid(x.float() * self.act(gate), x.dtype)
            return self.norm(h).to(x.dtype)
        n = self.mid(self.norm(x.float()), x.dtype)
        return (n * self.act(gate)).to(x.dtype)


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


class ExpArgumentInBf16(FastMath):
    """exp's argument t * log2(e) rounded to bf16: relative error |t| 2^-9, beyond |t| u32."""
    def exp(self, t):
        return self.q(torch.exp2((t * LOG2E_F32).to(torch.bfloat16).float()))


class ExpCubic(FastMath):
    """exp2 as 2^floor(a) times a cubic in the fraction (a hand-rolled fast sigmoid's exp): relative
    error up to ~1e-4, where ex2.approx keeps 2 ulp."""
    def exp(self, t):
        a = self.q(t * LOG2E_F32)
        k = torch.floor(a)
        f = a - k
        return self.q(torch.ldexp(1 + f * (0.6951786 + f * (0.2261105 + f * 0.0786993)), k))


class SigmoidGradOfSilu(torch.autograd.Function):
    """sigmoid(t) forward; backward with silu's derivative s (1 + t (1 - s)) instead of s (1 - s)."""
    @staticmethod
    def forward(ctx, t):
        ctx.save_for_backward(t)
        return torch.sigmoid(t)

    @staticmethod
    def backward(ctx, grad):
        (t,) = ctx.saved_tensors
        s = torch.sigmoid(t)
        return grad * s * (1 + t * (1 - s))


class SigmoidGradInBf16(torch.autograd.Function):
    """sigmoid(t) forward; backward with s (1 - s) formed in bf16 (s rounds to 1 from t ~ 5.5 on,
    so the derivative is 0 there, and elsewhere carries bf16's 2^-9)."""
    @staticmethod
    def forward(ctx, t):
        s = torch.sigmoid(t)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        sb = s.to(torch.bfloat16)
        return grad * (sb * (1 - sb)).float()


class ActivationIgnored(Mutant):
    """Takes `activation`, always applies silu."""
    def act(self, gate):
        return F.silu(gate.float())


class SigmoidGate(Mutant):
    """The chain model whose sigmoid gate goes through `grad_fn` (an autograd Function, `of`)."""
    grad_fn: type[torch.autograd.Function]

    @classmethod
    def of(cls, fn) -> type:
        return type(f"SigmoidGate{fn.__name__}", (cls,), {"grad_fn": fn})

    def act(self, gate):
        return self.grad_fn.apply(gate.float()) if self.activation == "sigmoid" else super().act(gate)


class DxGetsDz(torch.autograd.Function):
    """Identity on (x, gate) forward; backward as fla's `LayerNormFn.backward` before the fix of
    issue #155 (commit 8590e36c, 2025-02): `dx = dz.reshape(x_shape)` overwrote dx with the gate's
    gradient, and dz went back flat [tokens, hidden] (autograd then casts dx to x's dtype, and
    rejects the flat dz for inputs of more than two dimensions)."""
    @staticmethod
    def forward(ctx, x, gate):
        ctx.shape = x.shape
        return x.view_as(x), gate.view_as(gate)

    @staticmethod
    def backward(ctx, dx, dz):
        return dz.reshape(ctx.shape), dz.reshape(-1, ctx.shape[-1])


class InferencePathSiluInBf16(Mutant):
    """Issue 28: a kernel whose inference path differs from its training path — right while autograd
    records (`torch.is_grad_enabled()`), SiLU in bf16 under torch.no_grad() and
    torch.inference_mode(), as a serving stack's forward-only branch would be. Every sweep before
    the inference path was checked passed it (the issue counts 23 of 76 y elements differing)."""

    def act(self, gate):
        if torch.is_grad_enabled():
            return super().act(gate)
        return F.silu(gate.to(torch.bfloat16)).float()
