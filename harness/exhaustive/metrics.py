"""Error metrics of one output against its exact values: budgets, histogram edges, and the
per-element definition every tile pass implements (`element_errors`).

The element errors are the harness's registered metrics (harness.references.metrics: ulp, scaled,
abs, rel — `Metric.errors` over `distance` to a point reference lo = hi = v, as
harness.analysis.compare computes them for the sweep): distance |c - v|; where c is NaN or
infinite, or v rounds to an infinity, the error is 0 if c equals the rounded value and inf
otherwise. Certification candidates are the elements whose float64 value lies within twice its
error bound of a rounding boundary (a superset of references.formats.undecided).

Budgets: the sweep's budget against the exact value (harness.budgets.exact_budget), for SiLUGate
alone: no rounding point of any model lies between its inputs (x plays the rounded n) and its
outputs, so what is left is the metric's final rounding plus the float32 noise of the gate op's
steps at the passes' math class (impls.MATH, accurate; references.models.noise.node_noise:
`gate.out` for y, `gate.dinput` for dn, `gate.dgate`; the same for both activations);
report-only (inf) in the extreme regime, and for dgate in the saturated one (a sigmoid gate's
large gates, enumerate.saturation). Metrics (references.metrics.gated_metric): y and dn are
products (no cancellation): ULP; dgate can cancel (silu' has a root at t ~ -1.2785): the scaled
error."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.budgets import exact_budget
from harness.exhaustive.impls import MATH
from harness.references.exact import Inputs, float64_error_bound
from harness.references.formats import Format
from harness.references.mathclass import parse_math
from harness.references.metrics import distance, gated_metric, get
from harness.references.models.noise import node_noise

METRIC = {"y": gated_metric("y", "exact"), "dn": gated_metric("y", "exact"), "dgate": gated_metric("dgate", "exact")}
NODE = {"y": "gate.out", "dn": "gate.dinput", "dgate": "gate.dgate"}     # closed_forms' step of each output
KEPT_METRICS = ("ulp", "scaled", "abs", "rel")            # the metrics a tile pass computes
_BOUNDS = float64_error_bound(Inputs(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.zeros(1, 1),
                                     0.0, False))
# y = u silu(t); dn is the gate op's input gradient (the norm's dmid); dgate = d u silu'(t)
F64_BOUND = {"y": _BOUNDS["y"], "dn": _BOUNDS["dmid"], "dgate": _BOUNDS["dgate"]}
EDGES = (0.0, 0.5, 0.5000001, 0.51, 0.6, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 1024.0, math.inf)
INNER_EDGES = EDGES[1:-1]
N_BINS = len(EDGES) - 1
TOPK = 8


def budget_for(output: str, regime: str, fmt: Format) -> float:
    reported = regime == "extreme" or (regime == "saturated" and output == "dgate")
    return exact_budget(METRIC[output], 0.0, node_noise(1, 1, parse_math(MATH))[NODE[output]], fmt,
                        "extreme" if reported else "normal")


def worst_metrics(output: str) -> tuple[str, ...]:
    """Metrics whose worst pairs are kept: ULP always, and the gated metric."""
    return ("ulp",) if METRIC[output] == "ulp" else ("ulp", METRIC[output])


@dataclass(frozen=True)
class Consts:
    """A tile pass's scalars for one (output, regime, format)."""
    u: float
    min_sub_half: float
    fmax: float
    bound2: float                 # twice the float64 error bound, relative to the gauge
    budget: float
    scaled_key: bool              # the gated metric is the scaled error (else ULP)

    def vector(self) -> list[float]:
        return [self.u, self.min_sub_half, self.fmax, self.bound2, self.budget, float(self.scaled_key)]


def consts(output: str, regime: str, fmt: Format) -> Consts:
    return Consts(fmt.u, fmt.min_subnormal / 2, fmt.max, 2 * F64_BOUND[output], budget_for(output, regime, fmt),
                  METRIC[output] == "scaled")


@dataclass(frozen=True)
class Elements:
    """Per-element results (float64 / bool tensors of the elements' shape)."""
    err: torch.Tensor             # ulp
    scaled: torch.Tensor
    abs: torch.Tensor
    rel: torch.Tensor
    golden: torch.Tensor          # v rounded to the format by float64 (certification may overrule)
    mism: torch.Tensor            # c != golden
    nonfin: torch.Tensor          # c not finite where golden is
    cand: torch.Tensor            # float64 may not decide golden: certification candidates
    over: torch.Tensor            # gated metric over the budget


def element_errors(c_low: torch.Tensor, v: torch.Tensor, gauge: torch.Tensor, fmt: Format, k: Consts) -> Elements:
    """The per-element definition (module docstring): the registered metrics, in eager torch; the
    Triton pass does the same IEEE operations (no contraction), so both agree bit for bit."""
    d = distance(c_low, v, v, gauge, fmt)              # a point reference: the exact value
    err, scaled, ab, rel = (get(name).errors(d) for name in KEPT_METRICS)
    q = d.ulp                                          # ulp(v)
    r = v.abs() / q                                    # exact: q is a power of two
    cand = (r - torch.round(r)).abs() >= 0.5 - k.bound2 * gauge / q
    c, golden = d.computed, d.rounded
    key = scaled if k.scaled_key else err
    return Elements(err, scaled, ab, rel, golden, ~(c == golden),        # +0 == -0; inf == inf; NaN never
                    (torch.isnan(c) | torch.isinf(c)) & ~torch.isinf(golden), cand, key > k.budget)
