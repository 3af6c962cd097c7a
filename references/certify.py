"""Certify the correctly rounded golden value of each element in a target format.

float64 gives each output to within `bound * gauge` (references.exact.float64_error_bound).
Where the interval value +- that bound rounds to one value of the target format, that value is
the correctly rounded answer. Where it straddles a rounding boundary (a midpoint between two
neighbours, including exact ties), float64 cannot decide. Most such elements of a wide group are
undecided only for the float64 sums' error (G - 1 roundings each): their rows are computed again
with every sum within one rounding (references.exact.EXACT_SUMS, whose bound is a G = T = 2
case's), which decides most of them; the rest, and only those, are recomputed in mpmath and
rounded there (ties to even)."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from harness.references import mp
from harness.references.accel import undecided_mask
from harness.references.exact import EXACT_SUMS, Inputs, exact_outputs, float64_error_bound
from harness.references.formats import Format, round_to, undecided

# mpmath works row by row (a row of H elements costs H exps): beyond these many undecided elements
# per output, or for dweight beyond this many case elements, the rest is left uncertified (and
# counted as such) rather than stalling a sweep. Small cases are always certified in full.
MP_DWEIGHT_LIMIT = 200_000
MP_ROW_ELEMENTS = 1 << 14      # mpmath row work per output: rows * H (~20 us an element on one core)
# Rows * H an output's exact-sum pass recomputes at most (its undecided elements' rows; dweight's:
# every row, or none past this).
REFINE_ELEMENTS = 1 << 22


@dataclass
class Certified:
    golden: torch.Tensor       # correctly rounded value in the target format, held in float64
    value64: torch.Tensor      # the float64 value
    flagged: int               # elements float64 could not decide
    certified: int             # of those, decided by exact group sums or mpmath
    uncertified: int           # flagged but left to float64 (over the caps above)
    mp_seconds: float = 0.0    # time spent in mpmath


def certify(inp: Inputs, output: str, fmt: Format, *, dps: int = mp.DEFAULT_DPS,
            values=None, gauges=None, mp_dweight_limit: int = MP_DWEIGHT_LIMIT,
            row_elements: int = MP_ROW_ELEMENTS, row_cache: dict | None = None,
            refine_elements: int = REFINE_ELEMENTS) -> Certified:
    """The golden values of `output` in `fmt`. `refine_elements` 0: no exact-sum pass (every
    undecided element goes to mpmath, within its caps)."""
    if values is None:
        values, gauges = exact_outputs(inp, with_mid=output in ("mid", "dmid"))
    v = values[output]
    loose, tight = (float64_error_bound(inp, exact_sums=e)[output] for e in (False, True))
    golden = round_to(v, fmt)
    mask = undecided_mask(v, loose * gauges[output], fmt)
    flagged = int(mask.sum())
    refined = 0
    if flagged and refine_elements and tight < loose:
        golden, mask, refined = _refine(inp, output, fmt, golden, mask, tight, refine_elements)
    flat = mask.reshape(-1).nonzero().reshape(-1).cpu().tolist()
    if output == "dweight" and flat and inp.x.numel() > mp_dweight_limit:
        return Certified(golden, v, flagged, refined, flagged - refined)
    whole = output == "dx" or not inp.norm_before_gate
    todo = flat if output == "dweight" else \
        _within_row_budget(flat, inp.hidden, inp.group, row_elements, row_cache, whole, dps)
    t0 = time.perf_counter()
    if todo:
        exact = mp.values(inp.to("cpu"), output, todo, dps, cache=row_cache)
        g = golden.reshape(-1).cpu().clone()
        g[todo] = torch.tensor([mp.round_mpf(e, fmt) for e in exact], dtype=torch.float64)
        golden = g.reshape(golden.shape).to(golden.device)
        if whole and output != "dweight" and row_cache is not None:
            mp.mark_whole(row_cache, {_group_of(k, inp.hidden, inp.group) for k in todo}, dps)
    done = refined + len(todo)
    return Certified(golden, v, flagged, done, flagged - done, time.perf_counter() - t0)


def _refine(inp: Inputs, output: str, fmt: Format, golden: torch.Tensor, mask: torch.Tensor, tight: float,
            limit: int):
    """(golden, mask, decided): the undecided elements of `output` computed again, where the case
    is, with every sum within one rounding (EXACT_SUMS, whose relative bound is `tight`: the
    case's, which holds for any of its rows) — their rows, as many as `limit` elements allow (one
    at least); dweight, every row, up to `limit`. Where that value +- its bound rounds to one
    value, it is the golden value and the element is decided."""
    h = inp.hidden
    if output == "dweight":
        if inp.x.numel() > limit:
            return golden, mask, 0
        sub, rows = inp, slice(None)
    else:
        rows = mask.reshape(-1, h).any(-1).nonzero().reshape(-1)[:max(1, limit // h)].to(inp.x.device)
        sub = replace(inp, x=inp.x.reshape(-1, h)[rows], gate=inp.gate.reshape(-1, h)[rows],
                      dy=inp.dy.reshape(-1, h)[rows])
    values, gauges = exact_outputs(sub, with_mid=output in ("mid", "dmid"), arithmetic=EXACT_SUMS)
    v = values[output].reshape(-1, h).to(golden.device)
    bound = tight * gauges[output].reshape(-1, h).to(golden.device)
    open_ = undecided(v, bound, fmt) | ~torch.isfinite(v)      # an overflowed sum is mpmath's to say
    rows = rows if isinstance(rows, slice) else rows.to(golden.device)
    g, m = golden.reshape(-1, h).clone(), mask.reshape(-1, h).clone()
    decided = m[rows] & ~open_
    g[rows] = torch.where(decided, round_to(v, fmt), g[rows])
    m[rows] = m[rows] & open_
    return g.reshape(golden.shape), m.reshape(mask.shape), int(decided.sum())


def _group_of(k: int, hidden: int, group: int) -> tuple[int, int]:
    """(row, group within the row) of flat element index k."""
    return k // hidden, k % hidden // group


def _within_row_budget(flat: list[int], hidden: int, group: int, row_elements: int, row_cache: dict | None,
                       whole: bool, dps: int = mp.DEFAULT_DPS) -> list[int]:
    """The undecided elements of as many rows (or groups) as the budget allows, those already
    computed first; one new one is always taken, even past the budget.

    Cost model (references.mp, in exps; the same for both gate activations, whose closed forms take
    the same sigmoids). Where a group reduction needs every element's activation (dx's
    projection; every output gate first), the unit is a group: a fresh one costs `group` exps, one
    already evaluated whole (mp.whole_groups) nothing — a row cached for a few elements of another
    output is not free (an fp32 2048x4096 case had spent 22.7 s certifying dx on the rows y and
    dgate had touched). Otherwise the unit is a row: one exp per requested element plus, on a fresh
    row, its exact sum of squares, counted as 1/256 of an exp an element (docs/performance.md: at
    1/256 every flagged dgate element of `full`'s mpmath-heavy cases was certified for 24 % more
    mpmath time than at 1/32)."""
    units: dict[tuple, list[int]] = {}
    for k in flat:
        units.setdefault(_group_of(k, hidden, group) if whole else (k // hidden,), []).append(k)
    if whole:
        done = mp.whole_groups(row_cache or {}, dps)
    else:
        done = {(r,) for r in mp.cached_rows(row_cache or {})}
    chosen, spent, new_units = [], 0, 0
    for u in sorted(units, key=lambda u: (u not in done, u)):
        fresh = u not in done
        cost = (group if whole else -(-hidden // 256)) if fresh else 0
        cost += 0 if whole else len(units[u])
        if spent + cost > row_elements and (new_units or not fresh):
            continue                             # over budget
        chosen.append(u)
        spent += cost
        new_units += fresh
    return sorted(k for u in chosen for k in units[u])
