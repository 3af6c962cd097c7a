"""Inputs for a case, generated deterministically from its id, directly as values of the target
dtype (drawn in float64, rounded once with references.formats.to_dtype_exact), so the reference
sees exactly the values the implementation sees.

Each distribution is a small function of (generator, shape, format) -> float64 tensor. The values
are keyed by case id (golden stores, baselines): the generator's calls, their order and every
operation on what they draw are fixed (tests/test_generate.py pins a hash of generated inputs). The
arithmetic runs in place on the drawn tensor (an input of millions of elements is generated in
the implementation's process and again in the judge's); in place or not, each step is the same
IEEE operation on the same operands. For the same reason a big draw may be rounded to its dtype on
a GPU (`generate`'s `device`): the draw itself is the CPU generator's, and the rounding is exact
IEEE arithmetic and bit operations, the same bits on any device (NaN aside, which no distribution
draws; tests/test_generate.py checks it on CUDA)."""
from __future__ import annotations

import torch

from harness.cases.case import Case
from harness.references.exact import Inputs
from harness.references.formats import Format, fmt_of, to_dtype_exact

# x: magnitudes chosen per dtype where the point is a dtype limit.
LARGE_X = (128.0, 256.0)          # x^2 near fp16's overflow (65504): breaks variance in fp16
TINY_X = 1e-4                      # x^2 ~ 1e-8, far below eps: the norm is eps-dominated
SATURATING_GATE = (-87.0, -20.0)   # silu ~ -1e-8 .. -1e-36: tiny but float32-normal
UNDERFLOW_GATE = (-120.0, -87.5)   # float32 exp(-g) overflows / silu becomes subnormal or -0
LARGE_POSITIVE_GATE = (8.0, 60.0)  # silu(t) == t to working precision

# From this many elements a 16-bit input is rounded on the case's GPU, where there is one: on one
# CPU core the rounding is ~45 % of a bf16 input's generation (~25 ns an element, the float64 draw
# ~30), on the GPU a copy there and back (fp32 is a plain cast: kept on the CPU).
ROUND_ON_DEVICE_FROM = 1 << 18


def _normal(gen, shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def _uniform(gen, shape, lo, hi):
    return torch.rand(shape, generator=gen, dtype=torch.float64).mul_(hi - lo).add_(lo)


def _negative_below_half(gen, shape) -> torch.Tensor:
    """Which elements take a minus sign: a uniform draw below 0.5."""
    return torch.rand(shape, generator=gen, dtype=torch.float64) < 0.5


def x_values(dist: str, gen, shape, fmt: Format) -> torch.Tensor:
    if dist == "standard":
        return _normal(gen, shape)
    if dist == "large":                          # the signs are drawn first
        negative = _negative_below_half(gen, shape)
        v = _uniform(gen, shape, *LARGE_X)
        return torch.where(negative, v.neg(), v, out=v)
    if dist == "tiny":
        return _normal(gen, shape).mul_(TINY_X)
    if dist == "subnormal":
        # strictly below the smallest normal, also after rounding to the dtype
        return _uniform(gen, shape, -1.0, 1.0).mul_(2.0 ** fmt.emin - fmt.min_subnormal)
    if dist == "zero_row":                       # the first row (the whole tensor when 1-D) is 0
        v = _normal(gen, shape)
        v.reshape(-1, shape[-1])[0] = 0.0
        return v
    if dist == "outlier":                        # one channel 100x the rest (still finite in fp16)
        v = _normal(gen, shape)
        ch = int(torch.randint(shape[-1], (1,), generator=gen))
        v[..., ch] = 100.0 * torch.sign(v[..., ch] + 0.5) * (1 + v[..., ch].abs())
        return v
    raise ValueError(f"unknown x distribution {dist!r}")


def gate_values(dist: str, gen, shape) -> torch.Tensor:
    if dist == "normal":
        return _normal(gen, shape).mul_(3.0)
    if dist == "negative":
        return _normal(gen, shape).abs_().mul_(-3.0)
    if dist == "saturating":
        return _uniform(gen, shape, *SATURATING_GATE)
    if dist == "underflow":
        return _uniform(gen, shape, *UNDERFLOW_GATE)
    if dist == "large_positive":
        return _uniform(gen, shape, *LARGE_POSITIVE_GATE)
    if dist == "tiny":
        return _normal(gen, shape).mul_(1e-3)
    raise ValueError(f"unknown gate distribution {dist!r}")


def gamma_values(dist: str, gen, hidden: int, zero_centered: bool) -> torch.Tensor:
    """Stored weight values: 'one' ~1, 'zero' ~0 (the usual zero-centred init, or a near-zero
    gamma without it), 'outlier' the usual init plus a few channels at ~30."""
    base = 0.0 if zero_centered else 1.0
    noise = 0.1 * torch.randn(hidden, generator=gen, dtype=torch.float64)
    if dist == "one":
        return 1.0 + noise
    if dist == "zero":
        return noise
    if dist == "outlier":
        v = base + noise
        idx = torch.randint(hidden, (max(1, hidden // 32),), generator=gen)
        v[idx] = 30.0 * (1 + noise[idx].abs())
        return v
    raise ValueError(f"unknown gamma distribution {dist!r}")


def dy_values(dist: str, gen, shape) -> torch.Tensor:
    """The upstream gradient: random normal (dweight's token sums cancel: its gauge ~sqrt(T) times
    its value), all ones (loss = y.sum(), what training sees), or of one sign with random size."""
    if dist == "normal":
        return _normal(gen, shape)
    if dist == "ones":
        return torch.ones(shape, dtype=torch.float64)
    if dist == "positive":
        return _normal(gen, shape).abs_()
    raise ValueError(f"unknown dy distribution {dist!r}")


def act_format(case: Case, act_follows: str = "x") -> Format:
    return fmt_of(case.weight_dtype if act_follows == "weight" else case.dtype)


def rounded(v: torch.Tensor, fmt: Format, device: str = "cpu") -> torch.Tensor:
    """to_dtype_exact(v, fmt) on the CPU, computed on `device` where that pays — a big 16-bit input,
    a CUDA device whose process has CUDA up already (a judge's first GPU case draws while its
    context starts) and memory for it —: the same bits either way (a NaN's would be each device's
    conversion's; no distribution draws one)."""
    if not (device.startswith("cuda") and fmt.dtype != torch.float32 and v.numel() >= ROUND_ON_DEVICE_FROM
            and torch.cuda.is_initialized()):
        return to_dtype_exact(v, fmt)
    try:
        return to_dtype_exact(v.to(device), fmt).cpu()
    except torch.cuda.OutOfMemoryError:
        return to_dtype_exact(v, fmt)


def generate(case: Case, act_follows: str = "x", device: str = "cpu") -> Inputs:
    """The case's inputs on the CPU. dy is in the activation dtype (it is y's gradient). `device`:
    the pair's, where a big draw may be rounded (`rounded`); the values do not depend on it."""
    gen = torch.Generator().manual_seed(int(case.case_id, 16) % (2 ** 63))
    shape = tuple(case.shape)
    fx, fg, fw = fmt_of(case.dtype), fmt_of(case.gate_dtype), fmt_of(case.weight_dtype)
    x = rounded(x_values(case.x_dist, gen, shape, fx), fx, device)
    gate = rounded(gate_values(case.gate_dist, gen, shape), fg, device)
    w = to_dtype_exact(gamma_values(case.gamma_dist, gen, case.hidden, case.zero_centered_gamma), fw)
    fa = act_format(case, act_follows)
    dy = rounded(dy_values(case.dy_dist, gen, shape), fa, device)
    return Inputs(x, gate, w, dy, case.eps, case.zero_centered_gamma, case.group_size, case.norm_before_gate,
                  case.activation)
