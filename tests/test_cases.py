"""Suites, cases, ids and generated inputs (cases/)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.cases.case import DTYPES, DY_DISTS, GAMMA_DISTS, GATE_DISTS, X_DISTS, Case
from tests.conftest import make_case
from harness.cases.generate import generate
from harness.cases.suite import load_suite, parse_suite, resolve_suite_path
from harness.references.errors import UsageError
from harness.runner import shard
from harness.references.formats import fmt_of

ROOT = Path(__file__).resolve().parents[1]
P = "suites/my.toml"

GOOD = """
name = "mine"
description = "a test suite"
[[group]]
dtype = ["bf16", "fp16"]
gate_dtype = ["same", "fp32"]
shape = [[4, 32], [2, 3, 16]]
zero_centered_gamma = [false, true]
gate_dist = ["normal", "negative"]
[[case]]
dtype = "fp32"
shape = [8, 16]
seed = 7
"""


def _raises(text: str, *needles: str) -> str:
    with pytest.raises(UsageError) as ei:
        parse_suite(text, P)
    msg = str(ei.value)
    assert P in msg, msg
    for n in needles:
        assert n in msg, (n, msg)
    assert "\n" not in msg.strip()
    return msg


def test_parse_good_suite_expands_the_product():
    s = parse_suite(GOOD, P)
    assert s.name == "mine" and s.description == "a test suite" and s.path == P
    # group: 2 dtypes x 2 gate dtypes x 2 shapes x 2 zc x 2 gate dists = 32, plus one single case
    assert len(s.cases) == 33
    assert len({c.case_id for c in s.cases}) == 33
    single = [c for c in s.cases if c.dtype == "fp32"]
    assert len(single) == 1
    c = single[0]
    assert c.shape == (8, 16) and c.seed == 7 and c.gate_dtype == "fp32" and c.weight_dtype == "fp32"
    assert c.eps == 1e-5 and c.x_dist == "standard" and c.gate_dist == "normal" and c.gamma_dist == "one"
    zc = [c for c in s.cases if c.zero_centered_gamma]
    assert zc and all(c.gamma_dist == "zero" for c in zc)          # gamma "auto"
    same = [c for c in s.cases if c.dtype == "bf16" and c.gate_dtype == "bf16"]
    assert len(same) == 8                                           # "same" resolved to x's dtype


def test_same_dtype_duplicates_collapse():
    s = parse_suite('[[group]]\ndtype = ["bf16"]\ngate_dtype = ["same", "bf16"]\nshape = [[4, 8]]\n', P)
    assert len(s.cases) == 1


def test_name_defaults_to_file_stem():
    s = parse_suite('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\n', P)
    assert s.name == "my"


@pytest.mark.parametrize("text,needles", [
    ("[[group]\ndtype = 1", ("TOML syntax error",)),
    ('colour = "red"\n[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\n', ("colour", "unknown key")),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\nflavour = ["x"]\n', ("group[0].flavour", "unknown key")),
    ('[[case]]\ndtype = "bf16"\nshape = [4, 8]\nflavour = "x"\n', ("case[0].flavour", "unknown key")),
    ('[[group]]\ndtype = ["fp8"]\nshape = [[4, 8]]\n', ("group[0].dtype", "fp8")),
    ('[[group]]\ndtype = ["bf16"]\ngate_dtype = ["int8"]\nshape = [[4, 8]]\n', ("group[0].gate_dtype", "int8")),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, -8]]\n', ("group[0].shape", "<= 0")),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[0, 8]]\n', ("group[0].shape", "<= 0")),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\ngate_dist = []\n', ("group[0].gate_dist", "empty axis")),
    ('[[group]]\ndtype = []\nshape = [[4, 8]]\n', ("group[0].dtype", "empty axis")),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[1, 2, 2, 2, 8]]\n', ("group[0].shape", "1 to 4")),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\neps = [-1e-5]\n', ("group[0].eps", "positive")),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\neps = [0.0]\n', ("group[0].eps", "positive")),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\neps = ["small"]\n', ("group[0].eps",)),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\neps = [true]\n', ("group[0].eps",)),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[true, 8]]\n', ("group[0].shape",)),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8.0]]\n', ("group[0].shape",)),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\nzero_centered_gamma = [1]\n', ("group[0].zero_centered_gamma",)),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\nseeds = [-1]\n', ("group[0].seeds",)),
    ('[[group]]\nshape = [[4, 8]]\n', ("group[0].dtype", "missing")),
    ('[[group]]\ndtype = ["bf16"]\n', ("group[0].shape", "missing")),
    ('name = "empty"\n', ("no cases",)),
])
def test_rejections_name_file_and_key(text, needles):
    _raises(text, *needles)


def test_bad_suite_paths():
    with pytest.raises(UsageError, match="unknown suite 'no-such-suite'"):
        resolve_suite_path("no-such-suite")
    with pytest.raises(UsageError, match="not found"):
        load_suite("/nonexistent/dir/x.toml")


def test_named_suites_load():
    q = load_suite("quick")
    assert q.name == "quick" and len(q.cases) > 10
    regimes = {c.regime for c in q.cases}
    assert regimes == {"normal", "extreme"}
    f = load_suite("full")
    assert f.name == "full" and len(f.cases) >= len(q.cases)


def test_case_ids_stable_across_processes():
    here = [c.case_id for c in load_suite("quick").cases]
    code = ("import json; from cases.suite import load_suite; "
            "print(json.dumps([c.case_id for c in load_suite('quick').cases]))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == here


def test_case_id_depends_on_every_parameter():
    c = make_case()
    assert c.case_id == make_case().case_id
    variants = [make_case(seed=1), make_case(eps=1e-6), make_case(shape=(4, 33)), make_case(dtype="fp16", gate_dtype="fp16",
                weight_dtype="fp16"), make_case(gate_dtype="fp32"), make_case(zero_centered_gamma=True),
                make_case(x_dist="large"), make_case(gate_dist="negative"), make_case(gamma_dist="outlier")]
    ids = {v.case_id for v in variants}
    assert c.case_id not in ids and len(ids) == len(variants)


@pytest.mark.parametrize("dtype,gate_dtype,weight_dtype", [
    ("bf16", "bf16", "bf16"), ("fp16", "fp32", "fp16"), ("fp32", "fp32", "fp32"), ("bf16", "fp32", "fp32")])
@pytest.mark.parametrize("x_dist", ["standard", "large", "tiny", "subnormal", "zero_row", "outlier"])
def test_generated_inputs_exact_in_dtype_and_deterministic(dtype, gate_dtype, weight_dtype, x_dist):
    c = make_case(dtype=dtype, gate_dtype=gate_dtype, weight_dtype=weight_dtype, x_dist=x_dist,
              gamma_dist="outlier")
    a, b = generate(c), generate(c)
    for name, t, fmtname in (("x", a.x, dtype), ("gate", a.gate, gate_dtype), ("weight", a.weight, weight_dtype),
                             ("dy", a.dy, dtype)):
        f = fmt_of(fmtname)
        assert t.dtype == f.dtype, name
        assert torch.equal(t.double().to(f.dtype), t), name
        assert torch.isfinite(t.double()).all(), name
    for t1, t2 in ((a.x, b.x), (a.gate, b.gate), (a.weight, b.weight), (a.dy, b.dy)):
        assert torch.equal(t1, t2)
    assert a.eps == c.eps and a.zero_centered_gamma == c.zero_centered_gamma
    other = Case(**{**c.params(), "shape": c.shape, "seed": 1})
    assert not torch.equal(generate(other).x, a.x)


def test_dy_follows_activation_dtype():
    c = make_case(weight_dtype="fp32")
    assert generate(c).dy.dtype == torch.bfloat16
    assert generate(c, act_follows="weight").dy.dtype == torch.float32


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_gate_distributions(dtype):
    g = {d: generate(make_case(dtype=dtype, gate_dtype=dtype, weight_dtype=dtype, shape=(8, 96), gate_dist=d)).gate.double()
         for d in ("saturating", "underflow", "negative", "large_positive", "tiny")}
    assert ((g["saturating"] >= -87) & (g["saturating"] <= -20)).all()
    assert (g["underflow"] < -87).all()
    assert (g["negative"] <= 0).all() and (g["negative"] < 0).any()
    assert (g["large_positive"] >= 8).all()
    assert (g["tiny"].abs() < 0.1).all()


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("shape", [(4, 32), (32,), (2, 3, 16)])
def test_zero_row(dtype, shape):
    x = generate(make_case(dtype=dtype, gate_dtype=dtype, weight_dtype=dtype, shape=shape, x_dist="zero_row")).x
    rows = x.reshape(-1, shape[-1])
    assert (rows[0] == 0).all()
    if rows.shape[0] > 1:
        assert (rows[1:] != 0).any()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_large_x(dtype):
    x = generate(make_case(dtype=dtype, gate_dtype=dtype, weight_dtype=dtype, shape=(4, 128), x_dist="large")).x.double()
    assert ((x.abs() >= 128) & (x.abs() <= 256)).all()


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_subnormal_x(dtype):
    f = fmt_of(dtype)
    x = generate(make_case(dtype=dtype, gate_dtype=dtype, weight_dtype=dtype, shape=(4, 128), x_dist="subnormal")).x.double()
    assert (x.abs() < 2.0 ** f.emin).all()
    assert (x != 0).any()


def test_subnormal_x_bf16_stays_subnormal():
    f = fmt_of("bf16")
    x = generate(make_case(shape=(4, 128), x_dist="subnormal")).x.double()
    assert (x.abs() < 2.0 ** f.emin).all()


def test_regime():
    assert make_case().regime == "normal"
    assert make_case(gate_dist="negative").regime == "normal"
    assert make_case(x_dist="zero_row").regime == "normal"
    assert make_case(x_dist="outlier").regime == "normal"
    for kw in (dict(x_dist="large"), dict(x_dist="tiny"), dict(x_dist="subnormal"),
               dict(gate_dist="saturating"), dict(gate_dist="underflow"), dict(eps=0.1), dict(eps=0.3)):
        assert make_case(**kw).regime == "extreme", kw
    assert make_case(eps=0.099).regime == "normal"


@pytest.mark.parametrize("c", [
    make_case(),
    make_case(dtype="fp16", gate_dtype="fp32", weight_dtype="bf16", shape=(2, 2, 2, 64), zero_centered_gamma=True,
          eps=0.3, x_dist="outlier", gate_dist="underflow", gamma_dist="outlier", seed=12),
    make_case(shape=(256,), eps=1e-6, gamma_dist="zero", seed=3),
])
def test_to_toml_round_trips(c):
    s = parse_suite(c.to_toml(), P)
    assert len(s.cases) == 1
    assert s.cases[0] == c
    assert s.cases[0].case_id == c.case_id


def test_quick_suite_cases_round_trip():
    cases = load_suite("quick").cases
    text = "\n\n".join(c.to_toml() for c in cases)
    again = parse_suite(text, P).cases
    assert [c.case_id for c in again] == [c.case_id for c in cases]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_shard_partition(n):
    cases = list(load_suite("quick").cases)
    parts = [shard(cases, k, n) for k in range(1, n + 1)]
    ids = [c.case_id for p in parts for c in p]
    assert len(ids) == len(set(ids)) == len(cases)
    assert set(ids) == {c.case_id for c in cases}
    for p in parts:                                    # order within a shard follows the suite
        assert p == [c for c in cases if c in p]
    assert shard(cases, 1, n) == shard(cases, 1, n)


# ------------------------------------------------------------------ op variants and dy

VARIANTS = """
[[group]]
dtype = ["bf16"]
shape = [[4, 32], [2, 12]]
group_size = ["hidden", 8, 3]
norm_before_gate = [true, false]
dy_dist = ["normal", "ones"]
"""


def test_variant_axes_expand_and_drop_what_does_not_divide():
    s = parse_suite(VARIANTS, P)
    got = {(c.hidden, c.group, c.norm_before_gate, c.dy_dist) for c in s.cases}
    # hidden 32: groups 32, 8 (3 does not divide); hidden 12: groups 12, 3 (8 does not divide)
    assert {(h, g) for h, g, _, _ in got} == {(32, 32), (32, 8), (12, 12), (12, 3)}
    assert len(s.cases) == 4 * 2 * 2
    assert all(c.group_size is None for c in s.cases if c.group == c.hidden)      # "hidden": no group_size


@pytest.mark.parametrize("text,needles", [
    ('[[case]]\ndtype = "bf16"\nshape = [4, 32]\ngroup_size = 5\n', ["group_size", "does not divide", "32"]),
    ('[[case]]\ndtype = "bf16"\nshape = [4, 32]\ngroup_size = 0\n', ["group_size", "positive"]),
    ('[[case]]\ndtype = "bf16"\nshape = [4, 32]\nnorm_before_gate = "no"\n', ["norm_before_gate", "true/false"]),
    ('[[case]]\ndtype = "bf16"\nshape = [4, 32]\ndy_dist = "zeros"\n', ["dy_dist", "zeros"]),
    ('[[case]]\ndtype = "bf16"\nshape = [4, 32]\nactivation = "tanh"\n', ["activation", "tanh", "silu, sigmoid"]),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 32]]\nactivation = ["swish"]\n', ["activation", "swish"]),
    ('[[group]]\ndtype = ["bf16"]\nshape = [[4, 32]]\ngroup_size = [5]\n', ["no valid case"]),
])
def test_variant_rejections(text, needles):
    _raises(text, *needles)


def test_default_variants_keep_the_case_ids_of_before():
    """A case with the later axes at their defaults hashes as it did before they existed (these ids
    are in earlier baselines and golden stores): quick's first case, as on main before the axes."""
    c = make_case(shape=(4, 19))
    assert c.params().keys() == {"dtype", "gate_dtype", "weight_dtype", "shape", "zero_centered_gamma", "eps",
                                 "x_dist", "gate_dist", "gamma_dist", "seed"}
    assert load_suite("quick").cases[0].case_id == "3ca6ec3de730"
    grouped = make_case(shape=(4, 32), group_size=8)
    assert grouped.case_id != make_case(shape=(4, 32)).case_id
    assert make_case(shape=(4, 32), group_size=32) == make_case(shape=(4, 32))    # G = hidden: one spelling
    assert "G=8" in grouped.label and "gate-first" in make_case(norm_before_gate=False).label
    assert "dy:ones" in make_case(dy_dist="ones").label
    sig = make_case(shape=(4, 32), activation="sigmoid")
    assert sig.case_id != make_case(shape=(4, 32)).case_id and sig.params()["activation"] == "sigmoid"
    assert "sigmoid" in sig.label and "sigmoid" not in make_case(shape=(4, 32)).label
    assert make_case(shape=(4, 32), activation="silu").params() == make_case(shape=(4, 32)).params()


def test_the_activation_axis_reaches_inputs_and_suites():
    s = parse_suite('[[group]]\ndtype = ["bf16"]\nshape = [[4, 32]]\nactivation = ["silu", "sigmoid"]\n', P)
    assert [c.activation for c in s.cases] == ["silu", "sigmoid"]
    inp = generate(s.cases[1])
    assert inp.activation == "sigmoid" and inp.op.activation == "sigmoid"
    assert generate(s.cases[0]).op.activation == "silu"
    assert {c.activation for c in load_suite("quick").cases} == {"silu", "sigmoid"}
    full = load_suite("full").cases
    sig = [c for c in full if c.activation == "sigmoid"]
    assert {c.norm_before_gate for c in sig} == {True, False} and len({c.group for c in sig}) > 2
    assert {c.dtype for c in sig} == {"bf16", "fp16", "fp32"} and any(c.gate_dtype != c.dtype for c in sig)
    assert {c.gate_dist for c in sig} == {"normal", "negative", "saturating", "underflow", "large_positive", "tiny"}


@pytest.mark.parametrize("dist", ["normal", "ones", "positive"])
def test_dy_distributions(dist):
    inp = generate(make_case(shape=(64, 32), dy_dist=dist))
    dy = inp.dy.double()
    if dist == "ones":
        assert torch.all(dy == 1)
    elif dist == "positive":
        assert torch.all(dy >= 0) and dy.std() > 0.1
    else:
        assert (dy < 0).any() and (dy > 0).any()
    assert inp.group_size is None and inp.norm_before_gate


def test_generated_inputs_carry_the_variant():
    inp = generate(make_case(shape=(4, 32), group_size=8, norm_before_gate=False))
    assert inp.group == 8 and inp.norm_before_gate is False and inp.op.group_size == 8


def test_strategy_cases_are_valid():
    from hypothesis import given, settings

    from harness.cases.strategies import cases

    @settings(max_examples=60, deadline=None, database=None)
    @given(cases())
    def check(c):
        assert c.hidden % c.group == 0
        assert Case(**{**c.__dict__}).case_id == c.case_id
        parse_suite(c.to_toml(), P)

    check()


def test_strategies_draw_the_activations_asked_for():
    from hypothesis import given, settings

    from harness.cases.strategies import cases
    seen = set()

    @settings(max_examples=40, deadline=None, database=None)
    @given(cases(), cases(activations=("sigmoid",)))
    def check(c, sig):
        seen.add(c.activation)
        assert sig.activation == "sigmoid"
        assert parse_suite(sig.to_toml(), P).cases[0] == sig            # the printed entry reproduces it

    check()
    assert seen == {"silu", "sigmoid"}


def pinned_cases() -> list[tuple[Case, str]]:
    """Every x, gate, gamma and dy distribution in every dtype, 1- to 3-D, zero-centred or not, and
    a mixed-dtype case with dy in the weight dtype: (case, act_follows)."""
    out, shapes = [], [(3, 64), (2, 3, 96), (160,)]
    for i in range(18):
        dt = DTYPES[i // 6]
        out.append((Case(dtype=dt, gate_dtype=dt, weight_dtype=dt, shape=shapes[i % 3], zero_centered_gamma=bool(i // 3 % 2),
                         eps=1e-5, x_dist=X_DISTS[i % 6], gate_dist=GATE_DISTS[(i + i // 6) % 6],
                         gamma_dist=GAMMA_DISTS[i % 3], seed=i, dy_dist=DY_DISTS[i // 2 % 3]), "x"))
    out.append((Case(dtype="bf16", gate_dtype="fp16", weight_dtype="fp32", shape=(4, 64), zero_centered_gamma=False,
                     eps=1e-6, x_dist="outlier", gate_dist="normal", gamma_dist="outlier", seed=7), "weight"))
    return out


# sha256 of the generated x, gate, weight, dy (dtype, shape, bytes), computed with generate as of
# e4ccc0d: golden stores and baselines are keyed by case id, so a case's inputs never change.
PINNED_INPUTS = {
    "33c3eade419a": "eb51319e8251e6ad", "b86aafa47ef8": "5766bfd4585c9d33", "50d52924a658": "99fa21d5b3d5ee91",
    "029da4218c53": "be0977cd9bbc90df", "da4401e00c8c": "cff54e793b84961d", "9b617dee05b0": "30b3a05401f64747",
    "3a042cbfba32": "2d681c58f341afb7", "7be8940430e1": "67eab4100e353283", "f1753d2c02ab": "4689a303cbce9067",
    "480372394159": "d76e60f6c1c027f9", "6cb51787ad3e": "7b37dfb171a85f49", "a36adb8c86af": "dc05e419190d3ac1",
    "a69fb3c4e739": "4bf814306f9ec653", "e00c2f1087cf": "8a34bb730e2b3814", "844323ade520": "06ca50d4664dfe6c",
    "06f1fb846472": "1d2a4dfdf52a0794", "11d376ead167": "e8a4566a433aa2e9", "f487b6d7bfcd": "d3401a575f7b381d",
    "fc9b6f46078d/weight": "bfd5676aaa67a1e2",
}


def inputs_digest(inp) -> str:
    h = hashlib.sha256()
    for t in (inp.x, inp.gate, inp.weight, inp.dy):
        h.update(f"{t.dtype} {tuple(t.shape)}".encode())
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def test_generated_inputs_are_pinned():
    got = {c.case_id + ("" if follows == "x" else "/" + follows): inputs_digest(generate(c, follows))
           for c, follows in pinned_cases()}
    assert got == PINNED_INPUTS
