"""Math classes (references/mathclass.py, docs/budgets.md "Math classes"): the instruction bounds
against mpmath, the classes' noise nested from accurate to fast+ftz with accurate's unchanged, the
declarations (factory attributes, --impl SPEC@CLASS, harness.verify(math=)), and the CPU fast-math
emulations: torch-fastmath passes at `fast` and fails at `accurate` naming the output, the FTZ one
passes only where FTZ is declared, mutants beyond the fast bounds are caught under both classes."""
from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

import harness
from harness.cases.case import Case
from harness.cases.generate import generate
from harness.cli import main
from harness.impls import registry
from harness.impls.base import from_factory
from harness.impls.fastmath import FastMath
from harness.references.errors import UsageError
from harness.references.formats import fmt_of
from harness.references.mathclass import (ACCURATE, CLASSES, EXP_ARGUMENT, EXP_ARGUMENT_FIRST_ORDER, FAST,
                                          LOG2E_F32, U32, MathClass, declared_math, parse_math, sigmoid_error)
from harness.references.models import noise
from harness.references.models.reference import exact_allowance, model_reference


def _case(dtype="fp32", gate_dist="saturating", x_dist="standard", **kw) -> Case:
    return Case(dtype, kw.pop("gate_dtype", dtype), dtype, tuple(kw.pop("shape", (8, 64))), False, 1e-5, x_dist,
                gate_dist, "one", 0, **kw)


def test_exp_argument_bound_against_mpmath():
    """exp(t) = 2^a, a = fl32(t fl32(log2 e)) (Triton's tl.exp before ex2.approx): its relative error,
    the power of two evaluated exactly, stays within EXP_ARGUMENT |t| u32 on t in [-120, 90]; the
    first-order constant is reached (the bound is not loose by more than its second order)."""
    t = np.concatenate([np.linspace(-120, 90, 4001), -np.geomspace(1e-3, 120, 300), np.geomspace(1e-3, 90, 300)])
    t = t.astype(np.float32)
    a = (t * np.float32(LOG2E_F32)).astype(np.float32)             # one float32 product, rounded once
    worst = 0.0
    with mpmath.workdps(40):
        for ti, ai in zip(t.tolist(), a.tolist()):
            exact = mpmath.exp(mpmath.mpf(ti))
            rel = abs(mpmath.power(2, mpmath.mpf(ai)) - exact) / exact
            ratio = float(rel / (abs(ti) * U32))
            assert ratio <= EXP_ARGUMENT, (ti, ratio)
            worst = max(worst, ratio)
    assert EXP_ARGUMENT_FIRST_ORDER - 0.1 < worst <= EXP_ARGUMENT_FIRST_ORDER * (1 + 2 ** -16)


def test_the_emulated_fast_sigmoid_is_within_the_fast_sigmoid_error():
    """torch-fastmath's sigmoid (exp2 of the rounded argument, IEEE add and division on the CPU) is
    within sigmoid_error(t) of the exact sigmoid, and beyond what accurate math keeps (8 u32) at
    large |t| — the emulation exercises the bound it is judged by."""
    t = torch.linspace(-88, 60, 20001, dtype=torch.float32)
    s = FastMath(ftz=False).sigmoid(t).double()
    with mpmath.workdps(40):
        exact = torch.tensor([float(1 / (1 + mpmath.exp(-mpmath.mpf(v)))) for v in t.tolist()], dtype=torch.float64)
    rel = (s - exact).abs() / exact / U32
    bound = sigmoid_error(t.double(), FAST)
    assert bool((rel <= bound).all()), float((rel - bound).max())
    assert float(rel.max()) > 50 and float(rel[t.abs() < 1].max()) < 8


def test_a_float32_sigmoid_gate_step_is_within_the_accurate_noise():
    """The accurate class's float32 sigmoid gate step against mpmath, over every gate range of the
    suites (cases.generate): torch.sigmoid within SIGMOID32 u32 of sigmoid(t) where that is a float32
    normal (measured: 2.15), a few subnormal quanta below; its product u s within
    rho_gate; the backward's d u s (1 - s) (aten.sigmoid_backward, what autograd runs) within
    rho_dgate of its gauge plus the absolute SIGMOID32 u32 s |d u| that `1 - s` carries
    (noise.dgate_floor) — and that absolute term is needed: past t ~ 17, s (1 - s) is 0."""
    t = torch.cat([torch.linspace(-88.7, 60, 12001), 3 * torch.randn(4000, generator=torch.Generator().manual_seed(1)),
                   1e-3 * torch.randn(1000, generator=torch.Generator().manual_seed(2))]).float()
    u = torch.full_like(t, 1.3125)
    s = torch.sigmoid(t)
    with mpmath.workdps(40):
        sig = [1 / (1 + mpmath.exp(-mpmath.mpf(v))) for v in t.tolist()]
        exact = torch.tensor([float(v) for v in sig], dtype=torch.float64)
        dexact = torch.tensor([float(v * (1 - v)) if v < 0.5 else float(v / (1 + mpmath.exp(mpmath.mpf(w))))
                               for v, w in zip(sig, t.tolist())], dtype=torch.float64)
    normal = exact >= 2.0 ** -126                  # below (t < -87.34): a subnormal, the floors' concern
    rel = (s.double() - exact).abs() / exact / U32
    assert float(rel[normal].max()) <= noise.SIGMOID32, float(rel[normal].max())
    assert float((s.double() - exact)[~normal].abs().max()) <= noise.TINY32 and bool((~normal).any())
    y = (u * s).double()
    assert bool(((y - 1.3125 * exact).abs() <= noise.rho(1, 1)["gate"] * U32 * 1.3125 * exact).all())
    dg = torch.ops.aten.sigmoid_backward(u, s).double()
    gauge = 1.3125 * dexact
    over = (dg - gauge).abs() - noise.rho(1, 1)["dgate"] * U32 * gauge
    assert bool((over <= noise.SIGMOID32 * U32 * exact * 1.3125).all())
    assert float(over.max()) > 0 and bool((dg[t > 17] == 0).all())        # the relative bound alone fails


def test_parse_and_declare():
    assert [c.label for c in CLASSES] == ["accurate", "accurate+ftz", "fast", "fast+ftz"]
    assert parse_math("fast+ftz") == MathClass("fast", True) and parse_math("ftz") == MathClass("accurate", True)
    assert declared_math() == ACCURATE and declared_math("fast", True) == MathClass("fast", True)
    for bad in ("quick", "fast+fast", "ftz+ftz", ""):
        with pytest.raises(UsageError):
            parse_math(bad) if bad else declared_math(3)
    with pytest.raises(UsageError, match="ftz is 'yes'"):
        declared_math("fast", "yes")


def test_accurate_noise_is_what_it_was_and_fast_adds_to_it():
    assert noise.node_noise(64, 16) == noise.node_noise(64, 16, ACCURATE)
    assert noise.rho(64, 16) == {"n": 6 + 6 + 8.0, "gate": 8.0, "dgate": 12.0, "bwd": 4 + 6 + 8.0,
                                 "sum": 4 + 4 + 4.0}
    fast = noise.rho(64, 16, FAST)
    assert fast["n"] == noise.rho(64, 16)["n"] + 8 and fast["bwd"] == noise.rho(64, 16)["bwd"] + 4
    assert noise.silu_flush(ACCURATE) == -88.72 and noise.silu_flush(MathClass("accurate", True)) == pytest.approx(-87.3365, abs=1e-4)
    assert noise.tiny(MathClass("fast", True)) == 4 * 2.0 ** -126 and noise.tiny(FAST) == 4 * 2.0 ** -149


@pytest.mark.parametrize("case", [_case(), _case(norm_before_gate=False, group_size=16),
                                  _case("bf16", x_dist="subnormal", gate_dist="normal"),
                                  _case("bf16", gate_dtype="fp32", gate_dist="underflow")],
                         ids=["fp32-saturating", "gate-first", "bf16-subnormal-x", "bf16-underflow"])
def test_the_classes_nest(case):
    """Every class's interval holds the less permissive ones' (accurate within accurate+ftz and
    fast, both within fast+ftz), for the model reference and the exact value's allowance alike."""
    inp = generate(case)
    act = fmt_of(case.dtype)
    refs = {c.label: model_reference(inp, "fused", act, c) for c in CLASSES}
    allow = {c.label: exact_allowance(inp, "fused", act, c) for c in CLASSES}
    for small, big in (("accurate", "accurate+ftz"), ("accurate", "fast"), ("fast", "fast+ftz"),
                       ("accurate+ftz", "fast+ftz")):
        for out in ("y", "dx", "dgate", "dweight"):
            for q in (refs, allow):
                lo_s, hi_s, lo_b, hi_b = q[small][out][0], q[small][out][1], q[big][out][0], q[big][out][1]
                assert bool((lo_b <= lo_s).all() and (hi_s <= hi_b).all()), (small, big, out)


def test_declared_by_the_factory_and_overridden_by_the_spec():
    def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
        raise AssertionError("not run")
    make.math, make.ftz = "fast", True
    assert from_factory("k", make, "m:make").math == MathClass("fast", True)
    make.math = "approximate"
    with pytest.raises(UsageError, match="m:make.math is 'approximate'"):
        from_factory("k", make, "m:make")
    impl = registry.resolve("torch-fastmath@accurate")
    assert impl.math == ACCURATE and impl.spec == "torch-fastmath@accurate" and impl.name == "torch-fastmath"
    assert registry.resolve("torch-fastmath").math == FAST
    assert registry.resolve("torch-fastmath-ftz").math == MathClass("fast", True)
    assert registry.resolve("torch").math == ACCURATE
    assert impl.with_math("fast+ftz").spec == "torch-fastmath@fast+ftz"


def test_a_bad_math_suffix_is_a_usage_error(capsys):
    assert main(["run", "--impl", "torch@fastest", "--cases", "quick", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torch@fastest" in err[0] and "fast+ftz" in err[0]


REGIME = [_case(), _case("bf16", gate_dtype="fp32", shape=(16, 64)), _case("bf16", x_dist="subnormal", gate_dist="normal")]


def _verify(impl, math=None):
    return harness.verify(impl, cases=REGIME, device="cpu", isolate="inline", math=math)


def test_fast_math_passes_at_fast_and_fails_at_accurate_naming_the_output():
    r = _verify("torch-fastmath")
    assert r.ok and set(r.frame["math"]) == {"fast"}
    r = _verify("torch-fastmath", math="accurate")
    bad = r.failures
    assert not r.ok and set(r.frame["math"]) == {"accurate"}
    assert {"y", "dgate"} <= set(bad["output"]) and (bad["case_id"] != REGIME[2].case_id).all()
    assert bad["replay"].str.contains("--impl torch-fastmath@accurate", regex=False).all()


def test_ftz_emulation_passes_only_where_ftz_is_declared():
    assert _verify("torch-fastmath-ftz").ok
    r = _verify("torch-fastmath-ftz", math="fast")
    assert not r.ok and REGIME[2].case_id in set(r.failures["case_id"])       # the flushed subnormal x


@pytest.mark.parametrize("mutant", ["exp_argument_in_bf16", "sigmoid_cubic_exp2"])
def test_beyond_the_fast_bounds_is_caught_under_both_classes(mutant):
    for math in ("fast", "fast+ftz"):
        r = _verify(f"{mutant}=harness.mutants:{mutant}", math=math)
        assert not r.ok and (r.failures["case_id"] == REGIME[0].case_id).any(), math


PLUGIN_TEST = """
import harness.pytest_plugin as hp
from harness.cases.case import Case

CASES = [Case("fp32", "fp32", "fp32", (8, 64), False, 1e-5, "standard", "saturating", "one", 0)]
test_declared = hp.suite("torch-fastmath", cases=CASES)
test_accurate = hp.suite("torch-fastmath", cases=CASES, math="accurate")
"""


def test_the_pytest_plugin_judges_at_the_math_class_asked(tmp_path):
    import os
    import subprocess
    import sys
    (tmp_path / "test_it.py").write_text(PLUGIN_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--harness-isolate=inline"],
                       cwd=tmp_path, capture_output=True, text=True, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 1 and "1 failed, 1 passed" in out, out
    assert "y vs model:fused" in out and "--impl torch-fastmath@accurate" in out
