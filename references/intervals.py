"""Interval values for the model references: closed_forms evaluated on sets of values.

An `Interval` holds, per element, float64 tensors
    [lo, hi]    every value a legitimate float32 evaluation of the model can produce here;
    [alo, ahi]  the model's own values without float32 noise: a point, except where a rounding
                point could go either way (the noisy value straddled a rounding boundary);
    g           the gauge (the formula on absolute values), the scale of the float32 noise.
+, - and * are interval arithmetic on both pairs (products take the hull of the four end
products; an exact operand, lo is hi, takes two). Everything here is exact up to float64 rounding
of the bounds, which is far below the float32 noise they carry.
"""
from __future__ import annotations

import torch

from harness.references.exact import group_mean, token_sum


def _mul(alo, ahi, blo, bhi):
    if blo is bhi:                                   # exact factor: two products
        p, q = alo * blo, ahi * blo
        return torch.minimum(p, q), torch.maximum(p, q)
    if alo is ahi:
        p, q = alo * blo, alo * bhi
        return torch.minimum(p, q), torch.maximum(p, q)
    ps = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
    return torch.minimum(torch.minimum(ps[0], ps[1]), torch.minimum(ps[2], ps[3])), \
        torch.maximum(torch.maximum(ps[0], ps[1]), torch.maximum(ps[2], ps[3]))


def _pair(alo, ahi, blo, bhi, f):
    """(f(alo, blo), f(ahi, bhi)), one tensor where both operands are points (keeps `is`)."""
    if alo is ahi and blo is bhi:
        v = f(alo, blo)
        return v, v
    return f(alo, blo), f(ahi, bhi)


class Interval:
    __slots__ = ("alo", "ahi", "lo", "hi", "g")

    def __init__(self, alo, ahi, lo, hi, g):
        self.alo, self.ahi, self.lo, self.hi, self.g = alo, ahi, lo, hi, g

    @staticmethod
    def exact(v, g=None) -> "Interval":
        """A point (all four bounds the same tensor object, so products know it is exact)."""
        if not isinstance(v, torch.Tensor):
            v = torch.tensor(float(v), dtype=torch.float64)
        return Interval(v, v, v, v, v.abs() if g is None else g)

    @staticmethod
    def of(c) -> "Interval":
        return c if isinstance(c, Interval) else Interval.exact(c)

    @property
    def is_exact(self) -> bool:
        return self.lo is self.hi

    def nominal(self) -> "Interval":
        return Interval(self.alo, self.ahi, self.alo, self.ahi, self.g)

    def __add__(self, o):
        o = Interval.of(o)
        if self.is_exact and o.is_exact:
            return Interval.exact(self.lo + o.lo, self.g + o.g)
        return Interval(*_pair(self.alo, self.ahi, o.alo, o.ahi, lambda a, b: a + b),
                        self.lo + o.lo, self.hi + o.hi, self.g + o.g)

    __radd__ = __add__

    def __neg__(self):
        if self.is_exact:
            return Interval.exact(-self.lo, self.g)
        alo = -self.ahi
        return Interval(alo, alo if self.alo is self.ahi else -self.alo, -self.hi, -self.lo, self.g)

    def __sub__(self, o):
        return self + (-Interval.of(o))

    def __rsub__(self, o):
        return Interval.of(o) - self

    def __mul__(self, o):
        o = Interval.of(o)
        if self.is_exact and o.is_exact:
            return Interval.exact(self.lo * o.lo, self.g * o.g)
        alo, ahi = _mul(self.alo, self.ahi, o.alo, o.ahi) if not (self.alo is self.ahi and o.alo is o.ahi) \
            else (self.alo * o.alo,) * 2
        lo, hi = _mul(self.lo, self.hi, o.lo, o.hi)
        return Interval(alo, ahi, lo, hi, self.g * o.g)

    __rmul__ = __mul__

    # ------------------------------------------------------------- monotone maps and reductions

    def increasing(self, f) -> "Interval":
        """f applied to a monotone increasing function's bounds; the gauge becomes |f| at the top."""
        if self.is_exact:
            v = f(self.lo)
            return Interval.exact(v)
        hi = f(self.hi)
        return Interval(f(self.alo), f(self.ahi), f(self.lo), hi, torch.maximum(f(self.lo).abs(), hi.abs()))

    def decreasing_positive(self, f) -> "Interval":
        """f of a decreasing function with positive values (rsqrt)."""
        if self.is_exact:
            return Interval.exact(f(self.lo))
        top = f(self.lo)
        return Interval(f(self.ahi), f(self.alo), f(self.hi), top, top)

    def square(self) -> "Interval":
        """u^2, 0 at the bottom where the interval holds 0."""
        def sq(lo, hi):
            a, b = lo * lo, hi * hi
            bottom = torch.where((lo <= 0) & (hi >= 0), torch.zeros_like(a), torch.minimum(a, b))
            return bottom, torch.maximum(a, b)
        if self.is_exact:
            v = self.lo * self.lo
            return Interval.exact(v)
        alo, ahi = sq(self.alo, self.ahi)
        lo, hi = sq(self.lo, self.hi)
        return Interval(alo, ahi, lo, hi, self.g * self.g)

    def map_bounds(self, f, g=None) -> "Interval":
        """f applied to every bound (a sum or mean: linear and order preserving)."""
        if self.is_exact:
            return Interval.exact(f(self.lo), f(self.g) if g is None else g)
        return Interval(*_pair(self.alo, self.ahi, self.alo, self.ahi, lambda a, _: f(a)), f(self.lo), f(self.hi),
                        f(self.g) if g is None else g)

    def group_mean(self, group: int) -> "Interval":
        return self.map_bounds(lambda v: group_mean(v, group))

    def token_sum(self) -> "Interval":
        return self.map_bounds(token_sum)

    def widen(self, amount, own: bool = False) -> "Interval":
        """[lo - amount, hi + amount] (float32 noise and underflow); [alo, ahi] stays unless `own`
        (a deviation of the model's own value, which the backward then reuses: a rounding point's
        absolute part). The gauge grows to the widened ends where they pass it (a flushed SiLU's
        floor is the value itself)."""
        lo, hi = self.lo - amount, self.hi + amount
        alo, ahi = (self.alo - amount, self.ahi + amount) if own else (self.alo, self.ahi)
        return Interval(alo, ahi, lo, hi, torch.maximum(self.g, torch.maximum(lo.abs(), hi.abs())))

    def with_zero(self, where) -> "Interval":
        """Both pairs stretched to hold 0 where `where`: a value an evaluation may legitimately lose
        whole (a flushed float32 SiLU), which the model's own values — what the backward reuses —
        must then hold too, not only the noisy ones."""
        z = torch.zeros_like(self.lo)

        def stretch(v, f):
            return torch.where(where, f(v, z), v)
        return Interval(stretch(self.alo, torch.minimum), stretch(self.ahi, torch.maximum),
                        stretch(self.lo, torch.minimum), stretch(self.hi, torch.maximum), self.g)

    def rounded(self, rnd) -> "Interval":
        """Every value rounded by the monotone rounding `rnd`: the noisy set becomes the model's
        set of candidates (a point unless it straddled a rounding boundary)."""
        lo, hi = rnd(self.lo), rnd(self.hi)
        return Interval(lo, hi, lo, hi, torch.maximum(lo.abs(), hi.abs()))
