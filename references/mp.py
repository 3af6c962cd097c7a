"""The same quantities as `references.exact`, in mpmath at a chosen precision.

Row-wise (every output of a row needs the row's mean of squares), so it can run on every element
of a small case or on sampled rows / elements of a large one. Precision is set with a local
`workdps` context: the global mpmath precision is never left changed."""
from __future__ import annotations

import math
from typing import Sequence

import mpmath
import torch

from harness.references.exact import Inputs

DEFAULT_DPS = 50


def _floats(values: torch.Tensor) -> list[float]:
    return values.to(torch.float64).reshape(-1).tolist()


def _mp(values: list[float]) -> list:
    return [mpmath.mpf(v) for v in values]


def _gamma_at(w: float, zc: bool):
    return mpmath.mpf(w) + 1 if zc else mpmath.mpf(w)


def _gamma(p: dict) -> list:
    return [_gamma_at(w, p["zc"]) for w in p["w"]]


def sum_of_squares(values: list[float]):
    """sum(v*v) over float64 values, exactly (each v is p / 2**k: Python integers), then rounded
    once to the working precision: the correctly rounded sum, ~10x faster than mpmath.fsum(v*v).
    (fsum gives the same value except where it drops terms lying more than about 2*prec bits below
    its running sum; the per-element and full-row paths here both use this one.) Each row's r
    needs it, and y, dgate and dweight certification spent most of their mpmath time there
    (bench/RESULTS.md, run 9)."""
    if not all(math.isfinite(v) for v in values):
        return mpmath.fsum(mpmath.mpf(v) * mpmath.mpf(v) for v in values)
    ratios = [v.as_integer_ratio() for v in values]
    shifts = [q.bit_length() - 1 for _, q in ratios]           # q = 2**shift
    k = max(shifts, default=0)
    return mpmath.mpf((sum((a * a) << (2 * (k - sh)) for (a, _), sh in zip(ratios, shifts)), -2 * k))


# Dtypes of at most 24 significant bits: a square's integer mantissa fits 48 bits, 2**14 of them int64.
_NARROW = (torch.float32, torch.bfloat16, torch.float16)
_NARROW_MAX_ELEMENTS = 1 << 14


def row_sum_of_squares(values: torch.Tensor):
    """sum_of_squares of a row of a narrow dtype, the same value (the exact sum rounded once), with
    the squares summed per binary exponent in int64 by torch: a float32 row of 4096 in 0.16 ms
    against 1.5 ms in sum_of_squares' Python integers (one thread, this machine; a fresh y/dgate
    row's main cost). Other dtypes, longer rows and non-finite values take sum_of_squares."""
    if values.dtype not in _NARROW or values.numel() > _NARROW_MAX_ELEMENTS or not bool(values.isfinite().all()):
        return sum_of_squares(_floats(values))
    v = values.to(torch.float64).reshape(-1)
    v = v[v != 0]
    if v.numel() == 0:
        return mpmath.mpf(0)
    m, e = torch.frexp(v)                                    # v = m * 2**e, 0.5 <= |m| < 1
    mi = (m.abs() * 2.0 ** 24).to(torch.int64)             # exact: at most 24 significant bits
    exps, inv = torch.unique(e.to(torch.int64), return_inverse=True)
    sums = torch.zeros(len(exps), dtype=torch.int64).index_add_(0, inv, mi * mi)    # < 2**62
    e0 = int(exps[0])
    total = sum(sq << (2 * (ex - e0)) for sq, ex in zip(sums.tolist(), exps.tolist()))
    return mpmath.mpf((total, 2 * e0 - 48))                 # v^2 = mi^2 * 2**(2e - 48)


def row(inp: Inputs, index: int, dps: int = DEFAULT_DPS) -> dict[str, list]:
    """All per-element quantities of one row (flattened leading index) as mpf lists."""
    hsz = inp.hidden
    with mpmath.workdps(dps):
        p = _row_parts(inp, index, need_c=False)
        q = _row_lists(p)
        t, dy, g, r, xhat, s, silu, dn, dxhat = (q[k] for k in ("t", "dy", "g", "r", "xhat", "s", "silu", "dn", "dxhat"))
        n = [a * b for a, b in zip(xhat, g)]
        dsilu = [si * (1 + ti * (1 - si)) for ti, si in zip(t, s)]
        c = _row_c(p, hsz)
        return {
            "n": n, "dn": dn,
            "y": [a * b for a, b in zip(n, silu)],
            "dgate": [a * b * c_ for a, b, c_ in zip(dy, n, dsilu)],
            "dx": [r * (a - b * c) for a, b in zip(dxhat, xhat)],
            "dweight_terms": [a * b for a, b in zip(dn, xhat)],
        }


def _row_parts(inp: Inputs, index: int, need_c: bool) -> dict:
    """The per-row pieces `_element` needs (and `row` starts from): the inputs as float64 lists
    (made mpf where used: exact), r = rsqrt(mean(x^2) + eps) and, for dx only, c = mean(dxhat *
    xhat) (every element's exp: the expensive part), by the same operations in the same order as
    `row` (so the values are the same mpf)."""
    hsz = inp.hidden
    x = inp.x.reshape(-1, hsz)[index]
    parts = {"x": _floats(x), "t": _floats(inp.gate.reshape(-1, hsz)[index]),
             "dy": _floats(inp.dy.reshape(-1, hsz)[index]), "w": _floats(inp.weight),
             "zc": bool(inp.zero_centered_gamma),
             "r": 1 / mpmath.sqrt(row_sum_of_squares(x) / hsz + mpmath.mpf(inp.eps))}
    if need_c:
        parts["c"] = _row_c(parts, hsz)
    return parts


def _row_lists(p: dict) -> dict:
    """A row's inputs as mpf and its per-element xhat, sigmoid, silu, dn, dxhat: what `row` is
    computed from, and the dx constant c of a row with a non-finite value (`_row_c`)."""
    r, x, t, dy, g = p["r"], _mp(p["x"]), _mp(p["t"]), _mp(p["dy"]), _gamma(p)
    xhat = [xi * r for xi in x]
    s = [1 / (1 + mpmath.exp(-ti)) for ti in t]
    silu = [ti * si for ti, si in zip(t, s)]
    dn = [a * b for a, b in zip(dy, silu)]
    return {"t": t, "dy": dy, "g": g, "r": r, "xhat": xhat, "s": s, "silu": silu, "dn": dn,
            "dxhat": [a * b for a, b in zip(dn, g)]}


def _row_c(p: dict, hsz: int):
    """c = mean(dxhat * xhat) = r/H * sum(dy gam x t sigmoid(t)). Each dy gam x t is a product of
    binary fractions, formed exactly in Python integers and rounded once; an element then costs an
    exp, a division and a product (the old lists of xhat, silu, dn, dxhat cost 3x as much: mpf
    objects), and a zero term nothing. A row with a non-finite value: the plain formula."""
    cols = (p["dy"], p["x"], p["t"], p["w"])
    if not all(math.isfinite(v) for col in cols for v in col):
        q = _row_lists(p)
        return mpmath.fsum(a * b for a, b in zip(q["dxhat"], q["xhat"])) / hsz
    terms = []
    for dy, x, t, w in zip(*cols):
        wn, wd = w.as_integer_ratio()
        gn = wn + wd if p["zc"] else wn                        # gam = w + 1, exactly
        num = gn
        den_bits = wd.bit_length() - 1                         # denominators are powers of two
        for v in (dy, x, t):
            vn, vd = v.as_integer_ratio()
            num *= vn
            den_bits += vd.bit_length() - 1
        if num:
            tm = mpmath.mpf(t)
            terms.append(mpmath.mpf((num, -den_bits)) / (1 + mpmath.exp(-tm)))
    return p["r"] * mpmath.fsum(terms) / hsz


def _element(p: dict, output: str, j: int):
    """One element of n, y, dn, dgate or dx from its row's pieces (the formulas of `row`)."""
    r, xj, tj, dyj = p["r"], mpmath.mpf(p["x"][j]), mpmath.mpf(p["t"][j]), mpmath.mpf(p["dy"][j])
    gj = _gamma_at(p["w"][j], p["zc"])
    xhat = xj * r
    if output == "n":
        return xhat * gj
    s = 1 / (1 + mpmath.exp(-tj))
    silu = tj * s
    dn = dyj * silu
    if output == "dn":
        return dn
    n = xhat * gj
    if output == "y":
        return n * silu
    if output == "dgate":
        return dyj * n * (s * (1 + tj * (1 - s)))
    if output == "dx":
        return r * (dn * gj - xhat * p["c"])
    if output == "dweight_term":
        return dn * xhat
    raise ValueError(f"unknown output {output!r}")


def values(inp: Inputs, output: str, flat_indices: Sequence[int], dps: int = DEFAULT_DPS,
           cache: dict | None = None) -> list:
    """mpf values of `output` at the given flat element indices.

    Work per row: r (a sum of squares) always; c = mean(dxhat * xhat) (one exp per element of the
    row) only for dx; then one exp per requested element. `cache` (row index -> pieces) lets the
    outputs of one case share rows. dweight[j] sums its column over every row: every row's r, and
    one exp per row and requested column (not the whole row's: run 9c spent 3 s of mpmath on one
    dweight element of a 16x4096 case computing every element of every row); callers cap it."""
    hsz = inp.hidden
    cache = {} if cache is None else cache
    with mpmath.workdps(dps):
        if output == "dweight":
            cols = [int(j) for j in flat_indices]
            terms: dict[int, list] = {j: [] for j in cols}
            for i in range(inp.tokens):
                full = cache.get(("full", i, dps))
                p = None if full is not None else cache.get(("parts", i, dps))
                if full is None and p is None:
                    p = cache[("parts", i, dps)] = _row_parts(inp, i, need_c=False)
                for j in terms:
                    terms[j].append(full["dweight_terms"][j] if full is not None else _element(p, "dweight_term", j))
            return [mpmath.fsum(terms[j]) for j in cols]
        out = []
        for k in flat_indices:
            i, j = divmod(int(k), hsz)
            full = cache.get(("full", i, dps))
            if full is not None:
                out.append(full[output][j])
                continue
            key = ("parts", i, dps)
            p = cache.get(key)
            if p is None or (output == "dx" and "c" not in p):
                p = cache[key] = _row_parts(inp, i, need_c=output == "dx")
            out.append(_element(p, output, j))
        return out


def cached_rows(cache: dict, need_c: bool = False) -> set[int]:
    """Row indices whose pieces `values` can reuse from `cache` (for dx: those that hold c)."""
    rows = set()
    for key, val in cache.items():
        if key[0] == "full" or (key[0] == "parts" and (not need_c or "c" in val)):
            rows.add(key[1])
    return rows


def all_values(inp: Inputs, dps: int = DEFAULT_DPS) -> dict[str, torch.Tensor]:
    """Every output at every element, rounded to float64 (for cross-checks on small cases)."""
    rows = [row(inp, i, dps) for i in range(inp.tokens)]
    shape = inp.x.shape

    def stack(key):
        return torch.tensor([float(v) for rw in rows for v in rw[key]], dtype=torch.float64).reshape(shape)

    with mpmath.workdps(dps):
        dw = [float(mpmath.fsum(rw["dweight_terms"][j] for rw in rows)) for j in range(inp.hidden)]
    res = {k: stack(k) for k in ("n", "dn", "y", "dgate", "dx")}
    res["dweight"] = torch.tensor(dw, dtype=torch.float64)
    return res


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
