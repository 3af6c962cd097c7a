"""Golden values where float64 cannot decide the correct rounding, and the certification of a tile's
candidates: references.formats.undecided narrows them exactly, closed forms decide near-exact
products (tiny and large gates), and mpmath the rest (at most MP_CAP a tile; any beyond are
counted as uncertified).

The mpmath values are references.closed_forms' gate_forward / gate_backward over
references.mp.RowArithmetic (50 digits, references.mp.round_mpf): the formulas are written once.
Callers look `_mp_golden` up on this module at call time (tests replace it)."""
from __future__ import annotations

import time

import torch

from harness.exhaustive.metrics import F64_BOUND
from harness.references.formats import Format, round_to, undecided

MP_CAP = 20_000                         # mpmath decisions per tile, beyond: uncertified
NEAR_EXACT_DELTA = 2.0 ** -40
CLOSED_FORM_TINY = 2.0 ** -30           # |gate| at most this: delta = O(gate)
CLOSED_FORM_LARGE = 2.0 ** -32          # gates >= 2 with gate * sigmoid(-gate) below this


def _mp_golden(output: str, x: list[float], g: list[float], dy: float, fmt: Format,
               activation: str = "silu") -> list[float]:
    """Correctly rounded `output` of each (x, gate) pair for the upstream gradient dy."""
    import mpmath

    from harness.references.closed_forms import gate_backward, gate_forward
    from harness.references.mp import DEFAULT_DPS, RowArithmetic, leaf, round_mpf
    n = len(x)
    if n == 0:
        return []
    A = RowArithmetic(n)
    u, t, d = leaf(list(x)), leaf(list(g)), leaf([dy] * n)
    with mpmath.workdps(DEFAULT_DPS):
        if output == "y":
            row = gate_forward(u, t, A, activation)
        else:
            du, dt = gate_backward(d, u, t, A, activation)
            row = du if output == "dn" else dt
        return [round_mpf(row[j], fmt) for j in range(n)]


def closed_form_golden(output: str, x: torch.Tensor, t: torch.Tensor, dy: float, v: torch.Tensor, fmt: Format,
                       activation: str = "silu"):
    """Correctly rounded values where the exact result is P * (1 + delta), P exact in float64 and
    delta small with a known sign:
      tiny gates |t| <= 2**-30, with th = tanh(t/2) (2*sigmoid(t) = 1 + th):
        silu:    y = (x*t/2) (1 + th), dn = (dy*t/2) (1 + th),  dgate = (dy*x/2) (1 + th + (t/2)(1 - th**2));
                 delta has t's sign, 0 < |delta| <= |t|;
        sigmoid: y = (x/2) (1 + th), dn = (dy/2) (1 + th): delta = th, t's sign;
                 dgate = (dy*x/4) (1 - th**2) (sigmoid' = (1 - th**2)/4): delta = -th**2 < 0;
      large gates t >= 2 with t*m < 2**-32, m = sigmoid(-t): y, dn = P (1 - m) (P = x t, dy t for silu;
        x, dy for sigmoid), silu's dgate = P (1 + m(t - 1 - t m)) (sigmoid's, dy x m (1 - m), has no
        exact P: mpmath decides it).
    Any rounding boundary other than P lies at least |P| 2**-22 from P (P has at most 22 significant
    bits), so the exact value rounds like P nudged by 2**-40 towards it. In this domain
    2**-136 < |delta| < 2**-30: far above 50-digit mpmath's error, which returns the same where it
    can tell at all (for t > ~115, e**-t < 1e-50, 50 digits see an exact tie; tests check both).
    Returns (mask of the pairs decided, their golden values as float64)."""
    x = x.to(torch.float64)
    t = t.to(torch.float64)
    tiny = (t != 0) & (t.abs() <= CLOSED_FORM_TINY)
    m = torch.sigmoid(-t)
    large = (t >= 2) & (t * m * 1.01 < CLOSED_FORM_LARGE)
    factor = {"y": x, "dn": torch.full_like(t, dy), "dgate": dy * x}[output]
    sign_t = torch.sign(t)
    if activation == "sigmoid":
        P_t, P_l = factor * (0.25 if output == "dgate" else 0.5), factor
        if output == "dgate":
            sign_t, large = -torch.ones_like(t), torch.zeros_like(large)
    else:
        P_t, P_l = factor * (0.5 if output == "dgate" else t * 0.5), factor * (1.0 if output == "dgate" else t)
    sign_l = 1.0 if output == "dgate" else -1.0
    P = torch.where(tiny, P_t, P_l)
    sign = torch.where(tiny, sign_t, torch.full_like(t, sign_l))
    ok = (tiny | large) & torch.isfinite(P) & (P != 0) & torch.isfinite(v)
    ok &= (v - P).abs() <= P.abs() * 2.0 ** -30      # v is the float64 value of the same pair
    golden = round_to(P * (1 + sign * NEAR_EXACT_DELTA), fmt)
    return ok, golden


def certify_tile(t, cand: torch.Tensor, dy: float, fmt: Format, acc, perf: dict, activation: str = "silu") -> None:
    """Decide the candidates of tile `t` (stats.Tile) of a run through `activation`: the mismatch
    count (computed against float64's rounding by the pass) is corrected where the certified golden
    value differs."""
    flat = cand.reshape(-1).nonzero().reshape(-1)
    row, col, v, ga = t.values_at(flat)
    und = undecided(v, F64_BOUND[t.output] * ga, fmt).nonzero().reshape(-1)
    w = t.weight
    acc.flagged += und.numel() * w
    if not und.numel():
        return
    flat, row, col, v = flat[und], row[und], col[und], v[und]
    c64 = t.c.reshape(-1)[flat].to(torch.float64)
    wrong64 = c64 != round_to(v, fmt)                  # what the pass counted
    x, g = t.rows.xv[row + t.r0], t.gv[col]
    ok, gold = closed_form_golden(t.output, x, g, dy, v, fmt, activation)
    n_ok = int(ok.sum())
    perf["closed_form"] = perf.get("closed_form", 0) + n_ok
    mismatch = int((c64[ok] != gold[ok]).sum()) - int(wrong64[ok].sum())
    rest = (~ok).nonzero().reshape(-1)
    acc.uncertified += max(rest.numel() - MP_CAP, 0) * w
    rest = rest[:MP_CAP]
    if rest.numel():
        t0 = time.perf_counter()
        g_mp = _mp_golden(t.output, x[rest].tolist(), g[rest].tolist(), dy, fmt, activation)
        perf["mpmath"] = perf.get("mpmath", 0) + rest.numel()
        perf["s_mpmath"] = perf.get("s_mpmath", 0.0) + time.perf_counter() - t0
        gold_mp = torch.tensor(g_mp, dtype=torch.float64, device=v.device)
        mismatch += int((c64[rest] != gold_mp).sum()) - int(wrong64[rest].sum())
    acc.certified += (n_ok + rest.numel()) * w
    acc.mismatch += mismatch * w
