"""The references against each other: the closed forms (float64) vs an independent float64 autograd
vs mpmath, in both op orders and with groups; hand-computed values; the lazy mpmath rows."""
import math

import mpmath
import pytest
import torch

from harness.references import mp
from harness.references.exact import Inputs, exact_outputs, float64_error_bound
from tests.autograd_ref import autograd_outputs
from tests.conftest import make_inputs

SHAPES = [(19,), (3, 18), (2, 3, 96), (2, 1, 2, 128)]


def variant(inp, group, nbg, activation="silu"):
    return Inputs(inp.x, inp.gate, inp.weight, inp.dy, inp.eps, inp.zero_centered_gamma, group, nbg, activation)


# The sigmoid gate on every shape and gate, both orders, zero-centred gamma on (off is silu's grid's).
@pytest.mark.parametrize("shape,zc,activation", [(s, zc, "silu") for s in SHAPES for zc in (False, True)]
                         + [(s, True, "sigmoid") for s in SHAPES])
@pytest.mark.parametrize("gate", [(3.0, 0.0), (1.0, -40.0), (2.0, -800.0), (2.0, 40.0)])
@pytest.mark.parametrize("nbg", [True, False])
def test_closed_form_matches_autograd_and_mpmath(shape, zc, activation, gate, nbg):
    inp = make_inputs(shape, torch.float32, zc, gate_scale=gate[0], gate_shift=gate[1], seed=len(shape))
    group = shape[-1] // 2 if shape[-1] % 2 == 0 else None
    inp = variant(inp, group, nbg, activation)
    values, gauges = exact_outputs(inp)
    ag = autograd_outputs(inp)
    exact = mp.all_values(inp, dps=60)
    bound = float64_error_bound(inp)
    # autograd's sigmoid' is s (1 - s) by subtraction: 1 - s loses a few u64 of s absolutely, which
    # relative to sigmoid' = s sigmoid(-t) grows as t does (the closed forms take sigmoid(-t))
    cancel = {"dgate": 4 * 2.0 ** -53 * gauges["dgate"] / torch.sigmoid(-inp.gate.double()).clamp_min(1e-300)} \
        if activation == "sigmoid" else {}
    for k in ("y", "dx", "dgate", "dweight"):
        # autograd: a different float64 evaluation order, same error bound relative to the gauge
        assert torch.all((values[k] - ag[k]).abs() <= 2 * bound[k] * gauges[k] + cancel.get(k, 0) + 1e-300), k
        # mpmath at 60 digits: float64 closed form within its stated bound on every element
        assert torch.all((values[k] - exact[k]).abs() <= bound[k] * gauges[k] + 1e-300), k


@pytest.mark.parametrize("group", [1, 4, 16])
def test_groups_normalise_each_group_alone(group):
    """Each group is its own RMSNorm: scaling one group's x leaves the other groups' y unchanged."""
    inp = make_inputs((3, 16), torch.float32, seed=2)
    x2 = inp.x.clone()
    x2[..., :group] *= 4
    y1 = exact_outputs(Inputs(inp.x, inp.gate, inp.weight, inp.dy, 0.0, False, group))[0]["y"]
    y2 = exact_outputs(Inputs(x2, inp.gate, inp.weight, inp.dy, 0.0, False, group))[0]["y"]
    assert torch.equal(y1[..., group:], y2[..., group:])                      # other groups untouched
    assert torch.allclose(y1[..., :group], y2[..., :group], rtol=1e-14)       # eps 0: scale-free
    one = exact_outputs(Inputs(x2, inp.gate, inp.weight, inp.dy, 0.0, False, None))[0]["y"]
    assert group == 16 or not torch.allclose(one[..., group:], y2[..., group:])   # one group would change them


def test_large_negative_gate_gives_zero_y():
    inp = make_inputs((2, 8), torch.bfloat16, gate_scale=0.0, gate_shift=-1000.0)
    values, _ = exact_outputs(inp)
    assert torch.all(values["y"] == 0)
    assert torch.all(values["dgate"] == 0)


def test_hand_computed_small_case():
    # x = [3, 4], eps = 3.5: mean(x^2) + eps = 16, r = 1/4; weight = [1, 2]; gate = [0, 0]
    x = torch.tensor([3.0, 4.0])
    inp = Inputs(x, torch.zeros(2), torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0]), 3.5, False)
    v, _ = exact_outputs(inp, with_mid=True)
    assert v["mid"].tolist() == [0.75, 2.0]
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


def test_hand_computed_sigmoid_gate():
    # x = [3, 4], eps = 3.5: r = 1/4, n = [0.75, 2]; gate 0: sigmoid(0) = 1/2, sigmoid'(0) = 1/4
    x = torch.tensor([3.0, 4.0])
    v, _ = exact_outputs(Inputs(x, torch.zeros(2), torch.tensor([1.0, 2.0]), torch.ones(2), 3.5, False,
                                activation="sigmoid"))
    assert v["y"].tolist() == [0.375, 1.0]                # n / 2
    assert v["dgate"].tolist() == [0.1875, 0.5]           # dy n / 4
    assert v["dweight"].tolist() == [0.375, 0.5]          # dy sigmoid(0) xhat, xhat = [0.75, 1]
    # dx = r (dn g - xhat mean(dn g xhat)), dn = 1/2: c = (0.5*1*0.75 + 0.5*2*1) / 2
    c = (0.5 * 0.75 + 1.0) / 2
    assert v["dx"].tolist() == pytest.approx([0.25 * (0.5 - 0.75 * c), 0.25 * (1.0 - c)], rel=1e-15)
    # gate first, gate 2: h = x sigmoid(2) scales x, so y = RMSNorm(x), and dgate = dh x s (1 - s)
    s2 = 1 / (1 + math.exp(-2))
    first = Inputs(x, torch.full((2,), 2.0), torch.ones(2), torch.ones(2), 0.0, False, None, False, "sigmoid")
    v2, _ = exact_outputs(first, with_mid=True)
    assert v2["y"].tolist() == pytest.approx([0.6 * math.sqrt(2), 0.8 * math.sqrt(2)], rel=1e-15)
    assert v2["mid"].tolist() == pytest.approx([3 * s2, 4 * s2], rel=1e-15)
    assert v2["dgate"].tolist() == pytest.approx((v2["dmid"] * x * s2 * (1 - s2)).tolist(), rel=1e-13)


def test_hand_computed_gate_first():
    # gate first: h = x silu(t); t = 0 gives h = 0, y = 0, and dx = dh silu(0) = 0
    x = torch.tensor([3.0, 4.0])
    v, _ = exact_outputs(Inputs(x, torch.zeros(2), torch.ones(2), torch.ones(2), 1.0, False, None, False))
    assert v["y"].tolist() == [0.0, 0.0] and v["dx"].tolist() == [0.0, 0.0]
    # a large gate: silu(t) = t to float64 precision, so y = RMSNorm(x t) = RMSNorm(x) for t > 0
    t = torch.full((2,), 60.0)
    y_first = exact_outputs(Inputs(x, t, torch.ones(2), torch.ones(2), 0.0, False, None, False))[0]["y"]
    assert y_first.tolist() == pytest.approx([0.6 * math.sqrt(2), 0.8 * math.sqrt(2)], rel=1e-15)


def test_gauges_bound_the_values():
    inp = variant(make_inputs((4, 32), torch.bfloat16, seed=4), 8, False)
    v, g = exact_outputs(inp)
    for k in v:
        assert torch.all(v[k].abs() <= g[k] * (1 + 1e-12)), k


@pytest.mark.parametrize("zc", [False, True])
@pytest.mark.parametrize("nbg", [True, False])
def test_mp_values_per_element_equal_all_values(zc, nbg):
    """mp.values computes only what an element needs; its values are the same as the full rows', with
    and without a cache shared between outputs."""
    inp = variant(make_inputs((3, 8), zc=zc, seed=5), 4, nbg)
    full = mp.all_values(inp)
    cache: dict = {}
    for output in ("y", "dgate", "dx", "dweight", "mid", "dmid"):
        idx = [0, 5, 9, 13, 20] if output != "dweight" else [0, 3, 6]
        want = full[output].reshape(-1)[idx].tolist()
        for c in (None, cache):
            got = [float(v) for v in mp.values(inp, output, idx, cache=c)]
            assert got == want, output
    assert mp.cached_rows(cache) == {0, 1, 2}


@pytest.mark.parametrize("dps", [50, 33, 5])
def test_sum_of_squares_is_the_exact_sum_rounded_once(dps):
    vals = [1.0, 2.0 ** -60, -3.5, 1e-300, 7.25e10, 0.0, -2.0 ** -1074]
    with mpmath.workdps(400):
        exact = mpmath.fsum(mpmath.mpf(v) ** 2 for v in vals)
    with mpmath.workdps(dps):
        assert mp.sum_of_squares(vals) == +exact          # unary plus: rounded to dps
    assert mpmath.mp.dps == 15                            # precision never left changed


def test_mp_leaves_global_precision_alone():
    inp = make_inputs((2, 5), seed=1)
    before = mpmath.mp.prec
    mp.values(inp, "dx", [0, 1], dps=80)
    assert mpmath.mp.prec == before
