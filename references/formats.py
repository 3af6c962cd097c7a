"""Floating-point formats and correct rounding of float64 values into them.

Why not `tensor.to(torch.bfloat16)`? From float64, torch converts to bfloat16 *through float32*:
two roundings. 1 + 2**-8 + 2**-30 becomes 1.0 instead of 1 + 2**-7. Every golden value here is
rounded once, by `round_to`, which works on the float64 bits (frexp/ldexp are exact) and rounds
half to even like IEEE 754.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Format:
    name: str            # "bf16", "fp16", "fp32"
    dtype: torch.dtype
    precision: int       # significand bits p, hidden bit included
    emin: int            # exponent of the smallest normal number
    max: float           # largest finite value

    @property
    def u(self) -> float:
        """Unit roundoff 2**-p: the relative error bound of one rounding to nearest."""
        return 2.0 ** -self.precision

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.precision + 1)


def _from_finfo(name: str, dtype: torch.dtype) -> Format:
    fi = torch.finfo(dtype)
    return Format(name, dtype, precision=1 - int(math.log2(fi.eps)),
                  emin=int(math.log2(fi.smallest_normal)), max=float(fi.max))


FORMATS: dict[str, Format] = {
    "fp32": _from_finfo("fp32", torch.float32),
    "fp16": _from_finfo("fp16", torch.float16),
    "bf16": _from_finfo("bf16", torch.bfloat16),
    "fp64": _from_finfo("fp64", torch.float64),
}
_BY_DTYPE = {f.dtype: f for f in FORMATS.values()}
ALIASES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "half": "fp16",
           "float": "fp32", "float64": "fp64"}


def fmt_of(x: str | torch.dtype) -> Format:
    if isinstance(x, torch.dtype):
        return _BY_DTYPE[x]
    return FORMATS[ALIASES.get(x, x)]


def _exponent(a: torch.Tensor, fmt: Format) -> torch.Tensor:
    """floor(log2|a|) clamped to emin (subnormals share the smallest normal's quantum), read from
    the float64 exponent field: for a normal float64 that is frexp's e - 1; zero and float64
    subnormals give -1023, below every format's emin (>= -1022); inf and NaN give -1, as
    frexp's e = 0 does. (In place on one int64 tensor: these run over every element of every
    reference, and each pass and allocation shows in the harness's own time.)"""
    e = (a.view(torch.int64) >> 52).bitwise_and_(0x7FF).sub_(1023)
    return e.masked_fill_(e == 1024, -1).clamp_(min=fmt.emin)


def _ulp_of_abs(a: torch.Tensor, fmt: Format) -> torch.Tensor:
    """ulp() of float64 |v| values `a`."""
    if fmt.emin - fmt.precision + 1 >= -1022:
        return _exponent(a, fmt).add_(1024 - fmt.precision).bitwise_left_shift_(52).view(torch.float64)
    e = _exponent(a, fmt) - fmt.precision + 1
    return torch.ldexp(torch.ones_like(a), e.to(a.dtype))


def ulp(v: torch.Tensor, fmt: Format) -> torch.Tensor:
    """ulp(v) in `fmt`: 2**(max(floor(log2|v|), emin) - p + 1).

    Taken from the exponent of v itself (LLVM's MPFR wrapper does the same), so a value just below
    a power of two gets the finer ulp of its own binade. ulp(0) is the smallest subnormal. The
    power of two is built from its bits (a normal float64 for every format but fp64's subnormal
    quanta, which take ldexp)."""
    return _ulp_of_abs(v.to(torch.float64).abs(), fmt)


def round_to(v: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Round float64 `v` to nearest (ties to even) in `fmt`; returns float64 holding the result.

    v/q and k*q are exact (q is a power of two), torch.round is half-to-even, values that round
    past the largest finite become inf, NaN/inf/signed zero pass through."""
    v = v.to(torch.float64)
    if fmt.precision >= 53:
        return v.clone()
    a = v.abs()
    q = _ulp_of_abs(a, fmt)
    r = (a / q).round_().mul_(q)
    r.masked_fill_(r > fmt.max, math.inf)
    r = torch.where(torch.isfinite(v), r, a)
    return r.copysign_(v)


def to_dtype_exact(v: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Cast float64 values that are already representable in `fmt` (no rounding happens)."""
    return round_to(v, fmt).to(fmt.dtype)


def undecided(value64: torch.Tensor, abs_bound: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Mask of the elements whose rounding to `fmt` float64 cannot decide: the value is known to
    within +-abs_bound and that interval rounds to two values (monotone rounding)."""
    lo = round_to(value64 - abs_bound, fmt)
    hi = round_to(value64 + abs_bound, fmt)
    return (lo != hi) & ~(torch.isnan(lo) & torch.isnan(hi))


_INT_VIEW = {torch.float32: (torch.int32, 8), torch.float16: (torch.int16, 4), torch.bfloat16: (torch.int16, 4),
             torch.float64: (torch.int64, 16)}


def bits_hex(t: torch.Tensor) -> str:
    """The exact bits of one element, as hex of its dtype's integer view: 0x3f80 for bf16 1.0."""
    view, width = _INT_VIEW[t.dtype]
    raw = int(t.detach().reshape(1).cpu().view(view)[0]) & ((1 << (4 * width)) - 1)
    return f"0x{raw:0{width}x}"
