"""Math classes: how an implementation computes in float32 between its rounding points (SPEC §1).

The rounding model says *where* an implementation rounds to the activation dtype; its math class
says *how* it computes in float32 in between:

    accurate   elementary functions within a few ulp (libm, libdevice, PyTorch's eager kernels):
               the float32 noise of references.models.noise, constant relative to each step's gauge;
    fast       the approximate instructions Triton and CUDA fast-math emit: exp(t) as ex2.approx of
               the float32-rounded t * log2(e), division as div.full / div.approx, sqrt.approx,
               rsqrt.approx — each bounded below by its documented error (docs/budgets.md cites
               each source);
    +ftz       a separate property of either: float32 subnormal operands and results may be 0.

Every bound here is relative, in units of u32 = 2^-24; references.models.noise turns them into
noise at the named steps of references.closed_forms, the one mechanism behind the model interval
and the exact-reference budgets. `accurate` adds nothing to what the harness always modelled, so
every verdict of an accurate implementation stays what it was.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from harness.references.errors import UsageError

U32 = 2.0 ** -24
MIN_NORMAL32 = 2.0 ** -126          # below: a float32 subnormal, which FTZ may turn into 0
KINDS = ("accurate", "fast")

# ---- the documented error of each approximate instruction (u32 units, relative) ----------------
# exp(t) = ex2.approx(fl32(t * fl32(log2 e))) (Triton's math::ExpOp lowering; CUDA's __expf).
# The argument's two roundings move it by |t log2 e| (u32 + the constant's own relative error),
# which 2^a turns into a relative error of |t| times that (ln 2 log2 e = 1), to first order:
LOG2E_F32 = float(np.float32(math.log2(math.e)))
EXP_ARGUMENT_FIRST_ORDER = 1 + abs(LOG2E_F32 - math.log2(math.e)) / math.log2(math.e) / U32   # 1.2241...
# ... and a bound on it with the second-order terms, for |t| <= 150 (beyond, exp over/underflows
# float32 anyway): e^z - 1 <= z (1 + z) with z <= 150 * 1.23 u32 ~ 1.1e-5.
EXP_ARGUMENT = 1.25
# ex2.approx.f32: "maximum ulp error is 2 ulp from correctly rounded result" (PTX ISA 9.1
# §9.7.3.21); with the correct rounding's half ulp 2.5 ulp of the result, and one ulp is at most
# 2 u32 of a value's magnitude.
EX2_APPROX = 5.0
# div.full.f32: "maximum ulp error is 2 across the full range"; div.approx.f32 (CUDA's __fdividef):
# 2 ulp for |b| in [2^-126, 2^126], a sign-preserving 0 above (PTX ISA 9.1 §9.7.3.8).
DIV_APPROX = 4.0
# sqrt.approx.f32: relative error 2^-23 (PTX ISA 9.1 §9.7.3.15); rsqrt.approx.f32: 2^-22.9 (§9.7.3.16).
SQRT_APPROX = 2.0
RSQRT_APPROX = 2.0 ** 1.1

# ---- what they add at the steps of the closed forms ---------------------------------------------
# rstd = 1 / sqrt(mean(u^2) + eps) (mamba_ssm, fla: `1 / tl.sqrt(var + eps)`): the mean's division
# by G (halved by the square root), sqrt.approx, the reciprocal's division; rsqrt.approx instead of
# the last two is less.
FAST_RSTD = DIV_APPROX / 2 + SQRT_APPROX + DIV_APPROX
# the norm backward's projection mean(duhat uhat): one more division by G.
FAST_NORM_BACKWARD = DIV_APPROX
assert RSQRT_APPROX <= SQRT_APPROX + DIV_APPROX
# Below t = -126 ln 2 a fast (or flushing) SiLU may be 0: div.approx returns 0 once 1 + exp(-t)
# passes 2^126, and under FTZ sigmoid(t) itself is a subnormal there.
FAST_SILU_FLUSH = -126 * math.log(2)


@dataclass(frozen=True)
class MathClass:
    kind: str = "accurate"           # "accurate" | "fast"
    ftz: bool = False                # float32 subnormal operands and results may be 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"math class {self.kind!r}: one of {', '.join(KINDS)}")

    @property
    def fast(self) -> bool:
        return self.kind == "fast"

    @property
    def label(self) -> str:
        """The text results.csv's `math` column and the --impl suffix use: accurate, fast+ftz, ..."""
        return self.kind + ("+ftz" if self.ftz else "")


ACCURATE = MathClass()
FAST = MathClass("fast")
# Least permissive first: identify names the first that fits. FTZ alone loosens only values below
# 2^-126, fast loosens every exp, so accurate+ftz comes before fast.
CLASSES = (ACCURATE, MathClass("accurate", True), FAST, MathClass("fast", True))


def parse_math(text: str) -> MathClass:
    """`accurate`, `fast`, `accurate+ftz` or `fast+ftz` (also `ftz`: accurate+ftz)."""
    parts = [p.strip() for p in str(text).split("+")]
    ftz = "ftz" in parts
    kinds = [p for p in parts if p != "ftz"] or ["accurate"]
    if len(kinds) != 1 or kinds[0] not in KINDS or parts.count("ftz") > 1:
        raise UsageError(f"math class {text!r}: one of {', '.join(c.label for c in CLASSES)}")
    return MathClass(kinds[0], ftz)


def declared_math(math_attr=None, ftz_attr=None) -> MathClass:
    """A MathClass from a factory's `math` ("accurate" | "fast", or a label such as "fast+ftz", or a
    MathClass) and `ftz` (bool) attributes; absent: accurate, no FTZ."""
    if isinstance(math_attr, MathClass):
        mc = math_attr
    elif math_attr is None:
        mc = ACCURATE
    else:
        try:
            mc = parse_math(math_attr)
        except UsageError:
            raise UsageError(f"math is {math_attr!r}; expected {' or '.join(repr(k) for k in KINDS)}") from None
    if ftz_attr is None:
        return mc
    if not isinstance(ftz_attr, bool):
        raise UsageError(f"ftz is {ftz_attr!r}; expected True or False")
    return MathClass(mc.kind, mc.ftz or ftz_attr)


def exp_error(t, mc: MathClass):
    """Relative error (u32 units) a class's exp(t) may add beyond an accurate one: 0, or for `fast`
    the argument's rounding (EXP_ARGUMENT |t|) and ex2.approx's own error."""
    if not mc.fast:
        return t.abs() * 0
    return EXP_ARGUMENT * t.abs() + EX2_APPROX


def sigmoid_error(t, mc: MathClass):
    """Relative error (u32 units) a class's sigmoid(t) = 1 / (1 + exp(-t)) may add beyond an accurate
    one. exp's relative error e reaches sigmoid as e (1 - s) (its condition number; the same for the
    form exp(t) / (1 + exp(t))), and the division adds div.full's 2 ulp. It is the one primitive of
    every gate activation built on sigmoid: silu(t) = t s carries it as it is."""
    if not mc.fast:
        return t.abs() * 0
    return exp_error(t, mc) * torch.sigmoid(-t) + DIV_APPROX
