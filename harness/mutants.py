"""Realistic broken implementations (bugs that ship in real kernels), for `harness selftest`.

Each is a factory like a plug-in's; `BUG` says what is wrong. The selftest must catch every one
while passing every correct built-in."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.impls.torch_ref import GatedRMSNorm


class _Mutant(GatedRMSNorm):
    def norm(self, x):
        xf = x.float()
        return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)

    def gamma(self):
        g = self.weight.float()
        return g + 1 if self.zero_centered_gamma else g

    def silu(self, gate):
        return F.silu(gate.float())

    def forward(self, x, gate):
        n = (self.norm(x) * self.gamma()).to(x.dtype)
        return (n.float() * self.silu(gate)).to(x.dtype)


class SiluInBf16(_Mutant):
    def silu(self, gate):
        return F.silu(gate.to(torch.bfloat16)).float()


class VarianceInLowPrecision(_Mutant):
    def norm(self, x):
        ms = (x * x).mean(-1, keepdim=True).float()       # squares and mean in x's dtype
        return x.float() * torch.rsqrt(ms + self.eps)


class EpsOutsideSqrt(_Mutant):
    def norm(self, x):
        xf = x.float()
        return xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)


class ZeroCenteredBackwardMissingPlusOne(_Mutant):
    def forward(self, x, gate):
        xhat = self.norm(x)
        w = self.weight.float()
        g = w + 1 if self.zero_centered_gamma else w
        right, wrong = xhat.detach() * g, xhat * w       # value of the first, gradient of the second
        n = (right + (wrong - wrong.detach())).to(x.dtype)
        return (n.float() * self.silu(gate)).to(x.dtype)


class _SiluWrongGradForNegative(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.save_for_backward(t)
        return F.silu(t)

    @staticmethod
    def backward(ctx, grad):
        (t,) = ctx.saved_tensors
        s = torch.sigmoid(t)
        right = s * (1 + t * (1 - s))
        return grad * torch.where(t < 0, s, right)       # drops t*s*(1-s) for negative gates


class DgateWrongForNegativeGates(_Mutant):
    def silu(self, gate):
        return _SiluWrongGradForNegative.apply(gate.float())


class _TreeSumInWeightDtype(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, rows):
        ctx.dtype, ctx.rows = w.dtype, rows
        return w.float().expand(rows, w.shape[0])

    @staticmethod
    def backward(ctx, grad):
        g = grad.to(ctx.dtype)                            # every partial sum rounds to w's dtype
        while g.shape[0] > 1:
            if g.shape[0] % 2:
                g = torch.cat([g, torch.zeros_like(g[:1])])
            g = g[0::2] + g[1::2]
        return g[0], None


class DweightSummedInLowPrecision(_Mutant):
    def forward(self, x, gate):
        hsz = x.shape[-1]
        xhat = self.norm(x).reshape(-1, hsz)
        g = _TreeSumInWeightDtype.apply(self.weight, xhat.shape[0])
        if self.zero_centered_gamma:
            g = g + 1
        n = (xhat * g).reshape(x.shape).to(x.dtype)
        return (n.float() * self.silu(gate)).to(x.dtype)


class DgateInXDtype(_Mutant):
    def silu(self, gate):
        return F.silu(gate.to(self._xdtype).float())

    def forward(self, x, gate):
        self._xdtype = x.dtype
        return super().forward(x, gate)


class SigmoidGate(_Mutant):
    def silu(self, gate):
        return torch.sigmoid(gate.float())


def _factory(cls, rounding="chain"):
    def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
        return cls(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
    make.rounding = rounding
    make.__doc__ = cls.__name__
    return make


def _fused_declared_chain(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return GatedRMSNorm(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype,
                        device=device, round_n=False)


_fused_declared_chain.rounding = "chain"

MUTANTS = {
    "silu-in-bf16": (_factory(SiluInBf16), "SiLU evaluated in bf16"),
    "variance-low-precision": (_factory(VarianceInLowPrecision), "x^2 and the mean in x's dtype"),
    "eps-outside-sqrt": (_factory(EpsOutsideSqrt), "x / (sqrt(mean(x^2)) + eps)"),
    "zc-backward-missing-plus-one": (_factory(ZeroCenteredBackwardMissingPlusOne),
                                     "zero-centred gamma: the backward uses w instead of w + 1"),
    "dgate-wrong-negative-gates": (_factory(DgateWrongForNegativeGates),
                                   "silu' drops t*s*(1-s) for negative gates only"),
    "dweight-low-precision-sum": (_factory(DweightSummedInLowPrecision),
                                  "dweight summed over tokens in the weight's dtype"),
    "dgate-in-x-dtype": (_factory(DgateInXDtype), "gate cast to x's dtype: dgate carries x's rounding"),
    "sigmoid-not-silu": (_factory(SigmoidGate), "gate activation sigmoid(t) instead of t*sigmoid(t)"),
    "fused-declared-chain": (_fused_declared_chain, "no intermediate rounding, but declares chain"),
}
