"""Golden values where float64 cannot decide the correct rounding: closed forms for near-exact
products (tiny and large gates) and 50-digit mpmath (references.mp.round_mpf) for the rest.

Callers look `_mp_golden` up on this module at call time (tests replace it)."""
from __future__ import annotations

import torch

from harness.references.formats import Format, round_to

MP_CAP = 20_000                         # mpmath decisions per tile, beyond: uncertified
NEAR_EXACT_DELTA = 2.0 ** -40
CLOSED_FORM_TINY = 2.0 ** -30           # |gate| at most this: delta = O(gate)
CLOSED_FORM_LARGE = 2.0 ** -32          # gates >= 2 with gate * sigmoid(-gate) below this


def _mp_golden(output: str, x: list[float], g: list[float], dy: float, fmt: Format) -> list[float]:
    import mpmath
    from harness.references.mp import round_mpf
    out = []
    with mpmath.workdps(50):
        d = mpmath.mpf(dy)
        for xi, ti in zip(x, g):
            t = mpmath.mpf(ti)
            s = 1 / (1 + mpmath.exp(-t))
            if output == "y":
                v = mpmath.mpf(xi) * t * s
            elif output == "dn":
                v = d * t * s
            else:
                v = d * mpmath.mpf(xi) * s * (1 + t * (1 - s))
            out.append(round_mpf(v, fmt))
    return out



def _undecided(v: torch.Tensor, bound: torch.Tensor, fmt: Format) -> torch.Tensor:
    from harness.references.certify import undecided
    return undecided(v, bound, fmt)



def near_exact_golden(output: str, x: torch.Tensor, t: torch.Tensor, dy: float, v: torch.Tensor, fmt: Format):
    """Correctly rounded values where the exact result is P * (1 + delta), P exact in float64.

    For gates t >= 2 whose sigmoid(-t) = m is tiny, the exact values are
        y = x*t*(1 - m), dn = dy*t*(1 - m)          (P = x*t or dy*t, delta = -m < 0)
        dgate = dy*x*(1 + m*(t - 1 - t*m))            (P = dy*x, 0 < delta <= t*m)
    P is a product of two values of at most 11 significant bits (exact in float64), so any rounding
    boundary other than P itself lies at least |P| * 2**-23 from P. Where |delta| <= t*m < 2**-40
    the exact value rounds like P nudged by 2**-40 in delta's direction (a tie at P goes that way),
    whatever the exact size of delta (m may even underflow in float64). These are the exact ties of
    x*t that float64 cannot decide (sigmoid(t) rounds to 1 there); they need no mpmath.
    Returns (mask of pairs decided this way, their golden values as float64)."""
    x = x.to(torch.float64)
    t = t.to(torch.float64)
    m = torch.sigmoid(-t)
    if output == "y":
        P, sign = x * t, -1.0
    elif output == "dn":
        P, sign = dy * t, -1.0
    else:
        P, sign = dy * x, 1.0
    ok = (t >= 2) & (t * m * 1.01 < NEAR_EXACT_DELTA) & torch.isfinite(P) & torch.isfinite(v)
    ok &= (v - P).abs() <= P.abs() * 2.0 ** -30      # v is the float64 value of the same pair
    golden = round_to(P * (1 + sign * NEAR_EXACT_DELTA), fmt)
    return ok, golden


def closed_form_golden(output: str, x: torch.Tensor, t: torch.Tensor, dy: float, v: torch.Tensor, fmt: Format):
    """Correctly rounded values where the exact result is P * (1 + delta), P exact in float64 and
    delta small with a known sign (the argument of near_exact_golden, for the pairs it leaves):
      tiny gates |t| <= 2**-30, with th = tanh(t/2) (2*sigmoid(t) = 1 + th):
        y = (x*t/2) (1 + th), dn = (dy*t/2) (1 + th),  dgate = (dy*x/2) (1 + th + (t/2)(1 - th**2));
        delta has t's sign, 0 < |delta| <= |t|;
      large gates t >= 2 with t*m < 2**-32, m = sigmoid(-t): y, dn = P (1 - m), dgate = P (1 + m(t - 1 - t m)).
    Any rounding boundary other than P lies at least |P| 2**-22 from P (P has at most 22 significant
    bits), so the exact value rounds like P nudged by 2**-40 towards it. In this domain
    2**-136 < |delta| < 2**-30, far above 50-digit mpmath's error (~1e-50): mpmath returns the same."""
    x = x.to(torch.float64)
    t = t.to(torch.float64)
    tiny = (t != 0) & (t.abs() <= CLOSED_FORM_TINY)
    m = torch.sigmoid(-t)
    large = (t >= 2) & (t * m * 1.01 < CLOSED_FORM_LARGE)
    if output == "y":
        P_t, P_l = x * t * 0.5, x * t
    elif output == "dn":
        P_t, P_l = dy * t * 0.5, dy * t
    else:
        P_t, P_l = dy * x * 0.5, dy * x
    sign_l = 1.0 if output == "dgate" else -1.0
    P = torch.where(tiny, P_t, P_l)
    sign = torch.where(tiny, torch.sign(t), torch.full_like(t, sign_l))
    ok = (tiny | large) & torch.isfinite(P) & (P != 0) & torch.isfinite(v)
    ok &= (v - P).abs() <= P.abs() * 2.0 ** -30
    golden = round_to(P * (1 + sign * NEAR_EXACT_DELTA), fmt)
    return ok, golden
