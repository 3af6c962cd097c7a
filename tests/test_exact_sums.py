"""The exact-sum pass of certification (references.exact.EXACT_SUMS, references/certify.py):
double-double sums within one rounding (against math.fsum), the closed forms with them within
float64_error_bound(exact_sums=True) at every element (against mpmath), and certification deciding
with them exactly what mpmath alone decides — values, counts, caps and non-finite values."""
import math

import mpmath
import pytest
import torch

from harness.references import mp
from harness.references.certify import certify
from harness.references.exact import EXACT_SUMS, Inputs, double_double_sum, exact_outputs, float64_error_bound
from harness.references.formats import fmt_of
from tests.conftest import make_inputs

FP32, BF16 = fmt_of("fp32"), fmt_of("bf16")


@pytest.mark.parametrize("group_size, nbg, activation", [(None, True, "silu"), (None, False, "silu"),
                                                          (64, True, "sigmoid"), (64, False, "silu")])
def test_exact_sums_within_their_bound(group_size, nbg, activation):
    """EXACT_SUMS' values (every sum within one rounding) against mpmath at every element: within
    float64_error_bound(exact_sums=True), the bound of a G = T = 2 case, here for G = 64 and 256
    and T = 6; and that bound is far tighter than float64's own for these G and T."""
    base = make_inputs((6, 256), torch.float32, seed=5, gate_scale=6.0, gate_shift=-1.0)
    inp = Inputs(base.x, base.gate, base.weight, base.dy, base.eps, False, group_size, nbg, activation)
    values, gauges = exact_outputs(inp, with_mid=True, arithmetic=EXACT_SUMS)
    exact = mp.all_values(inp, dps=50)
    tight, loose = float64_error_bound(inp, exact_sums=True), float64_error_bound(inp)
    for k in ("mid", "dmid", "y", "dgate", "dx", "dweight"):
        err = (values[k] - exact[k]).abs()
        assert torch.all(err <= tight[k] * gauges[k] + 1e-300), (k, float((err / gauges[k]).max()))
    assert tight["dx"] * 2 < loose["dx"] and tight["dweight"] < loose["dweight"]


def test_double_double_sum_is_fsum_within_one_rounding():
    """double_double_sum against math.fsum (correctly rounded) on sums that cancel across 40 binades:
    within 1 float64 rounding of the terms' absolute sum (here: equal), odd lengths included."""
    g = torch.Generator().manual_seed(2)
    for n in (1, 2, 3, 7, 64, 1000, 4097):
        v = torch.randn(5, n, generator=g, dtype=torch.float64) * 2.0 ** torch.randint(-20, 20, (5, n), generator=g)
        v = torch.cat([v, -v[:, : n // 2] * (1 + 2.0 ** -50)], -1)
        got = double_double_sum(v)
        want = torch.tensor([math.fsum(r) for r in v.tolist()], dtype=torch.float64)
        assert torch.all((got - want).abs() <= 2.0 ** -53 * v.abs().sum(-1)), n


@pytest.mark.parametrize("nbg, outputs", [(True, ("dx",)), (False, ("dgate", "dmid"))])
def test_exact_sum_pass_decides_as_mpmath_does(nbg, outputs, monkeypatch):
    """float32 outputs of a 4096-wide group: float64's 4096-term sums leave elements undecided
    (41 of dx's norm first, 7 of dgate's and 2 of dmid's gate first) that the exact-sum pass
    decides without mpmath, each to the value mpmath alone gives (refine_elements=0): the pass
    changes who certifies, never a value."""
    base = make_inputs((8, 4096), torch.float32, seed=7, gate_scale=4.0)
    inp = Inputs(base.x, base.gate, base.weight, base.dy, base.eps, False, None, nbg)
    values, gauges = exact_outputs(inp, with_mid=True)
    alone = {k: certify(inp, k, FP32, values=values, gauges=gauges, refine_elements=0, row_elements=1 << 30)
             for k in outputs}

    def no_mpmath(*a, **k):
        raise AssertionError("the exact-sum pass left an element to mpmath")
    monkeypatch.setattr(mp, "values", no_mpmath)
    for k in outputs:
        c = certify(inp, k, FP32, values=values, gauges=gauges)
        assert c.flagged == alone[k].flagged >= 2 and c.certified == c.flagged and c.uncertified == 0, k
        assert torch.equal(c.golden, alone[k].golden), k


def test_dweight_past_the_mpmath_limit_counts_what_the_pass_decided():
    """dweight of a case past mp_dweight_limit (mpmath would sum every row) but within the pass's:
    the elements it decides are counted certified, not uncertified (two dweight values put on bf16
    midpoints: float64 flags them, the pass recomputes the true values and decides them)."""
    base = make_inputs((64, 64), torch.bfloat16, seed=3)
    inp = Inputs(base.x, base.gate, base.weight, base.dy, base.eps, False)
    values, gauges = exact_outputs(inp)
    dw = values["dweight"].clone()
    for j in (3, 17):
        dw[j] = math.copysign(2.0 ** math.floor(math.log2(abs(float(dw[j])))) * (1 + 2.0 ** -8), float(dw[j]))
    values["dweight"] = dw
    c = certify(inp, "dweight", BF16, values=values, gauges=gauges, mp_dweight_limit=1000)
    assert (c.flagged, c.certified, c.uncertified) == (2, 2, 0)
    alone = certify(inp, "dweight", BF16, values=values, gauges=gauges, refine_elements=0, mp_dweight_limit=1 << 30)
    assert alone.certified == 2 and torch.equal(c.golden, alone.golden)


def test_a_non_finite_value_is_left_to_mpmath():
    """An infinite dy makes dweight's column inf in float64 and NaN in the double-double sum
    (inf - inf): the pass decides nothing there (the element stays with mpmath, as before)."""
    base = make_inputs((3, 8), torch.float32, seed=1)
    dy = base.dy.clone()
    dy[0, 2] = math.inf
    inp = Inputs(base.x, base.gate, base.weight, dy, base.eps, False)
    values, gauges = exact_outputs(inp, arithmetic=EXACT_SUMS)
    assert math.isnan(float(values["dweight"][2]))
    from harness.references import certify as certify_module
    got = certify_module._refine(inp, "dweight", FP32, torch.zeros(8, dtype=torch.float64),
                                 torch.ones(8, dtype=torch.bool),
                                 float64_error_bound(inp, exact_sums=True)["dweight"], 1 << 20)
    assert bool(got[1][2]) and float(got[0][2]) == 0.0 and got[2] >= 1     # column 2 still undecided; others not
