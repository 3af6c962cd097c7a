"""Compare, the first half of every check (LLVM's compare_* / explain_* split): one output against
one reference interval, every registered metric per element, reduced, and a verdict against the
budget of the gated metric. Returns numbers; harness.analysis.explain turns a failure into words.

The verdict, in order: a NaN reference fails (a NaN never passes a precision check, whatever its
counterpart); a non-finite output where the reference rounds to a finite value fails; the gated
metric's worst element over the budget (or NaN) fails; else pass."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.references.formats import Format, round_to
from harness.references.metrics import Distance, Reduced, distance, reduce, registry


@dataclass(frozen=True)
class Comparison:
    distance: Distance
    errors: dict[str, torch.Tensor]     # metric -> per-element errors
    reduced: Reduced
    metric: str                         # the gated metric
    budget: float
    status: str                         # "pass" or "fail"
    reason: str

    def index(self, flat: int) -> tuple[int, ...]:
        return unravel(flat, self.distance.computed.shape)


def unravel(flat: int, shape) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape))) if len(shape) else ()


def compare(computed: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, gauge: torch.Tensor, fmt: Format,
            metric: str, budget: float, output: str = "", reference: str = "",
            exact: torch.Tensor | None = None) -> Comparison:
    """`exact`: the exact values, given for a model reference — where that reference is NaN and the
    exact value finite, the model itself overflowed (an intermediate it rounds, such as chain's mid
    or dmid in fp16, went past the format's range, and inf - inf followed), and the reason says so;
    it still fails (a NaN never passes)."""
    computed = computed.to(lo.device)
    d = distance(computed, lo, hi, gauge, fmt)
    errors = {name: m.errors(d) for name, m in registry().items()}
    red = reduce(d, errors, metric, budget)
    where = f" at [{','.join(map(str, red.worst_index))}] vs {reference}" if reference else ""
    nan_ref = torch.isnan(lo) | torch.isnan(hi)
    status, reason = "pass", ""
    if bool(nan_ref.any()):
        k = int(nan_ref.reshape(-1).nonzero()[0])
        idx = ",".join(map(str, unravel(k, computed.shape)))
        v = math.nan if exact is None else float(exact.reshape(-1)[k])
        why = "" if math.isnan(v) else (f"{reference} overflows there (an intermediate it rounds went past its "
                                        f"format's range; the exact value is {v:.4g}), and ")
        status, reason = "fail", f"{output} reference is NaN at [{idx}]: {why}a NaN never passes"
    else:
        nonfinite = ~torch.isfinite(d.computed)
        if bool(nonfinite.any()):                   # the roundings only where something is non-finite
            nonfinite &= torch.isfinite(round_to(lo, fmt)) & torch.isfinite(round_to(hi, fmt))
        if bool(nonfinite.any()):
            k = int(nonfinite.reshape(-1).nonzero()[0])
            status = "fail"
            reason = f"{output} non-finite ({float(d.computed.reshape(-1)[k])}) where the reference is finite"
        elif math.isnan(red.worst_value) or not red.worst_value <= budget:
            status = "fail"
            reason = f"{output} {metric} error {red.worst_value:.4g} > budget {budget:.4g}{where}"
    return Comparison(d, errors, red, metric, budget, status, reason)
