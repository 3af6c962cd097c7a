"""Error metrics of one output against its exact values: budgets, histogram edges, and the
per-element definition every tile pass implements (`element_errors`).

The element errors are the harness's own metrics (harness.references.metrics: ulp, scaled, abs, rel)
as harness.analysis.compare computes them for a point reference lo = hi = v: distance |c - v|;
where c is NaN or infinite, or v rounds to an infinity, the error is 0 if c equals the rounded
value and inf otherwise. Certification candidates are the elements whose float64 value lies within
twice its error bound of a rounding boundary (a superset of references.formats.undecided).

Budgets: the metric's final rounding (references.metrics: ulp 0.5, scaled 1) plus SiLUGate's
float32 noise (references.models.noise.rho: 8 u32 for y and dn, 12 for dgate) in units of the
format's u; report-only (inf) in the extreme regime. Metrics: y and dn are products (no
cancellation): ULP; dgate can cancel (silu' has a root at t ~ -1.2785): the scaled error."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.references.exact import Inputs, float64_error_bound
from harness.references.formats import Format, round_to, ulp
from harness.references.metrics import gated_metric, get
from harness.references.models.noise import U32, rho

METRIC = {"y": gated_metric("y", "exact"), "dn": gated_metric("y", "exact"), "dgate": gated_metric("dgate", "exact")}
NOISE = {"y": "gate", "dn": "gate", "dgate": "dgate"}
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
    if regime == "extreme":
        return math.inf
    return get(METRIC[output]).final_rounding + rho(1, 1)[NOISE[output]] * U32 / fmt.u


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
    """The per-element definition (module docstring) in eager torch; the Triton pass does the same
    IEEE operations in the same order (no contraction), so both agree bit for bit."""
    c = c_low.to(torch.float64)
    q = ulp(v, fmt)
    golden = round_to(v, fmt)
    r = v.abs() / q                                    # exact: q is a power of two
    kk = torch.round(r)
    same = c == golden                                 # +0 == -0; inf == inf; NaN never
    c_nan = torch.isnan(c)
    special = c_nan | torch.isinf(c) | torch.isinf(golden) | torch.isnan(v)
    sp_val = torch.where(same, 0.0, math.inf).to(torch.float64)
    dist = torch.maximum(c, v) - torch.minimum(c, v)   # |c - v|; NaN c is special anyway

    def fin(e):
        return torch.where(special, sp_val, e)
    zero = torch.zeros_like(dist)
    err = fin(dist / q)
    scaled = fin(torch.where(dist == 0, zero, dist / (k.u * gauge + k.min_sub_half)))
    rel = fin(torch.where(dist == 0, zero, dist / v.abs()))
    ab = fin(dist)
    cand = (r - kk).abs() >= 0.5 - k.bound2 * gauge / q
    key = scaled if k.scaled_key else err
    return Elements(err, scaled, ab, rel, golden, ~same, (c_nan | torch.isinf(c)) & ~torch.isinf(golden), cand,
                    key > k.budget)
