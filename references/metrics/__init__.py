"""Error metrics: how far a computed output lies from a reference interval, per element.

A reference is an interval [lo, hi] per element (a point for the exact value, a set of legitimate
values for a rounding model); the distance is to its nearest point `ref` (0 inside). Special
values, shared by every metric: +0 == -0; NaN where the reference is NaN is 0 — except that a NaN
*reference* never lets a check pass (`compare` fails it); NaN on one side only, or an infinity the
reference does not round to (with the same sign), is an infinite error.

Each metric is a `Metric` value in a module of this folder, registered on import and found by
`registry()`: a new metric is one new file. The harness computes every registered metric for every
check (results.csv columns `column` and `mean_column`), gates one per output and reference
(`gated_metric`, or a budget file's choice), and the reports and replay list them all.
"""
from __future__ import annotations

import importlib
import math
import pkgutil
import threading
from dataclasses import dataclass
from typing import Callable

import torch

from harness.references.formats import Format, round_to
from harness.references.formats import ulp as ulp_of        # the name `ulp` is this package's ULP metric module


@dataclass(frozen=True)
class Distance:
    """What every metric is computed from, per element (float64, the computed output's shape)."""
    computed: torch.Tensor
    ref: torch.Tensor          # the reference interval's nearest point to each computed value
    dist: torch.Tensor         # |computed - ref|
    gauge: torch.Tensor        # the output's formula on absolute values
    fmt: Format                # the output's format
    special: torch.Tensor      # NaN or infinity on either side
    special_ok: torch.Tensor   # ... and the two agree (where none is special: `special` itself, unread)
    rounded: torch.Tensor      # ref rounded to the format (what a correct rounding of it returns)
    ulp: torch.Tensor          # ulp(ref) in the format (references.formats.ulp)
    special_error: torch.Tensor    # every metric's error where `special`: 0 if special_ok, else inf (as above)
    ref_nan: torch.Tensor      # the reference interval is NaN (lo or hi)
    any_special: bool          # special.any(): where none is, every formula needs no special care


@dataclass(frozen=True)
class Metric:
    name: str
    column: str                               # results.csv: the worst element's value
    mean_column: str | None                   # results.csv: the mean over elements (None: not kept)
    final_rounding: float                     # what one correct rounding of the output can cost
    # finite-part formula; specials are handled here. It must give no NaN where both sides are finite
    # (the reference's gauge included): where no element is special, its values are taken as they are
    elementwise: Callable[[Distance], torch.Tensor]
    description: str

    def errors(self, d: Distance) -> torch.Tensor:
        """Per-element error: the formula where both sides are finite, 0 where specials agree,
        inf where they do not (and wherever the formula gives NaN)."""
        e = self.elementwise(d)
        if not d.any_special:       # both sides finite everywhere: the formula is never NaN there
            return e
        e = torch.nan_to_num(e, nan=math.inf, posinf=math.inf, neginf=-math.inf)
        return torch.where(d.special, d.special_error, e)


_REGISTRY: dict[str, Metric] = {}
_DISCOVERED: list[bool] = []
# A sweep's threads (one per worker) may ask for the first time at once: the one that waits must not
# see the folder half imported — results.csv's columns are the metrics', and a row rendered from a
# partial registry lacked one, shifting every later cell of it under the header. A plain lock: a
# metric module that asked for the registry while being imported would hang here, not go on with
# a partial one.
_DISCOVERING = threading.Lock()


def register(metric: Metric) -> Metric:
    _REGISTRY[metric.name] = metric
    return metric


def registry() -> dict[str, Metric]:
    """Every metric of this folder (and any registered since), in registration order: the folder's
    in name order, whichever thread asks first, and every thread sees them all. A metric module must
    not call registry() or get() while it is imported."""
    if not _DISCOVERED:
        with _DISCOVERING:
            if not _DISCOVERED:
                for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
                    importlib.import_module(f"{__name__}.{m.name}")
                _DISCOVERED.append(True)
    return dict(_REGISTRY)


def get(name: str) -> Metric:
    metrics = registry()
    if name not in metrics:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(metrics)}")
    return metrics[name]


def gated_metric(output: str, reference: str) -> str:
    """The metric a check is budgeted in by default. Against a model reference, every output: ULP
    (the interval already holds the float32 noise, relative to the gauge, so what is left is the
    output's own final rounding, half an ULP, and an extra low-precision rounding anywhere fails).
    Against the exact value: ULP for y (a product, no cancellation) and the scaled error for dx,
    dgate and dweight, which can cancel to ~0 where a correct result's ULP error is unbounded."""
    if reference.startswith("model") or output == "y":
        return "ulp"
    return "scaled"


def distance(computed: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, gauge: torch.Tensor,
             fmt: Format) -> Distance:
    """Per element, the computed value against the interval [lo, hi]; `lo is hi` is a point
    reference (the nearest point is lo itself, NaN computed values included)."""
    point = lo is hi
    c = computed.detach().to(torch.float64)
    lo = lo.to(torch.float64)
    hi = lo if point else hi.to(torch.float64)
    c_nan = torch.isnan(c)
    if point:
        ref, r_nan = lo, torch.isnan(lo)
    else:
        ref = torch.where(c_nan, lo, torch.minimum(torch.maximum(c, lo), hi))
        r_nan = torch.isnan(lo).logical_or_(torch.isnan(hi))
    dist = (c - ref).abs_()
    ref_rounded = round_to(ref, fmt)
    special = torch.isinf(c).logical_or_(c_nan).logical_or_(r_nan).logical_or_(torch.isinf(ref_rounded))
    any_special = bool(special.any())
    if any_special:
        # a NaN computed value agrees with a NaN reference only; any other with the rounded reference
        # (never equal where the reference is NaN: then ref_rounded is NaN too)
        special_ok = torch.where(c_nan, r_nan, c == ref_rounded)
        special_error = torch.where(special_ok, 0.0, math.inf).to(torch.float64)
    else:                           # nothing to agree on: no metric reads them
        special_ok = special_error = special
    return Distance(c, ref, dist, gauge.to(torch.float64), fmt, special, special_ok, ref_rounded, ulp_of(ref, fmt),
                    special_error, r_nan, any_special)


@dataclass(frozen=True)
class Reduced:
    """One check's numbers: each metric's max (and mean where kept), the gated metric's worst element."""
    maxima: dict[str, float]
    means: dict[str, float]
    p99_ulp: float
    count_over: int
    worst_index: tuple[int, ...]
    worst_flat: int
    worst_value: float


def reduce(d: Distance, errors: dict[str, torch.Tensor], gated: str, budget: float) -> Reduced:
    """Maxima and means of every metric's errors; the worst element is the one worst in `gated`."""
    m = errors[gated].reshape(-1)
    m = torch.where(torch.isnan(m), torch.full_like(m, math.inf), m)      # NaN is never within budget
    if m.numel() == 0:
        return Reduced({k: 0.0 for k in errors}, {k: 0.0 for k in errors}, 0.0, 0, (), 0, 0.0)
    worst = int(torch.argmax(m))
    shape = d.computed.shape
    idx = unravel(worst, shape)
    u = errors["ulp"].reshape(-1)
    k = max(1, math.ceil(0.01 * u.numel()))          # p99 as the k-th largest (torch.quantile caps at 2**24)
    return Reduced({name: float(e.max()) for name, e in errors.items()},
                   {name: float(e.mean()) for name, e in errors.items()},
                   kth_largest(u, k), int((~(m <= budget)).sum()), idx, worst, float(m[worst]))


def unravel(flat: int, shape) -> tuple[int, ...]:
    """The index in `shape` (row-major) of the flat position `flat`, 0 <= flat < prod(shape); () for a
    0-d shape. torch.unravel_index's result, by Python integer arithmetic."""
    out = []                          # not torch.unravel_index: its tensors cost more than the check's own reduction
    for size in reversed(tuple(shape)):
        flat, i = divmod(flat, size)
        out.append(i)
    return tuple(reversed(out))


def kth_largest(u: torch.Tensor, k: int) -> float:
    """The k-th largest of the 1-D `u` (NaN-free), exactly. Where it pays, only the elements at or
    above a threshold drawn from a strided sample are sorted: if at least k of them are, the k-th
    largest is among them; else the whole tensor is (a full top-k costs ~10 passes over u)."""
    n = u.numel()
    if n >= 1 << 14:
        sample = u[:: n >> 10]                          # ~1024 evenly strided elements
        # the sample's k-th largest, scaled down by 3x (lower in rank): at least k elements of u are
        # at or above it unless u's order statistics are far from the sample's
        j = min(sample.numel(), max(1, (3 * k * sample.numel()) // n + 1))
        threshold = torch.topk(sample, j).values[-1]
        above = u[u >= threshold]
        if above.numel() >= k:
            return float(torch.topk(above, k).values[-1])
    return float(torch.topk(u, k).values[-1])
