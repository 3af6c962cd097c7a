"""The references against each other: closed form vs float64 autograd vs mpmath, hand-computed
values, and the model references against direct simulation."""
import math

import mpmath
import pytest
import torch

from harness.references import mp
from harness.references.autograd_ref import autograd_outputs
from harness.references.exact import Inputs, exact_outputs, float64_error_bound
from harness.references.formats import fmt_of, round_to
from harness.references.models import model_reference
from tests.conftest import make_inputs

SHAPES = [(19,), (3, 19), (2, 3, 96), (2, 1, 2, 127)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("zc", [False, True])
@pytest.mark.parametrize("gate", [(3.0, 0.0), (1.0, -40.0), (2.0, -800.0)])
def test_closed_form_matches_autograd_and_mpmath(shape, zc, gate):
    inp = make_inputs(shape, torch.float32, zc, gate_scale=gate[0], gate_shift=gate[1], seed=len(shape))
    values, gauges = exact_outputs(inp)
    ag = autograd_outputs(inp)
    exact = mp.all_values(inp, dps=60)
    bound = float64_error_bound(inp)
    for k in ("y", "dx", "dgate", "dweight"):
        # autograd: a different float64 evaluation order, same error bound relative to the gauge
        assert torch.all((values[k] - ag[k]).abs() <= 2 * bound[k] * gauges[k] + 1e-300), k
        # mpmath at 60 digits: float64 closed form within its stated bound on every element
        assert torch.all((values[k] - exact[k]).abs() <= bound[k] * gauges[k] + 1e-300), k


def test_large_negative_gate_gives_minus_zero_y():
    inp = make_inputs((2, 8), torch.bfloat16, gate_scale=0.0, gate_shift=-1000.0)
    values, _ = exact_outputs(inp)
    assert torch.all(values["y"] == 0)
    assert torch.all(values["dgate"] == 0)


def test_hand_computed_small_case():
    # x = [3, 4], eps = 3.5: mean(x^2) + eps = 16, r = 1/4; weight = [1, 2]; gate = [0, 0]
    x = torch.tensor([3.0, 4.0])
    inp = Inputs(x, torch.zeros(2), torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0]), 3.5, False)
    v, _ = exact_outputs(inp)
    assert v["n"].tolist() == [0.75, 2.0]
    assert v["y"].tolist() == [0.0, 0.0]                 # silu(0) = 0
    assert v["dgate"].tolist() == [0.375, 1.0]           # dy*n*silu'(0) = n/2
    assert v["dx"].tolist() == [0.0, 0.0]                # dn = dy*silu(0) = 0
    assert v["dweight"].tolist() == [0.0, 0.0]
    # gate = 2: silu(2) = 2*sigmoid(2); dn = silu(2); dweight_j = silu(2) * xhat_j
    inp2 = Inputs(x, torch.full((2,), 2.0), torch.tensor([1.0, 2.0]), torch.ones(2), 3.5, False)
    v2, _ = exact_outputs(inp2)
    s2 = 2 / (1 + math.exp(-2))
    assert v2["y"].tolist() == pytest.approx([0.75 * s2, 2.0 * s2], rel=1e-15)
    assert v2["dweight"].tolist() == pytest.approx([0.75 * s2, 1.0 * s2], rel=1e-15)
    # dx = r*(dn*g - xhat*mean(dn*g*xhat)), xhat = [0.75, 1], g = [1, 2]
    c = (s2 * 1 * 0.75 + s2 * 2 * 1.0) / 2
    assert v2["dx"].tolist() == pytest.approx([0.25 * (s2 - 0.75 * c), 0.25 * (2 * s2 - c)], rel=1e-14)
    # zero-centred: weight w means gamma = w + 1
    inp3 = Inputs(x, torch.full((2,), 2.0), torch.tensor([0.0, 1.0]), torch.ones(2), 3.5, True)
    assert exact_outputs(inp3)[0]["y"].tolist() == v2["y"].tolist()


def simulate(inp, act, model):
    """Direct simulation: compute n in float64, round it to act (chain), then the rest in float64."""
    v, _ = exact_outputs(inp)
    n = round_to(v["n"], act) if model == "chain" else v["n"]
    t = inp.gate.double()
    s = torch.sigmoid(t)
    return n * t * s


def test_chain_and_fused_differ_and_match_simulation():
    inp = make_inputs((64, 128), torch.bfloat16, seed=3)
    act = fmt_of("bf16")
    chain = model_reference(inp, "chain", act)
    fused = model_reference(inp, "fused", act)
    sim_c, sim_f = simulate(inp, act, "chain"), simulate(inp, act, "fused")
    assert torch.all((chain["y"][0] <= sim_c * (1 + 1e-12) + 1e-300) | (chain["y"][0] <= sim_c))
    inside_c = (chain["y"][0] <= sim_c + 1e-30) & (sim_c <= chain["y"][1] + 1e-30)
    inside_f = (fused["y"][0] <= sim_f + 1e-30) & (sim_f <= fused["y"][1] + 1e-30)
    assert inside_c.all() and inside_f.all()
    # the rounding of n moves y by up to half a bf16 ulp of n: the chain interval excludes the
    # fused value on a large share of elements
    outside = (sim_f < chain["y"][0]) | (sim_f > chain["y"][1])
    assert outside.float().mean() > 0.5


def test_chain_interval_holds_both_candidates_near_a_boundary():
    # n exactly on a bf16 midpoint: x = [3, 4], eps = 3.5 -> n = 0.75 * g; g = 1 + 2**-7 gives
    # 0.75 + 3*2**-9, halfway between two bf16 neighbours. float32 noise can land either side.
    g = 1 + 2 ** -7
    inp = Inputs(torch.tensor([3.0, 4.0]), torch.tensor([1.0, 1.0]), torch.tensor([g, 1.0]),
                 torch.ones(2), 3.5, False)
    n_lo, n_hi, _ = model_reference(inp, "chain", fmt_of("bf16"))["n"]
    assert n_lo[0].item() == 0.75 + 2 ** -8 and n_hi[0].item() == 0.75 + 2 * 2 ** -8
    assert n_lo[1].item() == n_hi[1].item() == 1.0


@pytest.mark.parametrize("zc", [False, True])
def test_mp_values_per_element_equal_the_full_row(zc):
    """mp.values computes only what an element needs (r; c for dx); the mpf values must be the
    very same as the full-row computation, with and without a cache shared between outputs."""
    inp = make_inputs((3, 7), zc=zc, seed=5)
    rows = [mp.row(inp, i) for i in range(3)]
    cache: dict = {}
    for output in ("n", "y", "dn", "dgate", "dx", "dweight"):
        idx = [0, 5, 8, 13, 20] if output != "dweight" else [0, 3, 6]
        for c in (None, cache):
            got = mp.values(inp, output, idx, cache=c)
            if output == "dweight":
                with mpmath.workdps(mp.DEFAULT_DPS):
                    want = [mpmath.fsum(rw["dweight_terms"][j] for rw in rows) for j in idx]
            else:
                want = [rows[k // 7][output][k % 7] for k in idx]
            assert got == want, output
    assert mp.cached_rows(cache, need_c=True) == {0, 1, 2}


@pytest.mark.parametrize("dps", [50, 33, 5])
def test_sum_of_squares_is_the_fsum_of_squares(dps):
    """The exact sum rounded once: fsum(v*v) where the products are exact (>= 106 bits: the
    default 50 digits and 33) and no term is far below the running sum; at lower precision fsum
    would round each product first, so compare with the exact sum rounded."""
    gen = torch.Generator().manual_seed(dps)
    rows = [torch.randn(257, generator=gen, dtype=torch.float64).tolist(),
            (torch.randn(64, generator=gen) * 2.0 ** torch.randint(-140, 120, (64,), generator=gen)).tolist(),
            [0.0, -0.0, 5e-324, -1.5, 2.0 ** 1000, 3.0 * 2.0 ** -1074],     # subnormals and a huge one
            [], [1.0 + 2.0 ** -52] * 7]
    with mpmath.workdps(dps):
        for values in rows:
            if dps >= 33:
                want = mpmath.fsum(mpmath.mpf(v) * mpmath.mpf(v) for v in values)
            else:
                with mpmath.workprec(2200):                    # exact: 2 * (1074 + 53) bits and more
                    exact = mpmath.fsum(mpmath.mpf(v) * mpmath.mpf(v) for v in values)
                want = +exact                                  # rounded once, at dps
            got = mp.sum_of_squares(values)
            assert got == want and isinstance(got, mpmath.mpf), (dps, values[:3])
        # a non-finite value takes the plain path, and gives its answer
        assert mp.sum_of_squares([1.0, math.inf]) == mpmath.inf
    # terms far below the running sum still count (fsum drops them): the correctly rounded sum
    with mpmath.workdps(50):
        assert mp.sum_of_squares([1.0, 2.0 ** -85, 2.0 ** -85]) == 1 + mpmath.mpf(2) ** -169


def test_mp_dweight_of_some_columns_equals_the_full_rows_sum():
    inp = make_inputs((5, 23), torch.float32, True, seed=11)
    cols = [0, 7, 22]
    rows = [mp.row(inp, i) for i in range(5)]
    with mpmath.workdps(mp.DEFAULT_DPS):
        want = [mpmath.fsum(rw["dweight_terms"][j] for rw in rows) for j in cols]
    cache: dict = {}
    assert mp.values(inp, "dweight", cols, cache=cache) == want
    assert not any(k[0] == "full" for k in cache)            # columns only: no row computed in full


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_row_sum_of_squares_equals_sum_of_squares(dtype):
    """The torch path (squares summed per exponent in int64) gives the very mpf of the Python
    integer path, for rows with zeros, subnormals and the dtype's extremes; other rows fall back."""
    gen = torch.Generator().manual_seed(7)
    info = torch.finfo(dtype)
    wide = torch.randn(4096, generator=gen) * 2.0 ** torch.randint(-60, 60, (4096,), generator=gen)
    wide = wide.clamp(-info.max, info.max)                  # finite: the torch path, not the fallback
    rows = [torch.randn(4096, generator=gen).to(dtype), wide.to(dtype),
            torch.tensor([0.0, -0.0, info.tiny, -info.max, info.smallest_normal / 4, 1.0]).to(dtype),
            torch.zeros(5, dtype=dtype), torch.ones(1 << 14, dtype=dtype) * info.max]
    for dps in (50, 20):
        with mpmath.workdps(dps):
            for row in rows:
                got = mp.row_sum_of_squares(row)
                assert got == mp.sum_of_squares(row.to(torch.float64).tolist()) and isinstance(got, mpmath.mpf)
    with mpmath.workdps(50):
        assert mp.row_sum_of_squares(torch.tensor([1.0, math.inf])) == mpmath.inf          # fallback
        longer = torch.full(((1 << 14) + 1,), 3.0, dtype=dtype)
        assert mp.row_sum_of_squares(longer) == 9 * ((1 << 14) + 1)
        # rows longer than the int64 sums allow: 2**16 squares of max would overflow them
        big = torch.full((1 << 16,), info.max, dtype=dtype)
        assert mp.row_sum_of_squares(big) == mp.sum_of_squares(big.to(torch.float64).tolist()) > 0
        assert mp.row_sum_of_squares(torch.tensor([0.1, 3.0], dtype=torch.float64)) == \
            mp.sum_of_squares([0.1, 3.0])                                                   # float64: fallback


@pytest.mark.parametrize("zc", [False, True])
def test_row_c_from_exact_products_equals_the_plain_formula(zc):
    """dx's row constant c from exact products dy*gam*x*t (one rounding each) agrees with the
    plain formula mean(dxhat * xhat) to ~the working precision, zeros and all."""
    inp = make_inputs((3, 300), torch.float32, zc, seed=9)
    inp.x.reshape(-1)[::7] = 0.0
    inp.gate.reshape(-1)[::11] = 0.0
    with mpmath.workdps(mp.DEFAULT_DPS):
        for i in range(3):
            p = mp._row_parts(inp, i, need_c=False)
            q = mp._row_lists(p)
            plain = mpmath.fsum(a * b for a, b in zip(q["dxhat"], q["xhat"])) / inp.hidden
            assert abs(mp._row_c(p, inp.hidden) - plain) <= abs(plain) * mpmath.mpf(10) ** -45
    # a non-finite value in any input: the plain formula (integer ratios do not exist for it)
    for field in ("x", "gate", "dy", "weight"):
        for bad_value in (math.inf, math.nan):
            bad = make_inputs((1, 8), torch.float32, zc, seed=1)
            getattr(bad, field).reshape(-1)[3] = bad_value
            with mpmath.workdps(mp.DEFAULT_DPS):
                p = mp._row_parts(bad, 0, need_c=False)
                q = mp._row_lists(p)
                got, plain = mp._row_c(p, 8), mpmath.fsum(a * b for a, b in zip(q["dxhat"], q["xhat"])) / 8
                assert (mpmath.isnan(got) and mpmath.isnan(plain)) or got == plain, (field, bad_value)
