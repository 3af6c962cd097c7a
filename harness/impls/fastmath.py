"""CPU emulations of the fast math class, for CI without a GPU: `torch-fastmath` (fused, fast) and
`torch-fastmath-ftz` (fused, fast+ftz).

Each runs the float32 program of mamba_ssm's / fla's Triton gated norm (layernorm_gated.py: both
orders, groups; the backward recomputes sigmoid and xhat from x, the gate and the forward's rstd),
step by step in float32 torch, with the fast instructions emulated as far as a CPU honestly can:

- exp(t) as Triton lowers tl.exp: exp2 of fl32(t * fl32(log2 e)) — the rounded argument, whose error
  grows with |t|, is reproduced bit for bit; ex2.approx's own <= 2 ulp is not (the CPU's exp2 is
  accurate), nor are div.full's and sqrt.approx's 2 ulp (IEEE division and square root here);
- `-ftz`: every float32 operand it loads and every result it computes is flushed to a
  sign-preserving 0 where it is subnormal (the .ftz instructions, `-use_fast_math`), explicitly per
  step — never through the thread's float environment, which would reach the harness's own work.

Zero-centred gamma is formed once in float32 (1 + w), as the fla adapters do. The gate activation is
silu (`z * sigmoid(z)`, derivative s (1 + z (1 - s))) or sigmoid (fla's `activation="sigmoid"`:
`sigmoid(z)`, derivative s (1 - s)), both from the same emulated sigmoid. The steps are methods
(exp, sigmoid, activation, dgate) that harness.mutants breaks."""
from __future__ import annotations

import torch
from torch import nn

from harness.impls.base import Implementation, from_factory
from harness.references.mathclass import LOG2E_F32, MIN_NORMAL32


def flush(v: torch.Tensor) -> torch.Tensor:
    """float32 subnormals to a sign-preserving 0."""
    return torch.where(v.abs() < MIN_NORMAL32, v * 0, v)


class FastMath:
    """The float32 arithmetic of a Triton kernel: its exp and sigmoid, and FTZ where asked."""

    def __init__(self, ftz: bool):
        self.ftz = ftz

    def q(self, v: torch.Tensor) -> torch.Tensor:
        """A float32 result as the hardware keeps it (flushed under FTZ)."""
        return flush(v) if self.ftz else v

    def exp(self, t: torch.Tensor) -> torch.Tensor:
        return self.q(torch.exp2(self.q(t * LOG2E_F32)))           # ex2.approx(fl32(t * log2 e))

    def sigmoid(self, t: torch.Tensor) -> torch.Tensor:
        return self.q(1 / self.q(1 + self.exp(-t)))                 # tl.sigmoid: 1 / (1 + exp(-t))

    def activation(self, z: torch.Tensor, s: torch.Tensor, kind: str) -> torch.Tensor:
        """The gate activation from z and s = sigmoid(z): silu z s, or s itself."""
        return s if kind == "sigmoid" else self.q(z * s)

    def dgate(self, v: torch.Tensor, z: torch.Tensor, s: torch.Tensor, kind: str) -> torch.Tensor:
        """v times the activation's derivative, in the kernels' order: (v s) (1 - s) for sigmoid (fla's
        fused_norm_gate.py), (v s) (1 + z (1 - s)) for silu (mamba_ssm's layernorm_gated.py)."""
        q = self.q
        rest = q(1 - s) if kind == "sigmoid" else q(1 + q(z * q(1 - s)))
        return q(q(v * s) * rest)


def _groups(v: torch.Tensor, group: int) -> torch.Tensor:
    return v.reshape(v.shape[0], v.shape[1] // group, group)


class _GatedNorm(torch.autograd.Function):
    """y of the fused gated norm and its backward, on [M, N] float32-computed rows."""

    @staticmethod
    def forward(ctx, x, z, w, eps, group, norm_before_gate, m: FastMath, kind: str):
        q = m.q
        xf, zf, wf = q(x.float()), q(z.float()), q(w.float())
        act = m.activation(zf, m.sigmoid(zf), kind)
        if not norm_before_gate:
            xf = q(xf * act)
        v = _groups(xf, group)
        var = q(q((v * v).sum(-1, keepdim=True)) / group)
        rstd = q(1 / q(torch.sqrt(q(var + eps))))
        y = q((q(v * rstd)).reshape(xf.shape) * wf)
        if norm_before_gate:
            y = q(y * act)
        ctx.save_for_backward(x, z, w, rstd)
        ctx.eps, ctx.group, ctx.norm_before_gate, ctx.m, ctx.kind = eps, group, norm_before_gate, m, kind
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, z, w, rstd = ctx.saved_tensors
        m, group = ctx.m, ctx.group
        q = m.q
        xf, zf, wf, dyf = q(x.float()), q(z.float()), q(w.float()), q(dy.float())
        s = m.sigmoid(zf)
        act = m.activation(zf, s, ctx.kind)
        x_og = xf
        if not ctx.norm_before_gate:
            xf = q(q(x_og * zf) * s) if ctx.kind == "silu" else q(x_og * s)
        xhat = q(_groups(xf, group) * rstd).reshape(xf.shape)
        dz = None
        if ctx.norm_before_gate:
            y = q(xhat * wf)
            dz = m.dgate(q(dyf * y), zf, s, ctx.kind)
            dyf = q(dyf * act)
        wdy = q(wf * dyf)
        c1 = q(q(_groups(q(xhat * wdy), group).sum(-1, keepdim=True)) / group)
        dx = q((q(_groups(wdy, group) - q(_groups(xhat, group) * c1)) * rstd)).reshape(xf.shape)
        dw = q(q(dyf * xhat).sum(0))
        if not ctx.norm_before_gate:
            dz = m.dgate(q(dx * x_og), zf, s, ctx.kind)
            dx = q(dx * act)
        return dx.to(x.dtype), dz.to(z.dtype), dw.to(w.dtype), None, None, None, None, None


class FastMathGatedRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, *, eps: float, zero_centered_gamma: bool, dtype, device,
                 group_size: int | None = None, norm_before_gate: bool = True, math: FastMath | None = None,
                 activation: str = "silu"):
        super().__init__()
        init = torch.zeros if zero_centered_gamma else torch.ones
        self.weight = nn.Parameter(init(hidden_size, dtype=dtype, device=device))
        self.eps, self.zero_centered_gamma = eps, zero_centered_gamma
        self.group, self.norm_before_gate = group_size or hidden_size, norm_before_gate
        self.math, self.activation = math or FastMath(ftz=False), activation

    def forward(self, x, gate):
        w = self.weight.float() + 1 if self.zero_centered_gamma else self.weight
        shape = x.shape
        y = _GatedNorm.apply(x.reshape(-1, shape[-1]), gate.reshape(-1, shape[-1]), w, self.eps, self.group,
                             self.norm_before_gate, self.math, self.activation)
        return y.reshape(shape)


def emulation(math: FastMath, cls=FastMathGatedRMSNorm):
    """A factory of `cls` computing with `math` (harness.mutants passes broken ones)."""
    def make(hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None, norm_before_gate=True,
             activation="silu"):
        return cls(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device,
                   group_size=group_size, norm_before_gate=norm_before_gate, math=math, activation=activation)
    return make


# The names implementations() lists (resolving a name lists only the module that has it).
NAMES = ("torch-fastmath", "torch-fastmath-ftz")


def implementations() -> list[Implementation]:
    return [
        from_factory("torch-fastmath", emulation(FastMath(ftz=False)), "builtin", rounding="fused", math="fast",
                     notes="CPU emulation of a Triton gated norm's fast math: exp as exp2 of the float32-rounded "
                           "t * log2(e)"),
        from_factory("torch-fastmath-ftz", emulation(FastMath(ftz=True)), "builtin", rounding="fused",
                     math="fast", ftz=True,
                     notes="torch-fastmath with every float32 operand and result flushed to zero where subnormal"),
    ]
