"""Certify the correctly rounded golden value of each element in a target format.

float64 gives each output to within `bound * gauge` (references.exact.float64_error_bound).
Where the interval value +- that bound rounds to one value of the target format, that value is
the correctly rounded answer. Where it straddles a rounding boundary (a midpoint between two
neighbours, including exact ties), float64 cannot decide: those elements, and only those, are
recomputed in mpmath and rounded there (ties to even)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from references import mp
from references.exact import Inputs, exact_outputs, float64_error_bound
from references.formats import Format, round_to

# dweight[j] in mpmath walks the whole case; beyond this many elements it is left uncertified
# (and counted as such) rather than stalling a sweep.
MP_DWEIGHT_LIMIT = 200_000


@dataclass
class Certified:
    golden: torch.Tensor       # correctly rounded value in the target format, held in float64
    value64: torch.Tensor      # the float64 value
    flagged: int               # elements float64 could not decide
    certified: int             # of those, decided by mpmath
    uncertified: int           # flagged but left to float64 (too costly); 0 on every small case


def undecided(value64: torch.Tensor, abs_bound: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Mask of elements whose rounding in `fmt` float64 cannot decide (monotone rounding)."""
    lo = round_to(value64 - abs_bound, fmt)
    hi = round_to(value64 + abs_bound, fmt)
    both_nan = torch.isnan(lo) & torch.isnan(hi)
    return (lo != hi) & ~both_nan


def certify(inp: Inputs, output: str, fmt: Format, *, dps: int = mp.DEFAULT_DPS,
            values=None, gauges=None, mp_dweight_limit: int = MP_DWEIGHT_LIMIT) -> Certified:
    if values is None:
        values, gauges = exact_outputs(inp)
    v = values[output]
    bound = float64_error_bound(inp)[output] * gauges[output]
    golden = round_to(v, fmt)
    mask = undecided(v, bound, fmt)
    flat = mask.reshape(-1).nonzero().reshape(-1).cpu().tolist()
    flagged = len(flat)
    if output == "dweight" and flagged and inp.x.numel() > mp_dweight_limit:
        return Certified(golden, v, flagged, 0, flagged)
    if flat:
        exact = mp.values(inp.to("cpu"), output, flat, dps)
        g = golden.reshape(-1).cpu().clone()
        g[flat] = torch.tensor([mp.round_mpf(e, fmt) for e in exact], dtype=torch.float64)
        golden = g.reshape(golden.shape).to(golden.device)
    return Certified(golden, v, flagged, flagged, 0)
