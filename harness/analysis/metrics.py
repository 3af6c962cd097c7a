"""Per-element error metrics against a reference interval, and their reduction to one record.

ULP error (glibc / Zimmermann): |computed - reference| / ulp(reference) in the output's format,
where ulp is references.formats.ulp (the smallest subnormal in the subnormal range). A reference is
an interval [lo, hi]; the distance is to its nearest point (0 inside), which is what a declared
model with float32 noise allows. Special values: +0 == -0; NaN vs NaN = 0; NaN on one side only,
or an infinity the reference does not round to (with the same sign), is an infinite error.

Scaled error: |computed - reference| / (u * gauge + min_subnormal/2), u = 2**-p of the output
format (min_subnormal/2 is the underflow term of one rounding), gauge = the
output's formula on absolute values (references.exact). It stays meaningful where the value cancels
to ~0 (dx, dweight, dgate near silu's stationary point), where the ULP error is unbounded even
for a correct implementation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.references.formats import Format, round_to, ulp


@dataclass
class ElementErrors:
    ulp: torch.Tensor        # float64, inf where special values mismatch
    scaled: torch.Tensor
    abs: torch.Tensor
    rel: torch.Tensor
    ref: torch.Tensor        # nearest reference point to each computed value


def element_errors(computed: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
                   gauge: torch.Tensor, fmt: Format) -> ElementErrors:
    c = computed.detach().to(torch.float64)
    lo, hi = lo.to(torch.float64), hi.to(torch.float64)
    ref = torch.minimum(torch.maximum(c, lo), hi)
    ref = torch.where(torch.isnan(c), lo, ref)
    dist = (c - ref).abs()
    ref_rounded = round_to(ref, fmt)

    c_nan, r_nan = torch.isnan(c), torch.isnan(lo) | torch.isnan(hi)
    special = c_nan | r_nan | torch.isinf(c) | torch.isinf(ref_rounded)
    special_ok = (c_nan & r_nan) | (~c_nan & ~r_nan & (c == ref_rounded))
    inf = torch.full_like(dist, math.inf)
    zero = torch.zeros_like(dist)

    def finish(err):
        return torch.where(special, torch.where(special_ok, zero, inf), err)

    ulp_err = finish(dist / ulp(ref, fmt))
    g = gauge.to(torch.float64)
    # Rounding to fmt errs by at most u*|v| + min_subnormal/2 (the underflow term of the standard
    # model): with that floor a single correct rounding scores <= 1 even in the subnormal range.
    scaled = torch.where(dist == 0, zero, dist / (fmt.u * g + fmt.min_subnormal / 2))
    scaled = finish(torch.where(torch.isnan(scaled), inf, scaled))
    rel = torch.where(dist == 0, zero, dist / ref.abs())
    return ElementErrors(ulp_err, scaled, finish(dist), finish(rel), ref)


@dataclass
class Reduced:
    max_ulp: float
    mean_ulp: float
    p99_ulp: float
    max_abs_err: float
    max_rel_err: float
    max_scaled_err: float
    mean_scaled_err: float
    count_over: int
    worst_index: tuple[int, ...]
    worst_flat: int
    worst_metric: float


def reduce(err: ElementErrors, budget_metric: str, budget: float) -> Reduced:
    """Reduce element errors; the worst element is the one worst in the budget's metric."""
    m = (err.ulp if budget_metric == "ulp" else err.scaled).reshape(-1)
    if m.numel() == 0:
        return Reduced(0, 0, 0, 0, 0, 0, 0, 0, (), 0, 0.0)
    key = torch.where(torch.isnan(m), torch.full_like(m, math.inf), m)
    worst = int(torch.argmax(key))
    shape = err.ulp.shape
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), shape)) if len(shape) else ()
    u = err.ulp.reshape(-1)
    # p99 as the k-th largest (topk): torch.quantile sorts everything and caps at 2**24 elements
    k = max(1, math.ceil(0.01 * u.numel()))
    p99 = float(torch.topk(torch.nan_to_num(u, nan=math.inf), k).values[-1])
    return Reduced(
        max_ulp=float(u.max()), mean_ulp=float(u.mean()),
        p99_ulp=p99,
        max_abs_err=float(err.abs.max()), max_rel_err=float(err.rel.max()),
        max_scaled_err=float(err.scaled.max()), mean_scaled_err=float(err.scaled.mean()),
        count_over=int((~(m <= budget)).sum()), worst_index=idx, worst_flat=worst,
        worst_metric=float(key[worst]))
