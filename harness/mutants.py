"""Realistic broken implementations — bugs that shipped in real kernels — for `harness selftest`.

Each is a factory like a plug-in's (declaring `chain` unless noted), its docstring naming the bug
and, for the field's, where it was found. The selftest must catch every one, naming the output and
the case, while passing every correct built-in. They are module attributes, so a worker process
loads them as `NAME=harness.mutants:ATTR` like any plug-in."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.impls.fastmath import FastMath, emulation
from harness.impls.torch_ref import GatedRMSNorm
from harness.mutant_base import (ActivationIgnored, DweightSummedBy, DxGetsDz, ExpArgumentInBf16, ExpCubic,
                                 GradRoundedTo, InferencePathSiluInBf16, Mutant, PerTokenWeight, SigmoidGate,
                                 SigmoidGradInBf16, SigmoidGradOfSilu)


class _SiluInBf16(Mutant):
    def act(self, gate):
        return F.silu(gate.to(torch.bfloat16)).float()


class _VarianceLowPrecision(Mutant):
    def rstd(self, u):
        ms = (self._lowp(u) * self._lowp(u)).mean(-1, keepdim=True).float()      # squares and mean in x's dtype
        return torch.rsqrt(ms + self.eps)

    def forward(self, x, gate):
        self._lowp = lambda u: u.to(x.dtype)
        return super().forward(x, gate)


class _EpsOutsideSqrt(Mutant):
    def rstd(self, u):
        return 1 / (u.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)


class _SequentialBf16Sum(torch.autograd.Function):
    """The mean of squares accumulated left to right in bf16 (every partial sum rounded)."""
    @staticmethod
    def forward(ctx, sq):
        acc = torch.zeros(sq.shape[:-1], dtype=torch.bfloat16)
        for j in range(sq.shape[-1]):
            acc = (acc.float() + sq[..., j]).to(torch.bfloat16)
        return (acc.float() / sq.shape[-1]).unsqueeze(-1)

    @staticmethod
    def backward(ctx, grad):
        return None


class _VarianceBf16Accumulator(Mutant):
    def rstd(self, u):
        ms = _SequentialBf16Sum.apply(u.detach().pow(2))
        return torch.rsqrt(ms + self.eps)


class _ZcBackwardMissingPlusOne(Mutant):
    def norm(self, u):
        shape, g = u.shape, self.group_size
        v = u.reshape(*shape[:-1], shape[-1] // g, g)
        xhat = (v * self.rstd(v)).reshape(shape)
        right, wrong = xhat.detach() * self.gamma(), xhat * self.weight.float()
        return right + (wrong - wrong.detach())       # the forward right, the gradient through w alone


class _ZcIgnoredGammaTwice(torch.autograd.Function):
    """n = xhat * w (the + 1 dropped) forward; dxhat = dn * g * g (gamma applied twice) backward."""
    @staticmethod
    def forward(ctx, xhat, w, g):
        ctx.save_for_backward(xhat, g)
        return xhat * w

    @staticmethod
    def backward(ctx, dn):
        xhat, g = ctx.saved_tensors
        return dn * g * g, (dn * xhat).reshape(-1, xhat.shape[-1]).sum(0), None


class _ZcIgnored(Mutant):
    def norm(self, u):
        shape, g = u.shape, self.group_size
        v = u.reshape(*shape[:-1], shape[-1] // g, g)
        xhat = (v * self.rstd(v)).reshape(shape)
        return _ZcIgnoredGammaTwice.apply(xhat, self.weight.float(), self.gamma())


class _OnePlusWInBf16(Mutant):
    def gamma(self):
        w = self.weight
        return (1 + w.to(torch.bfloat16)).float() if self.zero_centered_gamma else w.float()


class _SiluWrongGradForNegative(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.save_for_backward(t)
        return F.silu(t)

    @staticmethod
    def backward(ctx, grad):
        (t,) = ctx.saved_tensors
        s = torch.sigmoid(t)
        return grad * torch.where(t < 0, s, s * (1 + t * (1 - s)))       # drops t s (1 - s) for t < 0


class _DgateWrongForNegativeGates(Mutant):
    def act(self, gate):
        return _SiluWrongGradForNegative.apply(gate.float())


class _FlaDgateInXDtype(Mutant):
    def forward(self, x, gate):
        return super().forward(x, GradRoundedTo.apply(gate, x.dtype))


class _GateCastToXDtype(Mutant):
    def forward(self, x, gate):
        return super().forward(x, gate.to(x.dtype))


class _TreeSumInWeightDtype(PerTokenWeight):
    @staticmethod
    def backward(ctx, grad):
        g = grad.to(ctx.dtype)                            # every partial sum rounds to w's dtype
        while g.shape[0] > 1:
            if g.shape[0] % 2:
                g = torch.cat([g, torch.zeros_like(g[:1])])
            g = g[0::2] + g[1::2]
        return g[0], None


class _BlockPartialsInWeightDtype(PerTokenWeight):
    """dweight as a blockwise reduction: float32 sums over blocks of 64 tokens, each block's partial
    rounded to the weight's dtype, the partials summed in float32."""
    @staticmethod
    def backward(ctx, grad):
        blocks = grad.float().split(64)
        return sum(b.sum(0).to(ctx.dtype).float() for b in blocks).to(ctx.dtype), None


class _DweightBlockPartials(DweightSummedBy):
    reduction = _BlockPartialsInWeightDtype


class _DweightLowPrecisionSum(DweightSummedBy):
    reduction = _TreeSumInWeightDtype


class _GarbagePartials(torch.autograd.Function):
    """dweight plus partial rows nobody wrote (fewer row blocks than SMs): fixed pseudo-garbage."""
    @staticmethod
    def forward(ctx, w, tokens):
        ctx.tokens = tokens
        return w.float()

    @staticmethod
    def backward(ctx, grad):
        if ctx.tokens < 132:
            junk = torch.randn(grad.shape, generator=torch.Generator().manual_seed(781), dtype=grad.dtype)
            grad = grad + 0.5 * junk
        return grad, None


class _DweightGarbageFewRows(Mutant):
    def gamma(self):
        g = _GarbagePartials.apply(self.weight, self._tokens)
        return g + 1 if self.zero_centered_gamma else g

    def forward(self, x, gate):
        self._tokens = x.numel() // x.shape[-1]
        return super().forward(x, gate)


class _ReturnsFp32(Mutant):
    def forward(self, x, gate):
        n = self.norm(x.float()).to(x.dtype)
        return n.float() * self.act(gate)                 # the promoted product, never cast back


class _SigmoidNotSilu(Mutant):
    def act(self, gate):
        return torch.sigmoid(gate.float())


class _GroupsIgnored(Mutant):
    def norm(self, u):
        shape = u.shape
        return (u * self.rstd(u)).reshape(shape) * self.gamma()


class _OrderIgnored(Mutant):
    def forward(self, x, gate):
        n = self.norm(x.float()).to(x.dtype)
        return (n.float() * self.act(gate)).to(x.dtype)


MUTANTS: dict = {}


def _mutant(attr: str, cls, bug: str, rounding="chain", points=frozenset({"mid"}), sigmoid=False):
    """A factory named `attr` (importable as harness.mutants:attr), registered as attr with dashes;
    `sigmoid`: it takes the `activation` argument too (else sigmoid cases skip it)."""
    def make(hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None, norm_before_gate=True):
        return cls(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device,
                   points=points, group_size=group_size, norm_before_gate=norm_before_gate)

    def make_any(hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None, norm_before_gate=True,
                 activation="silu"):
        return cls(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device,
                   points=points, group_size=group_size, norm_before_gate=norm_before_gate, activation=activation)
    make = make_any if sigmoid else make
    make.__name__ = make.__qualname__ = attr
    make.rounding, make.__doc__ = rounding, bug
    MUTANTS[attr.replace("_", "-")] = make
    return make


silu_in_bf16 = _mutant("silu_in_bf16", _SiluInBf16, "SiLU evaluated in bf16")
variance_low_precision = _mutant("variance_low_precision", _VarianceLowPrecision, "x^2 and the mean in x's dtype")
eps_outside_sqrt = _mutant("eps_outside_sqrt", _EpsOutsideSqrt, "x / (sqrt(mean(x^2)) + eps) — "
                           "flash-linear-attention PR #508 (2025-07), which also left the backward on the "
                           "eps-inside formula")
variance_bf16_accumulator = _mutant("variance_bf16_accumulator", _VarianceBf16Accumulator,
                                    "the mean of squares accumulated in bf16 — Liger-Kernel #1309 (casting mode "
                                    "'none': Triton's tl.sum does not widen bf16)")
zc_backward_missing_plus_one = _mutant("zc_backward_missing_plus_one", _ZcBackwardMissingPlusOne,
                                       "zero-centred gamma: the backward uses w, not w + 1")
zc_ignored_gamma_twice = _mutant("zc_ignored_gamma_twice", _ZcIgnored, "zero-centred gamma ignored in the "
                                 "forward, gamma applied twice in dx — Megatron-LM #6859")
one_plus_w_in_bf16 = _mutant("one_plus_w_in_bf16", _OnePlusWInBf16, "zero-centred 1 + w computed in bf16 — "
                             "vLLM #53203")
dgate_wrong_negative_gates = _mutant("dgate_wrong_negative_gates", _DgateWrongForNegativeGates,
                                     "silu' drops t*s*(1-s) for negative gates")
fla_dgate_in_x_dtype = _mutant("fla_dgate_in_x_dtype", _FlaDgateInXDtype, "dgate rounded to x's dtype, then "
                               "cast to the gate's — flash-linear-attention's fused_norm_gate.py allocates dg like x")
gate_cast_to_x_dtype = _mutant("gate_cast_to_x_dtype", _GateCastToXDtype, "the gate cast to x's dtype before SiLU")
dweight_low_precision_sum = _mutant("dweight_low_precision_sum", _DweightLowPrecisionSum,
                                    "dweight summed over tokens in the weight's dtype")
dweight_block_partials = _mutant("dweight_block_partials", _DweightBlockPartials,
                                 "dweight's block partials (64 tokens each) rounded to the weight's dtype: "
                                 "within 1 u gauge (the budget before issue 10), not within half an ULP")
dweight_garbage_few_rows = _mutant("dweight_garbage_few_rows", _DweightGarbageFewRows,
                                   "dweight adds partial rows nobody wrote when there are fewer row blocks than "
                                   "SMs — flash-attention #781")
returns_fp32 = _mutant("returns_fp32", _ReturnsFp32, "the gated path returns the float32 product, not x's "
                       "dtype — vLLM #18500")
sigmoid_not_silu = _mutant("sigmoid_not_silu", _SigmoidNotSilu, "gate activation sigmoid(t) instead of t*sigmoid(t)")
groups_ignored = _mutant("groups_ignored", _GroupsIgnored, "group_size accepted, one group normalised")
order_ignored = _mutant("order_ignored", _OrderIgnored, "norm_before_gate accepted, always norm first")
activation_ignored = _mutant("activation_ignored", ActivationIgnored, "activation accepted, always silu",
                             sigmoid=True)
sigmoid_grad_of_silu = _mutant("sigmoid_grad_of_silu", SigmoidGate.of(SigmoidGradOfSilu), "a sigmoid gate "
                               "whose backward uses silu's derivative s (1 + t (1 - s))", sigmoid=True)
sigmoid_grad_in_bf16 = _mutant("sigmoid_grad_in_bf16", SigmoidGate.of(SigmoidGradInBf16), "a sigmoid gate "
                               "whose derivative s (1 - s) is formed in bf16", sigmoid=True)
fused_declared_chain = _mutant("fused_declared_chain", GatedRMSNorm, "no intermediate rounding, but declares chain",
                               points=frozenset())
chain_declared_fused = _mutant("chain_declared_fused", GatedRMSNorm, "rounds between the ops, but declares fused",
                               rounding="fused")



# ---- The field's gated-norm bugs collected in issue 28, each as its upstream report tells it ------------------


class _VllmNativeFp32(Mutant):
    """vLLM PR #35369 (merged 2026-02): `RMSNormGated.forward_native` computed in float32 (its
    description: the Python-float eps "may promote the computation") and returned that float32 `out`
    without casting back to x's dtype. Both orders and groups, as vLLM's native path takes them.
    Modelled from the PR's description: its diff could not be read here."""

    def forward(self, x, gate):
        a = self.act(gate)
        if not self.norm_before_gate:
            return self.norm(x.float() * a)
        return self.norm(x.float()) * a


class _MambaSimpleOneGroup(Mutant):
    """mamba PR #910: `Mamba2Simple` built its `RMSNormGated` without `group_size`, so the norm took
    one group over all `ngroups` groups. The kernel (mamba_ssm's Triton RMSNormGated) is fused."""

    def __init__(self, hidden_size, **kw):
        super().__init__(hidden_size, **{**kw, "group_size": None})


TENSOR_PARALLEL = 2     # the ranks a Mamba2 layer is sharded over in mamba PRs #908/#951


class _MambaTpGlobalNgroups(Mutant):
    """mamba PRs #908 and #951 (also #916): under tensor parallelism `Mamba2` passed
    `group_size=self.d_ssm // ngroups`, the local (sharded) width over the global group count, so
    each rank's groups are `TENSOR_PARALLEL` times too small. A case's hidden size and group size are
    one rank's; where the wrong size does not divide the hidden size (or is 0), the kernel fails, as
    mamba's `assert N % group_size == 0` does."""

    def __init__(self, hidden_size, *, group_size=None, **kw):
        super().__init__(hidden_size, **kw)
        global_ngroups = hidden_size // (group_size or hidden_size) * TENSOR_PARALLEL
        self.group_size = hidden_size // global_ngroups


class _LigerBlockSumInBf16(PerTokenWeight):
    """Liger-Kernel PR #950 (merged 2025-12): `_block_rms_norm_backward_kernel` summed each block of
    16 rows with `tl.sum` over bf16 terms (`dY * (X * rstd).to(X_dtype)`), so the reduction itself
    ran in bf16 before its float32 accumulator: each term and every partial of the block's tree sum
    is rounded to the weight's dtype (x's, in Liger), the block sums are added in float32, and the
    total is rounded once. (The block kernel runs from 32768 rows; modelled here for every shape.)"""
    @staticmethod
    def backward(ctx, grad):
        rows, hidden = grad.shape
        block = F.pad(grad.to(ctx.dtype), (0, 0, 0, -rows % 16)).reshape(-1, 16, hidden)
        while block.shape[1] > 1:
            block = block[:, 0::2] + block[:, 1::2]
        return block[:, 0].float().sum(0).to(ctx.dtype), None


class _LigerDweightBlockBf16(DweightSummedBy):
    reduction = _LigerBlockSumInBf16


class _FlaDxIsDz(Mutant):
    def forward(self, x, gate):
        return super().forward(*DxGetsDz.apply(x, gate))


class _ZcPlusOneInWeightDtype(Mutant):
    """Megatron-LM PR #5821 (closed, 2026-07): GatedDeltaNet's fused output norm called fla's
    `rms_norm_gated(x, gate, weight + 1.0, ...)` for zero-centred gamma, so 1 + w was rounded to the
    weight's dtype before the kernel (its own test allowed a 3e-3 relative deviation). Modelled from
    the PR's description and its test's fused call: the diff of its source could not be read here."""

    def gamma(self):
        w = self.weight
        return (w + 1.0).float() if self.zero_centered_gamma else w.float()


_FUSED = dict(rounding="fused", points=frozenset())
vllm_native_fp32 = _mutant("vllm_native_fp32", _VllmNativeFp32, "the native path's float32 y returned "
                           "uncast — vLLM PR #35369", **_FUSED)
mamba_simple_one_group = _mutant("mamba_simple_one_group", _MambaSimpleOneGroup, "one group normalised where "
                                 "ngroups were meant — mamba PR #910 (Mamba2Simple)", **_FUSED)
mamba_tp_global_ngroups = _mutant("mamba_tp_global_ngroups", _MambaTpGlobalNgroups, "group size from the "
                                  f"global ngroups under tensor parallelism (tp={TENSOR_PARALLEL}) — mamba PRs "
                                  "#908/#951", **_FUSED)
liger_dweight_block_bf16 = _mutant("liger_dweight_block_bf16", _LigerDweightBlockBf16, "dweight's 16-row "
                                   "blocks summed by tl.sum in bf16 — Liger-Kernel PR #950")
fla_dx_is_dz = _mutant("fla_dx_is_dz", _FlaDxIsDz, "the gated backward wrote dgate's values into dx — "
                       "flash-linear-attention #155", **_FUSED)
zc_plus_one_in_weight_dtype = _mutant("zc_plus_one_in_weight_dtype", _ZcPlusOneInWeightDtype, "zero-centred "
                                      "weight + 1.0 formed in the weight's dtype before fla's fused kernel — "
                                      "Megatron-LM PR #5821", **_FUSED)
inference_path_silu_in_bf16 = _mutant("inference_path_silu_in_bf16", InferencePathSiluInBf16, "SiLU in bf16 "
                                      "only where grad is disabled (torch.no_grad, torch.inference_mode) — issue #28")


def spec(name: str) -> str:
    """The --impl text that loads mutant `name` (in a worker process too)."""
    return f"{name}=harness.mutants:{name.replace('-', '_')}"


# ---- math-class mutants (issue 26): the fast-math emulation of harness/impls/fastmath.py, broken
# beyond the fast class's bounds (harness/mutant_base.py) or declared at a class it does not realise

def _math_mutant(attr: str, math: FastMath, bug: str, declared: str = "fast", ftz: bool = False):
    """A fused fast-math emulation named `attr`, declaring `declared` math (and `ftz`)."""
    make = emulation(math)
    make.__name__ = make.__qualname__ = attr
    make.rounding, make.math, make.ftz, make.__doc__ = "fused", declared, ftz, bug
    MUTANTS[attr.replace("_", "-")] = make
    return make


fast_math_declared_accurate = _math_mutant(
    "fast_math_declared_accurate", FastMath(ftz=False), "fast math (exp as exp2 of the float32-rounded "
    "t log2 e: Triton's tl.exp), but declares accurate", declared="accurate")
ftz_declared_without_ftz = _math_mutant(
    "ftz_declared_without_ftz", FastMath(ftz=True), "flushes float32 subnormals to zero (.ftz, "
    "-use_fast_math), but declares no FTZ")
exp_argument_in_bf16 = _math_mutant(
    "exp_argument_in_bf16", ExpArgumentInBf16(ftz=False), "exp's argument t log2 e rounded to bf16 before "
    "ex2: beyond the fast class")
sigmoid_cubic_exp2 = _math_mutant(
    "sigmoid_cubic_exp2", ExpCubic(ftz=False), "sigmoid from a cubic approximation of exp2 (relative "
    "error ~1e-4): beyond the fast class")
