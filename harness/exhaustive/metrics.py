"""Error metrics of one output against its exact values: budgets, histogram edges, and the
per-element kernel `elementwise` (ulp / scaled error, correct-rounding mismatch, certification
candidates) shared by the fused and the reference paths.

Budgets: the final rounding (harness.budgets.FINAL_ROUNDING) plus SiLUGate's float32 noise
(references.models.silugate_noise) in units of the format's u; report-only (inf) in the extreme
regime. float64 error of the closed forms: references.exact.float64_error_bound with H = T = 1."""
from __future__ import annotations

import math

import torch

from harness import budgets
from harness.references.exact import Inputs, float64_error_bound
from harness.references.formats import Format
from harness.references.models import silugate_noise

# dn = dy * silu(gate) is a product like y (no cancellation): ulp; dgate can cancel: scaled.
METRIC = {"y": budgets.METRIC["y"], "dn": budgets.METRIC["y"], "dgate": budgets.METRIC["dgate"]}
_ONE = torch.zeros(1, 1)
F64_BOUND = {o: b for o, b in float64_error_bound(Inputs(_ONE, _ONE, torch.zeros(1), _ONE, 0.0, False)).items()
             if o in METRIC}                   # y 33 u64, dn 32 u64, dgate 49 u64
EDGES = (0.0, 0.5, 0.5000001, 0.51, 0.6, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 1024.0, math.inf)
TOPK = 8


def budget_for(output: str, regime: str, fmt: Format) -> float:
    if regime == "extreme":
        return math.inf
    return budgets.FINAL_ROUNDING[METRIC[output]] + silugate_noise()[output] / fmt.u


def kernel_args(output: str, fmt: Format) -> tuple:
    """`elementwise`'s format arguments (u, min_sub, emin_bits, pm1_bits, bound, fmax) for `output`."""
    return (fmt.u, fmt.min_subnormal, (fmt.emin + 1023) << 52, (fmt.precision - 1) << 52,
            F64_BOUND[output], fmt.max)


_EXP_MASK = 0x7FF0000000000000


def elementwise(c_low: torch.Tensor, v: torch.Tensor, gauge: torch.Tensor | None, u: float, min_sub: float,
                emin_bits: int, pm1_bits: int, bound: float, fmax: float):
    """Per-element errors of computed `c_low` (dtype) against exact float64 `v` (pure, fusible).

    ulp(v) comes from v's float64 exponent field clamped to the format's emin (references.formats
    .ulp); golden = round-half-even(v / ulp) * ulp (references.formats.round_to, v is finite).
    Returns ulp error, scaled error, float64-undecidable candidates (the nearest rounding boundary
    within twice the float64 error bound), computed != golden, non-finite where golden is finite,
    and the largest relative and absolute errors."""
    c = c_low.to(torch.float64)
    ebits = torch.clamp(v.view(torch.int64) & _EXP_MASK, min=emin_bits)
    q = (ebits - pm1_bits).view(torch.float64)
    r = v / q                                          # exact: q is a power of two
    k = torch.round(r)
    golden = k * q
    golden = torch.where(golden.abs() > fmax, torch.copysign(torch.full_like(golden, math.inf), v), golden)
    same = c == golden                                 # +0 == -0; inf == inf
    dist = torch.where(same & torch.isinf(c), torch.zeros_like(v), (c - v).abs())
    dist = torch.nan_to_num(dist, nan=math.inf, posinf=math.inf)
    err = dist / q
    va = v.abs()
    ga = va if gauge is None else gauge
    scaled = dist / (u * ga + min_sub / 2)
    rel = torch.where(dist == 0, torch.zeros_like(dist), dist / va)
    cand = (r - k).abs() >= 0.5 - 2 * bound * ga / q
    nonfin = ~torch.isfinite(c) & torch.isfinite(golden)
    return err, scaled, cand, ~same, nonfin, rel.amax(), dist.amax()


_ELEMENTWISE = {"fn": elementwise}


def use_compile(on: bool) -> None:
    """Fuse `elementwise` with torch.compile (one kernel per tile on CUDA); eager when off."""
    _ELEMENTWISE["fn"] = torch.compile(elementwise, dynamic=True) if on else elementwise

