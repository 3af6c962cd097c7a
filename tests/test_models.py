"""Rounding models as data: the interval arithmetic, the model references derived from the points
(against eager implementations of each model, in both orders, with groups, for both gate
activations), resolving declarations."""
import itertools

import pytest
import torch

from harness.analysis.compare import compare
from harness.impls.torch_ref import GatedRMSNorm
from harness.mutant_base import GradRoundedTo, Mutant
from harness.references.errors import UsageError
from harness.references.exact import Inputs, exact_outputs
from harness.references.formats import fmt_of, round_to
from harness.references.intervals import Interval
from harness.references.models import POINTS, RoundingModel, builtin_models, promoted_format, register, resolve
from harness.references.models.reference import exact_allowance, model_reference
from tests.conftest import make_case, make_inputs


def iv(lo, hi):
    lo, hi = torch.tensor(lo, dtype=torch.float64), torch.tensor(hi, dtype=torch.float64)
    return Interval(lo, hi, lo, hi, torch.maximum(lo.abs(), hi.abs()))


def test_interval_arithmetic_hulls():
    a, b = iv([1.0, -2.0], [2.0, 3.0]), iv([-1.0, 4.0], [3.0, 5.0])
    s, d, p = a + b, a - b, a * b
    assert s.lo.tolist() == [0.0, 2.0] and s.hi.tolist() == [5.0, 8.0]
    assert d.lo.tolist() == [-2.0, -7.0] and d.hi.tolist() == [3.0, -1.0]
    assert p.lo.tolist() == [-2.0, -10.0] and p.hi.tolist() == [6.0, 15.0]
    sq = iv([-2.0, 1.0], [3.0, 2.0]).square()
    assert sq.lo.tolist() == [0.0, 1.0] and sq.hi.tolist() == [9.0, 4.0]
    e = Interval.exact(torch.tensor([2.0]))
    assert (e * e).is_exact and (e + 1).is_exact and (e * 3.0).is_exact and not (e * a).is_exact


def test_interval_rounding_keeps_every_candidate():
    bf16 = fmt_of("bf16")
    mid = 1 + 2 ** -8                                   # halfway between 1 and 1 + 2**-7 in bf16
    r = iv([mid - 1e-9], [mid + 1e-9]).rounded(lambda z: round_to(z, bf16))
    assert r.alo.item() == 1.0 and r.ahi.item() == 1 + 2 ** -7
    w = iv([1.0], [1.0]).widen(torch.tensor([0.5]))
    assert w.lo.item() == 0.5 and w.hi.item() == 1.5 and w.alo.item() == 1.0


def test_chain_interval_holds_both_candidates_near_a_boundary():
    # x = [3, 4], eps = 3.5 -> xhat = [0.75, 1]; g = 1 + 2**-7 puts n = 0.75 + 3*2**-9 on a bf16
    # midpoint: float32 noise can land either side, so both neighbours are legitimate.
    g = 1 + 2 ** -7
    inp = Inputs(torch.tensor([3.0, 4.0]), torch.tensor([1.0, 1.0]), torch.tensor([g, 1.0]),
                 torch.ones(2), 3.5, False)
    n_lo, n_hi, _ = model_reference(inp, "chain", fmt_of("bf16"))["mid"]
    assert n_lo[0].item() == 0.75 + 2 ** -8 and n_hi[0].item() == 0.75 + 2 * 2 ** -8
    assert n_lo[1].item() == n_hi[1].item() == 1.0


def run_eager(inp: Inputs, points) -> dict:
    dt = inp.x.dtype
    m = GatedRMSNorm(inp.hidden, eps=inp.eps, zero_centered_gamma=inp.zero_centered_gamma, dtype=inp.weight.dtype,
                     device="cpu", points=frozenset(points), group_size=inp.group_size,
                     norm_before_gate=inp.norm_before_gate, activation=inp.activation)
    with torch.no_grad():
        m.weight.copy_(inp.weight)
    x = inp.x.clone().requires_grad_(True)
    t = inp.gate.clone().requires_grad_(True)
    y = m(x, t)
    y.backward(inp.dy.to(y.dtype))
    assert y.dtype == dt
    return {"y": y.detach(), "dx": x.grad, "dgate": t.grad, "dweight": m.weight.grad}


MODELS = {"chain": {"mid"}, "fused": set(), "xhat": {"xhat"}}
CASES = [(*c, "silu") for c in itertools.product(["bf16", "fp16"], [True, False], [None, 16], [False, True])] + \
    [(*c, True, "sigmoid") for c in itertools.product(["bf16", "fp16"], [True, False], [None, 16])]


@pytest.mark.parametrize("dtype,nbg,group,zc,activation", CASES)
def test_each_model_holds_its_eager_implementation_and_not_the_others(dtype, nbg, group, zc, activation):
    """Every output of the eager implementation of a model lies within half an ULP of that model's
    interval (its one final rounding), in both orders, with groups and for both activations; each
    other model's interval excludes it somewhere (y or dgate), so the models are told apart."""
    fmt = fmt_of(dtype)
    base = make_inputs((64, 64), fmt.dtype, zc=zc, seed=11)
    inp = Inputs(base.x, base.gate, base.weight, base.dy, 1e-5, zc, group, nbg, activation)
    outs = {name: run_eager(inp, pts) for name, pts in MODELS.items()}
    for name in MODELS:
        ref = model_reference(inp, name, fmt)
        for out in ("y", "dx", "dgate", "dweight"):
            lo, hi, g = ref[out]
            c = compare(outs[name][out], lo, hi, g, fmt, "ulp", 0.5)
            assert c.status == "pass", (name, out, c.reason)
        for other in MODELS:
            if other == name:
                continue
            worst = max(compare(outs[other][o], *ref[o], fmt, "ulp", 0.5).reduced.worst_value for o in ("y", "dgate"))
            assert worst > 0.5, (other, "passes as", name)


def test_exact_allowance_is_only_absolute():
    """Away from underflow the allowance around the exact value is ~0 (the relative terms are the
    budgets'); with gates that flush SiLU it covers the whole value."""
    inp = make_inputs((8, 32), torch.bfloat16, seed=1)
    v, _ = exact_outputs(inp)
    lo, hi = exact_allowance(inp, "chain", fmt_of("bf16"))["y"]
    assert torch.all(hi - v["y"] <= 1e-30) and torch.all(v["y"] - lo <= 1e-30)
    flush = make_inputs((2, 8), torch.float32, gate_scale=0.0, gate_shift=-95.0)
    v2, _ = exact_outputs(flush)
    lo2, hi2 = exact_allowance(flush, "fused", fmt_of("fp32"))["y"]
    assert torch.all((lo2 <= 0) & (hi2 >= 0))                      # -0 is legitimate there
    assert torch.all(hi2 - lo2 >= v2["y"].abs())


@pytest.mark.parametrize("nbg", [True, False])
def test_a_flushed_silu_reaches_the_backward(nbg):
    """Below t = -88.72 a float32 SiLU returns -0 (exp overflows), and what the backward reuses of it
    is then 0 too: found by hypothesis, gate first, eager torch's dweight was 0 where the exact one
    is a float32 subnormal, and the model held only the exact value's neighbourhood. (Norm first the
    backward reuses no SiLU product: that order passed before too.)"""
    x = torch.tensor([[1.91964757, 1.52262974]])
    inp = Inputs(x, torch.tensor([[-115.904564, -103.873878]]), torch.tensor([1.07884371, 0.78867346]),
                 torch.tensor([[-0.977032304, -2.06157875]]), 1e-5, False, None, nbg)
    got = run_eager(inp, {"mid"})
    exact, _ = exact_outputs(inp)
    assert got["dweight"][1] == 0 and exact["dweight"][1] != 0      # the flush happened
    ref = model_reference(inp, "chain", fmt_of("fp32"))
    for out in ("y", "dx", "dgate", "dweight"):
        assert compare(got[out], *ref[out], fmt_of("fp32"), "ulp", 0.5).status == "pass", out


@pytest.mark.parametrize("nbg", [True, False])
def test_a_flushed_sigmoid_reaches_the_backward(nbg):
    """A float32 sigmoid is 0 below t = -88.72 too (1 / (1 + inf)), where the exact value is a
    float32 subnormal (not SiLU's normal |t| sigmoid(t)): the model holds eager torch's zeros, also
    in what the backward reuses, and the exact reference's allowance holds them."""
    x = torch.tensor([[1.91964757, 1.52262974, -0.5]])
    inp = Inputs(x, torch.tensor([[-115.904564, -89.5, -60.0]]), torch.tensor([1.07884371, 0.78867346, 1.0]),
                 torch.tensor([[-0.977032304, -2.06157875, 1.0]]), 1e-5, False, None, nbg, "sigmoid")
    got = run_eager(inp, {"mid"})
    exact, _ = exact_outputs(inp)
    assert got["y"][0, 1] == 0 and exact["y"][0, 1] != 0 and got["dgate"][0, 1] == 0   # the flush happened
    ref = model_reference(inp, "chain", fmt_of("fp32"))
    allow = exact_allowance(inp, "chain", fmt_of("fp32"))
    for out in ("y", "dx", "dgate", "dweight"):
        assert compare(got[out], *ref[out], fmt_of("fp32"), "ulp", 0.5).status == "pass", out
    lo, hi = allow["y"]
    holds_zero = (lo <= 0) & (hi >= 0)
    assert holds_zero[0].tolist() == [True, True, False]             # 0 admitted below the flush only


@pytest.mark.parametrize("points", [{"mid"}, set(), {"xhat"}])
def test_subnormal_partials_of_the_norm_backward(points):
    """Found by hypothesis: G = 1, weights near 0 and SiLU near its flush point make dn g a float32
    subnormal; the norm backward multiplies its lost quanta by up to r^3 u (r = 9.5 here), which a
    floor counting only 1 + r missed by 21 ULP of a subnormal dx, for every model's eager form."""
    from harness.cases.generate import generate
    inp = generate(make_case(dtype="fp32", gate_dtype="fp32", weight_dtype="fp32", shape=(9, 61), group_size=1,
                             gate_dist="saturating", gamma_dist="zero"))
    got = run_eager(inp, points)
    name = {frozenset({"mid"}): "chain", frozenset(): "fused", frozenset({"xhat"}): "xhat"}[frozenset(points)]
    ref = model_reference(inp, name, fmt_of("fp32"))
    for out in ("y", "dx", "dgate", "dweight"):
        assert compare(got[out], *ref[out], fmt_of("fp32"), "ulp", 0.5).status == "pass", out


def test_a_subnormal_mid_is_allowed_in_what_the_backward_reuses():
    """Found by hypothesis: fp16 gate first with tiny gates, h = x silu(t) rounds into fp16's
    subnormals (chain's mid point); the exact reference's allowance held that for y but not for
    dweight, which reuses the rounded h (eager torch: 24.5 scaled over a budget of 3 at [7])."""
    from harness.cases.generate import generate
    from harness.impls.registry import resolve as resolve_impl
    from tests.conftest import pair_rows
    case = make_case(dtype="fp16", gate_dtype="fp16", weight_dtype="fp16", shape=(11,), norm_before_gate=False,
                     gate_dist="tiny")
    lo, hi = exact_allowance(generate(case), "chain", fmt_of("fp16"))["dweight"]
    assert (hi - lo)[7] > 0
    rows = pair_rows(case, resolve_impl("torch"))
    assert {(r["output"], r["reference"], r["status"]) for r in rows if r["status"] != "pass"} == set()


@pytest.mark.parametrize("impl", ["torch", "torch-fused", "torch-xhat"])
def test_a_subnormal_normalised_value(impl):
    """Found by hypothesis: fp32 x among the subnormals makes uhat = x r a float32 subnormal, whose
    lost half quantum the gamma and SiLU products then multiply (y 70 ULP outside before)."""
    from harness.impls.registry import resolve as resolve_impl
    from tests.conftest import pair_rows
    case = make_case(dtype="fp32", gate_dtype="fp32", weight_dtype="fp32", shape=(22, 83), eps=0.3,
                     x_dist="subnormal", gate_dist="large_positive", gamma_dist="outlier")
    rows = pair_rows(case, resolve_impl(impl))
    assert [r["reason"] for r in rows if r["status"] != "pass"] == []


def test_a_model_that_overflows_is_named():
    """fp16 chain, hidden 1, gamma outliers: the float32 cancellation in dh is past fp16's range, so
    chain's rounding of dh gives -inf (found by hypothesis). Both checks fail; the model check says
    the model overflows, not only that its reference is NaN."""
    from harness.impls.registry import resolve as resolve_impl
    from tests.conftest import pair_rows
    case = make_case(dtype="fp16", gate_dtype="fp16", weight_dtype="fp16", shape=(6, 1), eps=1e-6,
                     gate_dist="saturating", gamma_dist="outlier", norm_before_gate=False)
    rows = pair_rows(case, resolve_impl("torch"))
    bad = {(r["output"], r["reference"]): r["reason"] for r in rows if r["status"] != "pass"}
    assert bad[("dx", "exact")].startswith("dx non-finite")
    assert "model:chain overflows there" in bad[("dx", "model:chain")]
    assert bad[("dx", "model:chain")].endswith("a NaN never passes")


def test_zero_centred_gamma_formed_in_float32():
    """Found by hypothesis: 1 + w formed in float32 (a float32 weight) may round, and after the xhat
    point's rounding either neighbour can show; eager torch-xhat's y was 0.5001 ULP from a model
    that took 1 + w as exact."""
    from harness.impls.registry import resolve as resolve_impl
    from tests.conftest import pair_rows
    case = make_case(dtype="fp16", gate_dtype="fp32", weight_dtype="fp32", shape=(2, 9, 207), zero_centered_gamma=True,
                     norm_before_gate=False, seed=67, dy_dist="ones")
    rows = pair_rows(case, resolve_impl("torch-xhat"))
    assert [r["reason"] for r in rows if r["status"] != "pass"] == []


class _DnInBf16(Mutant):
    """The gradient reaching n rounded to bf16 (norm first)."""
    def forward(self, x, gate):
        n = GradRoundedTo.apply(self.norm(x.float()).to(x.dtype), torch.bfloat16)
        return (n.float() * self.act(gate)).to(x.dtype)


class _GammaInFp16(Mutant):
    """1 + w formed in fp16."""
    def gamma(self):
        return (1 + self.weight.to(torch.float16)).float() if self.zero_centered_gamma else self.weight.float()


class _SiluZeroBelow80(Mutant):
    """The activation (SiLU or sigmoid) flushed to 0 from t < -80 on, where float32 still holds it."""
    def act(self, gate):
        t = gate.float()
        return torch.where(t < -80, torch.zeros_like(t), self.act_fn(t))


class _SigmoidGradHalfUlp(Mutant):
    """A sigmoid gate whose derivative s (1 - s) is formed from s rounded to 12 bits (2^-13 relative):
    beyond a float32 sigmoid's error SIGMOID32 u32 (the absolute allowance of 1 - s), far below bf16's."""
    def act(self, gate):
        return _CoarseSigmoid.apply(gate.float())


class _CoarseSigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        s = torch.sigmoid(t)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        coarse = torch.round(s * 2.0 ** 12) / 2.0 ** 12
        return grad * coarse * (1 - coarse)


def _caught(cls, case) -> dict:
    """The worst ULP of the mutant against the chain model, per output."""
    from harness.cases.generate import generate
    inp = generate(case)
    m = cls(inp.hidden, eps=inp.eps, zero_centered_gamma=inp.zero_centered_gamma, dtype=inp.weight.dtype,
            device="cpu", points=frozenset({"mid"}), group_size=inp.group_size, norm_before_gate=inp.norm_before_gate,
            activation=inp.activation)
    with torch.no_grad():
        m.weight.copy_(inp.weight)
    x, t = inp.x.clone().requires_grad_(True), inp.gate.clone().requires_grad_(True)
    y = m(x, t)
    y.backward(inp.dy.to(y.dtype))
    got = {"y": y.detach(), "dx": x.grad, "dgate": t.grad, "dweight": m.weight.grad}
    ref = model_reference(inp, "chain", fmt_of(case.dtype))
    return {o: compare(got[o], *ref[o], fmt_of(case.dtype), "ulp", 0.5).reduced.worst_value for o in got}


@pytest.mark.parametrize("cls, case, outputs", [
    # dx itself: the norm backward's floor at r = 21 (a bare r^3 term let this pass on dx)
    (_DnInBf16, dict(shape=(16, 61), group_size=1, gate_dist="underflow"), ("dx",)),
    (_SiluZeroBelow80, dict(shape=(16, 61), group_size=1, gate_dist="underflow"), ("y", "dx", "dgate", "dweight")),
    (_SiluZeroBelow80, dict(shape=(16, 61), group_size=1, gate_dist="underflow", norm_before_gate=False),
     ("y", "dx", "dgate", "dweight")),
    (_GammaInFp16, dict(shape=(2, 9, 207), zero_centered_gamma=True, seed=67, gamma_dist="zero"),
     ("y", "dx", "dgate", "dweight")),
    # the sigmoid gate: a flush above the float32 one, and s (1 - s) from a coarse s where the model
    # admits s's float32 error as an absolute term (large and saturating gates)
    (_SiluZeroBelow80, dict(shape=(16, 61), gate_dist="underflow", activation="sigmoid"), ("y", "dgate")),
    (_SigmoidGradHalfUlp, dict(shape=(16, 64), gate_dist="large_positive", activation="sigmoid"), ("dgate",)),
    (_SigmoidGradHalfUlp, dict(shape=(16, 64), gate_dist="normal", activation="sigmoid", norm_before_gate=False),
     ("dgate",)),
])
def test_the_widened_regions_still_catch_bugs(cls, case, outputs):
    """The floors and widenings above admit float32's own losses, not bugs of the same regions."""
    c = make_case(**{"dtype": "fp32", "gate_dtype": "fp32", "weight_dtype": "fp32", **case})
    worst = _caught(cls, c)
    assert max(worst[o] for o in outputs) > 0.5, worst


def test_resolve_names_points_and_sets():
    assert resolve("chain").points == frozenset({"mid"})
    assert resolve(("mid",)).name == "chain"                       # a built-in's points: that built-in
    assert resolve("xhat").name == "xhat" and resolve([]).name == "fused"
    both = resolve(("xhat", "mid"))
    assert both.name == "mid+xhat" and both.points == frozenset(POINTS)
    for bad in ("chian", ("mid", "nope"), 3):
        with pytest.raises(UsageError):
            resolve(bad)
    assert set(builtin_models()) >= {"chain", "fused", "xhat"}


def test_a_declared_set_of_points_needs_no_code():
    """A model no file names ({mid, xhat}) gets a reference and budget terms from its points alone."""
    inp = make_inputs((16, 32), torch.bfloat16, seed=3)
    fmt = fmt_of("bf16")
    both = model_reference(inp, ("mid", "xhat"), fmt)
    outs = run_eager(inp, {"mid", "xhat"})
    for out in ("y", "dx", "dgate", "dweight"):
        assert compare(outs[out], *both[out], fmt, "ulp", 0.5).status == "pass", out
    m = resolve(("mid", "xhat"))
    assert m.relative_terms("y", True, fmt, fmt) == pytest.approx(3 * fmt.u)


def test_a_new_named_model_is_one_registration():
    toy = register(RoundingModel("toy-both", frozenset({"mid", "xhat"}), "test"))
    try:
        assert resolve("toy-both") is toy
        inp = make_inputs((4, 16), torch.float16, seed=2)
        assert set(model_reference(inp, "toy-both", fmt_of("fp16"))) >= {"y", "dx", "dgate", "dweight"}
    finally:
        from harness.references import models
        models._REGISTRY.pop("toy-both")


def test_promoted_format():
    bf16, fp16, fp32 = fmt_of("bf16"), fmt_of("fp16"), fmt_of("fp32")
    assert promoted_format(bf16, bf16) is bf16
    assert promoted_format(fp32, bf16).name == "fp32" and promoted_format(fp16, bf16).name == "fp32"
