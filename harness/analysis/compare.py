"""Compare, the first half of every check (LLVM's compare_* / explain_* split): one output against
one reference interval, every registered metric per element, reduced, and a verdict against the
budget of the gated metric. Returns numbers and, for a failure, a typed Finding;
harness.analysis.explain words it.

The verdict, in order: a NaN reference fails (a NaN never passes a precision check, whatever its
counterpart); a non-finite output where the reference rounds to a finite value fails; the gated
metric's worst element over the budget (or NaN) fails; else pass."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.analysis.result import Finding
from harness.references.formats import Format, round_to
from harness.references.metrics import Distance, Reduced, distance, reduce, registry, unravel


@dataclass(frozen=True)
class Comparison:
    distance: Distance
    errors: dict[str, torch.Tensor]     # metric -> per-element errors
    reduced: Reduced
    metric: str                         # the gated metric
    budget: float
    finding: Finding | None             # why it fails; None: within budget

    @property
    def status(self) -> str:
        return "pass" if self.finding is None else "fail"

    def index(self, flat: int) -> tuple[int, ...]:
        return unravel(flat, self.distance.computed.shape)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers of its width: equal bits, NaN payloads and signed zeros
    included, are equal integers."""
    view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[t.element_size()]
    return t.contiguous().view(view)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(bits(a), bits(b.to(a.device))))


def compare(computed: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, gauge: torch.Tensor, fmt: Format,
            metric: str, budget: float, exact: torch.Tensor | None = None) -> Comparison:
    """`exact`: the exact values, given for a model reference — where that reference is NaN and the
    exact value finite, the model itself overflowed (an intermediate it rounds, such as chain's mid
    or dmid in fp16, went past the format's range, and inf - inf followed): the finding carries the
    exact value, and explain says so. It still fails (a NaN never passes)."""
    computed = computed.to(lo.device)
    d = distance(computed, lo, hi, gauge, fmt)
    errors = {name: m.errors(d) for name, m in registry().items()}
    red = reduce(d, errors, metric, budget)
    nan_ref = d.ref_nan
    finding = None
    if d.any_special and bool(nan_ref.any()):
        k = int(nan_ref.reshape(-1).nonzero()[0])
        v = math.nan if exact is None else float(exact.reshape(-1)[k])
        finding = Finding("nan_reference", unravel(k, computed.shape), other=v)
    else:
        nonfinite = ~torch.isfinite(d.computed) if d.any_special else None
        if nonfinite is not None and bool(nonfinite.any()):   # the roundings only where something is non-finite
            nonfinite &= torch.isfinite(round_to(lo, fmt)) & torch.isfinite(round_to(hi, fmt))
        if nonfinite is not None and bool(nonfinite.any()):
            k = int(nonfinite.reshape(-1).nonzero()[0])
            finding = Finding("non_finite", unravel(k, computed.shape), value=float(d.computed.reshape(-1)[k]))
        elif math.isnan(red.worst_value) or not red.worst_value <= budget:
            finding = Finding("over_budget", red.worst_index, value=red.worst_value, limit=budget, metric=metric)
    return Comparison(d, errors, red, metric, budget, finding)
