"""The same quantities as `references.exact`, in mpmath at a chosen precision.

Row-wise (every output of a row needs the row's mean of squares), so it can run on every element
of a small case or on sampled rows / elements of a large one. Precision is set with a local
`workdps` context: the global mpmath precision is never left changed."""
from __future__ import annotations

from typing import Sequence

import mpmath
import torch

from references.exact import Inputs

DEFAULT_DPS = 50


def _mp(values: torch.Tensor) -> list:
    return [mpmath.mpf(v) for v in values.to(torch.float64).reshape(-1).tolist()]


def row(inp: Inputs, index: int, dps: int = DEFAULT_DPS) -> dict[str, list]:
    """All per-element quantities of one row (flattened leading index) as mpf lists."""
    hsz = inp.hidden
    with mpmath.workdps(dps):
        x = _mp(inp.x.reshape(-1, hsz)[index])
        t = _mp(inp.gate.reshape(-1, hsz)[index])
        dy = _mp(inp.dy.reshape(-1, hsz)[index])
        w = _mp(inp.weight)
        g = [wi + 1 for wi in w] if inp.zero_centered_gamma else w
        r = 1 / mpmath.sqrt(mpmath.fsum(xi * xi for xi in x) / hsz + mpmath.mpf(inp.eps))
        xhat = [xi * r for xi in x]
        n = [a * b for a, b in zip(xhat, g)]
        s = [1 / (1 + mpmath.exp(-ti)) for ti in t]
        silu = [ti * si for ti, si in zip(t, s)]
        dsilu = [si * (1 + ti * (1 - si)) for ti, si in zip(t, s)]
        dn = [a * b for a, b in zip(dy, silu)]
        dxhat = [a * b for a, b in zip(dn, g)]
        c = mpmath.fsum(a * b for a, b in zip(dxhat, xhat)) / hsz
        return {
            "n": n, "dn": dn,
            "y": [a * b for a, b in zip(n, silu)],
            "dgate": [a * b * c_ for a, b, c_ in zip(dy, n, dsilu)],
            "dx": [r * (a - b * c) for a, b in zip(dxhat, xhat)],
            "dweight_terms": [a * b for a, b in zip(dn, xhat)],
        }


def values(inp: Inputs, output: str, flat_indices: Sequence[int], dps: int = DEFAULT_DPS,
           cache: dict | None = None) -> list:
    """mpf values of `output` at the given flat element indices.

    Rows are the unit of work (every element needs its row's mean of squares); `cache` (row index
    -> row()) lets several outputs of one case share them. dweight[j] sums over every row, so it
    costs a full pass over the case; callers cap it."""
    hsz = inp.hidden
    out = {}
    cache = {} if cache is None else cache
    with mpmath.workdps(dps):
        if output == "dweight":
            rows = [cache.setdefault(i, row(inp, i, dps))["dweight_terms"] for i in range(inp.tokens)]
            return [mpmath.fsum(rw[j] for rw in rows) for j in flat_indices]
        for k in flat_indices:
            i, j = divmod(int(k), hsz)
            if i not in cache:
                cache[i] = row(inp, i, dps)
            out[k] = cache[i][output][j]
        return [out[k] for k in flat_indices]


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
