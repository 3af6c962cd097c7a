"""Floating-point formats and correct rounding of float64 values into them.

Why not `tensor.to(torch.bfloat16)`? From float64, torch converts to bfloat16 *through float32*:
two roundings. 1 + 2**-8 + 2**-30 becomes 1.0 instead of 1 + 2**-7. Every golden value here is
rounded once, by `round_to`, which takes the quantum from the float64 exponent bits and rounds
half to even like IEEE 754, with one exact float64 addition.
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


# The float64 exponent field where it sits (bits 52-62), as an int64: masked out of a value and
# not shifted down, a power of two is the field plus a constant, built in place. round_to and ulp
# run over every element of every reference: each pass and allocation shows in the harness's time.
_EXP_FIELD = 0x7FF << 52


def _field(e: int) -> int:
    """The float64 exponent field, in place, of the binade 2**e."""
    return (e + 1023) << 52


def _ulp_field(v: torch.Tensor, fmt: Format) -> torch.Tensor:
    """The exponent field of ulp(v), as int64 (a normal float64 for every format but fp64): v's own
    field (sign dropped) clamped to emin's (zero and float64 subnormals share the smallest
    normal's quantum), less p - 1 binades; inf and NaN take frexp's e = 0, as a field of 2**-1."""
    f = v.view(torch.int64).bitwise_and(_EXP_FIELD)
    f.masked_fill_(f == _EXP_FIELD, _field(-1))
    return f.clamp_(min=_field(fmt.emin)).sub_((fmt.precision - 1) << 52)


def ulp(v: torch.Tensor, fmt: Format) -> torch.Tensor:
    """ulp(v) in `fmt`: 2**(max(floor(log2|v|), emin) - p + 1).

    Taken from the exponent of v itself (LLVM's MPFR wrapper does the same), so a value just below
    a power of two gets the finer ulp of its own binade. ulp(0) is the smallest subnormal. The
    power of two is built from its bits (a normal float64 for every format but fp64's subnormal
    quanta, which take ldexp)."""
    v = v.to(torch.float64)
    if fmt.emin - fmt.precision + 1 >= -1022:
        return _ulp_field(v, fmt).view(torch.float64)
    e = (v.view(torch.int64) >> 52).bitwise_and_(0x7FF).sub_(1023)
    e = e.masked_fill_(e == 1024, -1).clamp_(min=fmt.emin) - fmt.precision + 1
    return torch.ldexp(torch.ones_like(v), e.to(v.dtype))


def round_to(v: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Round float64 `v` to nearest (ties to even) in `fmt`; returns float64 holding the result.

    With q = ulp(v) and S = 2**52 q > |v|, |v| + S lies in [S, 2S), where float64's spacing is q:
    that one float64 addition rounds |v| to a multiple of q, half to even (the sum's last bit is
    the multiple's parity), and subtracting S is exact. Binades past the largest finite take the
    S of the first of them, a normal float64: all they round to is past the largest finite, which
    becomes inf. inf stays inf, NaN's bits are passed through, the sign is copied (-0 stays -0)."""
    v = v.to(torch.float64)
    if fmt.precision >= 53:
        return v.clone()
    top = math.frexp(fmt.max)[1]                       # the binade past the largest finite
    s = v.view(torch.int64).bitwise_and(_EXP_FIELD).clamp_(_field(fmt.emin), _field(top)) \
        .add_((53 - fmt.precision) << 52).view(torch.float64)
    r = v.abs().add_(s).sub_(s)
    r.masked_fill_(r > fmt.max, math.inf)
    torch.where(torch.isnan(v), v, r, out=r)
    return r.copysign_(v)


def to_dtype_exact(v: torch.Tensor, fmt: Format) -> torch.Tensor:
    """float64 `v` rounded once, to nearest even, into `fmt`'s dtype: round_to(v, fmt).to(dtype).

    float64 -> float32 is already that one IEEE rounding (subnormals and overflow included;
    tests/test_formats.py checks it on the hard values), so float32 casts directly. bf16 and fp16
    must not: torch converts float64 to them through float32, rounding twice."""
    if fmt.dtype == torch.float32:
        return v.to(torch.float64).to(torch.float32)
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
