"""Certification (references/certify.py) and the mpmath reference (references/mp.py): exact rounding
midpoints are flagged and decided with ties to even, near-midpoints are decided on the right side,
random cases flag (almost) nothing and agree with mpmath everywhere, round_mpf's corner cases, and
mp.all_values against the float64 closed forms (extending tests/test_references.py)."""
import math
from fractions import Fraction

import mpmath
import pytest
import torch

from harness.references import mp
from harness.references.certify import certify
from harness.references.formats import undecided
from harness.references.exact import Inputs, exact_outputs, float64_error_bound
from harness.references.formats import fmt_of, round_to
from tests.conftest import make_inputs

BF16, FP16, FP32 = fmt_of("bf16"), fmt_of("fp16"), fmt_of("fp32")
FMTS = [BF16, FP16, FP32]


# ------------------------------------------------------------------ an independent exact rounding

def _frac(v) -> Fraction:
    """mpf or float -> the exact rational it holds."""
    if isinstance(v, float):
        return Fraction(v)
    sign, man, exp, _ = v._mpf_
    f = Fraction(int(man)) * (Fraction(2) ** int(exp))
    return -f if sign else f


def rne(v, fmt) -> float:
    """Round an exact rational to nearest, ties to even, in `fmt` (subnormals, overflow): written
    from scratch with Fractions, independent of formats.round_to and mp.round_mpf."""
    f = _frac(v) if not isinstance(v, Fraction) else v
    if f == 0:
        return 0.0
    a = abs(f)
    e = math.floor(math.log2(a.numerator) - math.log2(a.denominator))
    while Fraction(2) ** e > a:            # fix log2 rounding at binade edges
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    q = Fraction(2) ** (max(e, fmt.emin) - fmt.precision + 1)
    k, rem = divmod(a, q)
    k = int(k)
    if rem * 2 > q or (rem * 2 == q and k % 2 == 1):
        k += 1
    r = k * q
    out = math.inf if r > Fraction(fmt.max) else float(r)
    return -out if f < 0 else out


def _ulp(fmt, v: float) -> float:
    e = max(math.frexp(abs(v))[1] - 1, fmt.emin)
    return 2.0 ** (e - fmt.precision + 1)


# ------------------------------------------------------------------ exact midpoints

def _norm_case(g0: float, x0: float = 3.0, dy0: float = 1.0, gate0: float = 0.0) -> Inputs:
    """x = [x0, 4] (x0 = ±3), eps = 3.5: mean(x^2) + eps = 16, r = 1/4, n[0] = x0/4 * g0 exactly;
    gate 0: silu = 0 (y = 0), silu' = 1/2, dgate[0] = dy0 * n[0] / 2 exactly."""
    f64 = torch.float64
    return Inputs(torch.tensor([x0, 4.0], dtype=f64), torch.tensor([gate0, 0.0], dtype=f64),
                  torch.tensor([g0, 1.0], dtype=f64), torch.tensor([dy0, 1.0], dtype=f64), 3.5, False)


# n[0] = 0.75 * (1 + k 2**-(p-1)) = (3 * 2**(p-3) + 1.5 k) ulps, a midpoint for odd k:
# k = 1 -> .5 above an odd count: ties go up; k = 3 -> above an even count: ties go down.
@pytest.mark.parametrize("fmt", [BF16, FP16, FP32], ids=lambda f: f.name)
@pytest.mark.parametrize("k,up", [(1, True), (3, False)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_exact_midpoint_of_n_is_flagged_and_ties_to_even(fmt, k, up, sign):
    g0 = 1 + k * 2.0 ** -(fmt.precision - 1)
    inp = _norm_case(g0, x0=3.0 * sign)
    n0 = exact_outputs(inp, with_mid=True)[0]["mid"][0].item()
    q = _ulp(fmt, n0)
    assert n0 == sign * 0.75 * g0 and (abs(n0) / q) % 1 == 0.5        # really on a midpoint
    c = certify(inp, "mid", fmt)
    assert c.flagged >= 1 and c.certified == c.flagged and c.uncertified == 0
    lo, hi = sign * (abs(n0) - q / 2), sign * (abs(n0) + q / 2)
    want = hi if up else lo
    assert c.golden[0].item() == want == rne(Fraction(n0), fmt)
    assert (abs(want) / q) % 2 == 0                                    # the even neighbour
    assert c.golden[1].item() == 1.0                                    # n[1] = 4/4 * 1


@pytest.mark.parametrize("fmt", [BF16, FP16], ids=lambda f: f.name)
@pytest.mark.parametrize("k,up", [(1, True), (3, False)])
def test_exact_midpoint_of_dgate_at_zero_gate(fmt, k, up):
    # n[0] = 0.75, dgate[0] = dy0 * 0.75 * silu'(0) = 0.375 * dy0; dy0 = 1 + k 2**-(p-1) is a
    # midpoint in fmt (dy0 itself is representable there). y = 0 everywhere.
    dy0 = 1 + k * 2.0 ** -(fmt.precision - 1)
    inp = _norm_case(1.0, dy0=dy0)
    v, _ = exact_outputs(inp)
    assert v["y"].tolist() == [0.0, 0.0]
    d0 = v["dgate"][0].item()
    q = _ulp(fmt, d0)
    assert d0 == 0.375 * dy0 and (d0 / q) % 1 == 0.5
    c = certify(inp, "dgate", fmt)
    assert c.flagged >= 1 and c.certified == c.flagged
    assert c.golden[0].item() == (d0 + q / 2 if up else d0 - q / 2) == rne(Fraction(d0), fmt)
    assert (c.golden[0].item() / q) % 2 == 0
    assert c.golden[1].item() == 0.5                                    # 1 * n[1] / 2, n[1] = 1


@pytest.mark.parametrize("fmt", [BF16, FP16, FP32], ids=lambda f: f.name)
def test_nudged_one_float64_ulp_off_the_midpoint(fmt):
    # k = 3: the tie itself goes down (even); one float64 ulp of g above -> up, below -> down.
    g0 = 1 + 3 * 2.0 ** -(fmt.precision - 1)
    tie = certify(_norm_case(g0), "mid", fmt).golden[0].item()
    up = certify(_norm_case(math.nextafter(g0, math.inf)), "mid", fmt)
    down = certify(_norm_case(math.nextafter(g0, -math.inf)), "mid", fmt)
    q = _ulp(fmt, 0.75 * g0)
    assert up.flagged >= 1 and down.flagged >= 1                      # within the float64 bound
    assert up.golden[0].item() == tie + q
    assert down.golden[0].item() == tie
    # k = 1: the tie goes up; one ulp below goes down
    g1 = 1 + 2.0 ** -(fmt.precision - 1)
    tie1 = certify(_norm_case(g1), "mid", fmt).golden[0].item()
    below = certify(_norm_case(math.nextafter(g1, -math.inf)), "mid", fmt).golden[0].item()
    assert below == tie1 - q


@pytest.mark.parametrize("fmt", [BF16, FP16, FP32], ids=lambda f: f.name)
@pytest.mark.parametrize("output", ["mid", "dgate"])
def test_near_midpoints_within_the_bound_are_flagged_and_match_mpmath(fmt, output):
    """Walk g0 (or dy0) over float64 neighbours of a midpoint: every element within the float64
    bound of the midpoint is flagged, and each golden equals mpmath's value rounded exactly."""
    base = 1 + 3 * 2.0 ** -(fmt.precision - 1)
    flagged_any = 0
    for j in range(-40, 41):
        p = base + j * 2.0 ** -52
        inp = _norm_case(p) if output == "mid" else _norm_case(1.0, dy0=p)
        c = certify(inp, output, fmt)
        with mpmath.workdps(60):
            exact = mp.values(inp, output, [0], 60)[0]
            want = rne(exact, fmt)
        assert c.golden[0].item() == want, j
        v = c.value64[0].item()
        bound = float64_error_bound(inp)[output] * abs(v)
        q = _ulp(fmt, v)
        mid = (math.floor(abs(v) / q) + 0.5) * q
        if abs(abs(v) - mid) < bound / 2:                             # well inside: must be flagged
            assert c.flagged >= 1, j
        flagged_any += c.flagged
    assert flagged_any >= 10


# ------------------------------------------------------------------ random cases against mpmath

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("gate", [(3.0, 0.0), (2.0, -1.28), (20.0, -50.0)])
@pytest.mark.parametrize("zc", [False, True])
def test_random_cases_flag_little_and_agree_with_mpmath_everywhere(dtype, gate, zc):
    inp = make_inputs((6, 48), dtype, zc, gate_scale=gate[0], gate_shift=gate[1],
                      seed=int(gate[0]) + zc, gate_dtype=torch.float32)
    values, gauges = exact_outputs(inp, with_mid=True)
    for output in ("y", "dx", "dgate", "dweight", "mid", "dmid"):
        m = values[output].numel()
        with mpmath.workdps(60):
            exact = mp.values(inp, output, list(range(m)), 60)
        for fmt in FMTS:
            c = certify(inp, output, fmt, values=values, gauges=gauges)
            assert c.uncertified == 0
            assert c.flagged <= max(1, m // 100), (output, fmt.name, c.flagged)
            bound = float64_error_bound(inp)[output] * gauges[output]
            mask = undecided(values[output], bound, fmt)
            assert int(mask.sum()) == c.flagged
            plain = round_to(values[output], fmt)
            assert torch.equal(c.golden[~mask], plain[~mask])
            want = torch.tensor([rne(e, fmt) for e in exact], dtype=torch.float64).reshape(c.golden.shape)
            assert torch.equal(c.golden, want), (output, fmt.name)


# ------------------------------------------------------------------ round_mpf

def _mpf_at(k2: int, q: float):
    """k2/2 * q as an mpf (k2 odd: a midpoint)."""
    return mpmath.mpf(k2) / 2 * mpmath.mpf(q)


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("binade", [0, -3, 5])
def test_round_mpf_ties_to_even(fmt, binade):
    q = 2.0 ** (binade - fmt.precision + 1)
    top = 2 ** (fmt.precision - 1)                     # significands top .. 2*top - 1
    for k in (top, top + 1, top + 2, top + 3, 2 * top - 2):
        v = _mpf_at(2 * k + 1, q)                      # k + 1/2 ulps
        want = (k + (k % 2)) * q
        assert mp.round_mpf(v, fmt) == want == rne(v, fmt), (k, fmt.name)
        assert mp.round_mpf(-v, fmt) == -want
        assert mp.round_mpf(v, fmt) == round_to(torch.tensor(float(v), dtype=torch.float64), fmt).item()
    # just off the tie: the nearer neighbour regardless of parity
    with mpmath.workprec(200):
        off = mpmath.mpf(2) ** -60 * q
        v = _mpf_at(2 * top + 1, q)
        assert mp.round_mpf(v + off, fmt) == (top + 1) * q
        assert mp.round_mpf(v - off, fmt) == top * q


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
def test_round_mpf_subnormals(fmt):
    s = fmt.min_subnormal
    cases = {0.5: 0.0, 0.75: s, 1.0: s, 1.5: 2 * s, 2.5: 2 * s, 3.5: 4 * s, 7.25: 7 * s}
    for m, want in cases.items():
        v = mpmath.mpf(m) * mpmath.mpf(s)
        assert mp.round_mpf(v, fmt) == want == rne(v, fmt), (m, fmt.name)
        got = mp.round_mpf(-v, fmt)
        assert got == -want and math.copysign(1, got) == -1, m        # -0.0 for a tiny negative
    # the largest subnormal plus half its ulp rounds to the smallest normal (even)
    top = 2.0 ** fmt.emin
    v = mpmath.mpf(top) - mpmath.mpf(s) / 2
    assert mp.round_mpf(v, fmt) == top
    assert mp.round_mpf(mpmath.mpf(top) - mpmath.mpf(s) * 3 / 2, fmt) == top - 2 * s
    assert mp.round_mpf(mpmath.mpf(0), fmt) == 0.0


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
def test_round_mpf_overflow(fmt):
    half = _ulp(fmt, fmt.max) / 2
    with mpmath.workprec(400):
        edge = mpmath.mpf(fmt.max) + mpmath.mpf(half)
        tiny = mpmath.mpf(2) ** -200 * edge
        assert mp.round_mpf(edge, fmt) == math.inf                  # max + half ulp: ties away to inf
        assert mp.round_mpf(-edge, fmt) == -math.inf
        assert mp.round_mpf(edge - tiny, fmt) == fmt.max
        assert mp.round_mpf(-(edge - tiny), fmt) == -fmt.max
        assert mp.round_mpf(edge * 4, fmt) == math.inf
    assert mp.round_mpf(mpmath.mpf(fmt.max), fmt) == fmt.max
    assert math.isnan(mp.round_mpf(mpmath.nan, fmt))


def test_round_mpf_keeps_the_full_precision_of_its_argument():
    with mpmath.workprec(300):
        q = mpmath.mpf(2) ** -8
        v = (mpmath.mpf(193.5) - mpmath.mpf(2) ** -120) * q        # just below a tie that goes up
    assert rne(v, BF16) == 193 * 2.0 ** -8
    assert mp.round_mpf(v, BF16) == 193 * 2.0 ** -8                  # got 194 * 2**-8


def test_certify_decides_a_near_tie_closer_than_96_bits():
    # x = [3, 4, 0, 2**-60] (all bf16), eps = 9.75: mean(x^2) + eps = 16 + 2**-122, so
    # n[0] = 0.75 (1 + 2**-7) (1 - 2**-127 ...): below the midpoint 193.5 * 2**-8 by ~2**-127.
    # float64 sees the midpoint exactly (flags it); mpmath at 50 digits sees it is below.
    g = 1 + 2 ** -7
    inp = Inputs(torch.tensor([3.0, 4.0, 0.0, 2.0 ** -60]), torch.zeros(4), torch.tensor([g, 1, 1, 1.0]),
                 torch.ones(4), 9.75, False)
    for t in (inp.x, inp.weight):
        assert torch.equal(t.to(torch.bfloat16).double(), t.double())
    with mpmath.workdps(60):
        exact = mp.values(inp, "mid", [0], 60)[0]
        assert exact < mpmath.mpf(193.5) * 2 ** -8
    c = certify(inp, "mid", BF16)
    assert c.flagged >= 1
    assert c.golden[0].item() == rne(exact, BF16) == 193 * 2.0 ** -8  # got 194 * 2**-8


# ------------------------------------------------------------------ mp.all_values vs closed forms

@pytest.mark.parametrize("shape", [(33,), (5, 17), (2, 3, 40), (2, 2, 1, 24)])
@pytest.mark.parametrize("gate", ["mixed", "saturating", "underflowing"])
@pytest.mark.parametrize("zc", [False, True])
def test_all_values_within_float64_bound(shape, gate, zc):
    g = torch.Generator().manual_seed(len(shape) * 7 + zc)
    inp = make_inputs(shape, torch.float32, zc, seed=len(shape) + 3 * zc)
    if gate == "mixed":          # both signs, up to |t| ~ 40, through silu' = 0 near -1.2785
        t = 15 * torch.randn(shape, generator=g, dtype=torch.float64)
    elif gate == "saturating":   # -30 .. -80
        t = -30 - 50 * torch.rand(shape, generator=g, dtype=torch.float64)
    else:                        # both ends: positive and far below the float32 silu flush
        t = torch.where(torch.rand(shape, generator=g) < 0.5,
                        -80 - 30 * torch.rand(shape, generator=g, dtype=torch.float64),
                        5 * torch.rand(shape, generator=g, dtype=torch.float64))
    inp = Inputs(inp.x, t.float(), inp.weight, inp.dy, 0.25 if zc else 1e-5, zc)
    values, gauges = exact_outputs(inp, with_mid=True)
    exact = mp.all_values(inp, dps=50)
    bound = float64_error_bound(inp)
    for k in ("mid", "dmid", "y", "dgate", "dx", "dweight"):
        assert exact[k].shape == values[k].shape, k
        err = (values[k] - exact[k]).abs()
        assert torch.all(err <= bound[k] * gauges[k] + 1e-300), (k, float((err / gauges[k]).max()))


def test_all_values_match_values_and_row():
    inp = make_inputs((3, 7), torch.float32, seed=11, gate_shift=-2.0)
    allv = mp.all_values(inp, dps=40)
    for k in ("y", "dx", "dgate", "mid", "dmid"):
        idx = [0, 5, 8, 20]
        with mpmath.workdps(40):
            got = [float(e) for e in mp.values(inp, k, idx, 40)]
        assert got == [allv[k].reshape(-1)[i].item() for i in idx], k
    with mpmath.workdps(40):
        dw = [float(e) for e in mp.values(inp, "dweight", [0, 6], 40)]
    assert dw == [allv["dweight"][0].item(), allv["dweight"][6].item()]


def test_mp_leaves_global_precision_alone():
    before = mpmath.mp.prec
    inp = make_inputs((2, 5), torch.bfloat16, seed=1)
    mp.all_values(inp, dps=80)
    mp.values(inp, "dweight", [1], 80)
    mp.round_mpf(mpmath.mpf(1) / 3, BF16)
    assert mpmath.mp.prec == before


def test_row_budget_cost_model():
    from harness.references.certify import _within_row_budget
    # whole groups (dx, or gate first), here one group a row: a group costs `group`; one new one is
    # always taken, even past the budget; one evaluated whole costs nothing, a row cached for a few
    # elements of another output still costs
    cache = {("row", 0, 50): object()}
    assert _within_row_budget([5, 20005, 40005], 20000, 20000, 16384, cache, True) == [5]
    mp.mark_whole(cache, [(0, 0)])
    assert _within_row_budget([5, 20005, 40005], 20000, 20000, 16384, cache, True) == [5, 20005]
    assert _within_row_budget([5, 20005, 40005], 20000, 20000, 50_000, {}, True) == [5, 20005]
    # grouped: the unit is the group, not the row; a row's other group is not free
    flat = [3, 40, 200, 1030]                             # hidden 1024, groups of 32: (0,0) (0,1) (0,6) (1,0)
    assert _within_row_budget(flat, 1024, 32, 4 * 32, {}, True) == flat
    assert _within_row_budget(flat, 1024, 32, 3 * 32, {}, True) == flat[:3]
    cache = {}
    mp.mark_whole(cache, [(0, 6), (1, 0)])
    assert _within_row_budget(flat, 1024, 32, 32, cache, True) == [3, 200, 1030]
    # per element: hidden/256 for a new row's sum of squares plus one per element
    flat = [r * 1024 + j for r in range(10) for j in range(3)]
    got = _within_row_budget(flat, 1024, 1024, 3 * (4 + 3), {}, False)
    assert got == flat[:9]                                # three rows of (4 + 3)
    assert _within_row_budget(flat, 1024, 1024, 3 * (4 + 3) - 1, {}, False) == flat[:6]


@pytest.mark.parametrize("group_size, nbg", [(None, True), (16, True), (16, False)])
def test_whole_certification_marks_its_groups(group_size, nbg):
    """certify dx (or, gate first, any output) records the (row, group) pairs it evaluated whole —
    those of rows 1 and 4 whose float64 value is put on a bf16 midpoint, so float64 cannot decide
    them (no exact-sum pass: it would compute the true values again and decide them); norm first,
    certifying y on the same elements marks nothing."""
    base = make_inputs((6, 64), torch.bfloat16, seed=3)
    inp = Inputs(base.x, base.gate, base.weight, base.dy, base.eps, base.zero_centered_gamma, group_size, nbg)
    values, gauges = exact_outputs(inp)
    for out in ("y", "dx"):
        values[out] = values[out].clone()
        for i, j in ((1, 7), (4, 41)):                    # a bf16 midpoint at the element's scale
            values[out][i, j] = 2.0 ** math.floor(math.log2(gauges[out][i, j])) * (1 + 2.0 ** -8)
    g = inp.group
    cache: dict = {}
    c = certify(inp, "y", fmt_of("bf16"), values=values, gauges=gauges, row_cache=cache, refine_elements=0)
    assert c.certified >= 2 and {1, 4} <= mp.cached_rows(cache)
    assert bool(mp.whole_groups(cache)) == (not nbg)
    c = certify(inp, "dx", fmt_of("bf16"), values=values, gauges=gauges, row_cache=cache, refine_elements=0)
    marked = mp.whole_groups(cache)
    assert c.certified >= 2 and {(1, 7 // g), (4, 41 // g)} <= marked
    assert {r for r, _ in marked} <= mp.cached_rows(cache)
    if g < 64:
        assert (1, 63 // g) not in marked                 # the row's other groups were not evaluated
