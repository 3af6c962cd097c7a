"""references.closed_forms in mpmath, row by row, computing only what is asked for.

Each row (flattened leading index) is evaluated lazily: closed_forms builds its formulas over
`Lazy` values, and asking for one element computes that element's chain and nothing more — the
row's mean of squares (an exact integer sum, `sum_of_squares`), one exp per element of y or dn and
two of dgate norm first (sigmoid(t) and sigmoid(-t): the same for either gate activation, silu or
sigmoid); the group's every element where a group reduction needs them (dx's projection, and
everything gate first, whose rstd needs each activation). Rows are cached, so the outputs of one case
share them. Precision is a local `workdps` context: the global mpmath precision never changes."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import mpmath
import torch
from mpmath.libmp import from_float

from harness.references.closed_forms import ExactHooks, forward_backward
from harness.references.exact import Inputs

DEFAULT_DPS = 50


class Lazy:
    """A row's values, computed per column on first use; `key` maps a column to what it is memoised
    by (the column, or its group for per-group values such as rstd)."""
    __slots__ = ("fn", "key", "memo", "floats")

    def __init__(self, fn, key=None, floats=None):
        self.fn, self.key, self.memo, self.floats = fn, key, {}, floats

    def __getitem__(self, j: int):
        k = j if self.key is None else self.key(j)
        v = self.memo.get(k)
        if v is None:
            v = self.memo[k] = self.fn(j)
        return v

    def _bin(self, o, f):
        if isinstance(o, Lazy):
            key = self.key if self.key is not None and self.key is o.key else None
            return Lazy(lambda j: f(self[j], o[j]), key)
        return Lazy(lambda j: f(self[j], o), self.key)

    def __add__(self, o):
        return self._bin(o, lambda a, b: a + b)

    __radd__ = __add__

    def __sub__(self, o):
        return self._bin(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._bin(o, lambda a, b: b - a)

    def __mul__(self, o):
        return self._bin(o, lambda a, b: a * b)

    __rmul__ = __mul__

    def __neg__(self):
        return Lazy(lambda j: -self[j], self.key)


def exact_mpf(v: float):
    """The float64 `v` as an mpf, exactly: what `mpmath.mpf(v)` gives at 53 bits or more, built
    from its (sign, mantissa, exponent) directly — the conversion was a quarter of certification's
    time (mpf's constructor normalises through the context's rounding, a no-op for a float64)."""
    if mpmath.mp.prec < 53:
        return mpmath.mpf(v)
    return mpmath.mp.make_mpf(from_float(v))


def leaf(values: list[float]) -> Lazy:
    """An input row: exact float64 values made mpf on use."""
    return Lazy(lambda j: exact_mpf(values[j]), floats=values)


class RowArithmetic(ExactHooks):
    """closed_forms' arithmetic on one row's Lazy values; token_sum leaves each row's term, which
    `values` sums over the rows for dweight."""

    def __init__(self, hidden: int):
        self.hidden = hidden

    def _groups(self, group: int):
        return lambda j: j // group

    def _members(self, j: int, group: int) -> range:
        k = j // group * group
        return range(k, k + group)

    @staticmethod
    def sigmoid(t: Lazy) -> Lazy:
        return Lazy(lambda j: 1 / (1 + mpmath.exp(-t[j])), t.key)

    @staticmethod
    def rsqrt(v: Lazy) -> Lazy:
        return Lazy(lambda j: 1 / mpmath.sqrt(v[j]), v.key)

    def mean_of_squares(self, u: Lazy, group: int) -> Lazy:
        def f(j):
            cols = self._members(j, group)
            if u.floats is not None:                        # an input row: exactly, in integers
                return sum_of_squares([u.floats[k] for k in cols]) / group
            return mpmath.fsum(u[k] * u[k] for k in cols) / group
        return Lazy(f, self._groups(group))

    def group_mean(self, v: Lazy, group: int) -> Lazy:
        return Lazy(lambda j: mpmath.fsum(v[k] for k in self._members(j, group)) / group, self._groups(group))

    @staticmethod
    def token_sum(v: Lazy) -> Lazy:
        return v


def sum_of_squares(values: list[float]):
    """sum(v*v) over float64 values, exactly (each v is p / 2**k: Python integers), then rounded once
    to the working precision: the correctly rounded sum, ~10x faster than mpmath.fsum(v*v)."""
    if not all(math.isfinite(v) for v in values):
        return mpmath.fsum(mpmath.mpf(v) * mpmath.mpf(v) for v in values)
    ratios = [v.as_integer_ratio() for v in values]
    shifts = [q.bit_length() - 1 for _, q in ratios]           # q = 2**shift
    k = max(shifts, default=0)
    return mpmath.mpf((sum((a * a) << (2 * (k - sh)) for (a, _), sh in zip(ratios, shifts)), -2 * k))


def _floats(values: torch.Tensor) -> list[float]:
    return values.to(torch.float64).reshape(-1).tolist()


def row(inp: Inputs, index: int) -> dict[str, Lazy]:
    """The lazy closed forms of one row (y, dx, dgate, mid, dmid per column; dweight: the row's
    term of each column). Evaluate inside `mpmath.workdps`."""
    hsz = inp.hidden
    w = _floats(inp.weight)
    g = leaf([v + 1 for v in w] if inp.zero_centered_gamma else w)      # exact: 16/32-bit weights
    x, t, dy = (leaf(_floats(a.reshape(-1, hsz)[index])) for a in (inp.x, inp.gate, inp.dy))
    op = replace(inp.op, zero_centered_gamma=False)                    # g carries the + 1 already
    return forward_backward(x, t, g, dy, op, RowArithmetic(hsz))


def values(inp: Inputs, output: str, flat_indices: Sequence[int], dps: int = DEFAULT_DPS,
           cache: dict | None = None) -> list:
    """mpf values of `output` at the given flat element indices (dweight: column indices, each the
    fsum of every row's term). `cache` (row index -> lazy row) lets the outputs of one case share
    rows; callers cap dweight, which needs every row."""
    inp = inp.to("cpu")
    hsz = inp.hidden
    cache = {} if cache is None else cache

    def get(i):
        key = ("row", i, dps)
        if key not in cache:
            cache[key] = row(inp, i)
        return cache[key]

    with mpmath.workdps(dps):
        if output == "dweight":
            return [mpmath.fsum(get(i)["dweight"][int(j)] for i in range(inp.tokens)) for j in flat_indices]
        return [get(int(k) // hsz)[output][int(k) % hsz] for k in flat_indices]


def cached_rows(cache: dict) -> set[int]:
    """Row indices `values` can reuse from `cache`."""
    return {key[1] for key in cache if key[0] == "row"}


def whole_groups(cache: dict, dps: int = DEFAULT_DPS) -> set[tuple[int, int]]:
    """(row, group) pairs of `cache` evaluated at every element (mark_whole): what costs nothing
    more for an output whose group reduction needs every element's activation. A row cached for a few
    elements of y or dgate still costs the group's exps there; so does another group of a row."""
    return {(key[1], key[2]) for key in cache if key[0] == "whole" and key[3] == dps}


def mark_whole(cache: dict, groups, dps: int = DEFAULT_DPS) -> None:
    """Record that these (row, group) pairs of `cache` have been evaluated at every element."""
    cache.update({("whole", int(r), int(g), dps): True for r, g in groups})


def all_values(inp: Inputs, dps: int = DEFAULT_DPS) -> dict[str, torch.Tensor]:
    """Every output at every element, rounded to float64 (cross-checks on small cases)."""
    shape, n = inp.x.shape, inp.x.numel()
    out = {}
    cache: dict = {}
    for k in ("y", "dx", "dgate", "mid", "dmid"):
        out[k] = torch.tensor([float(v) for v in values(inp, k, range(n), dps, cache)],
                              dtype=torch.float64).reshape(shape)
    out["dweight"] = torch.tensor([float(v) for v in values(inp, "dweight", range(inp.hidden), dps, cache)],
                                  dtype=torch.float64)
    return out


def round_mpf(v, fmt) -> float:
    """Correctly round an mpf into `fmt` (ties to even), returned as a float64 holding it."""
    if mpmath.isnan(v):
        return float("nan")
    if v == 0:
        return 0.0                                # mpmath has no signed zero
    # Work at v's own precision at least: a lower one would round v onto a midpoint it is not on.
    with mpmath.workprec(max(mpmath.mp.prec, v._mpf_[3] + 8, 4 * fmt.precision + 64)):
        a = abs(v)
        _, e = mpmath.frexp(a)                    # a = m * 2**e, 0.5 <= m < 1
        q = mpmath.ldexp(1, max(int(e) - 1, fmt.emin) - fmt.precision + 1)
        k = mpmath.nint(a / q)                    # nint rounds half to even
        r = float(k * q)
    if r > fmt.max:
        r = float("inf")
    return -r if v < 0 else r
