"""Suite files (cases/suite.py): a group expands to the product of its axes, every rejection names
the file and the key in one line, the named suites load, a case's TOML entry round-trips, sharding
partitions a suite in order; the variant axes (group size, norm or gate first, dy, activation)."""
from __future__ import annotations

import pytest

from harness.cases.suite import load_suite, parse_suite, resolve_suite_path
from harness.references.errors import UsageError
from harness.schedule import shard
from tests.conftest import make_case

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
    ('[[case]]\ndtype = "bf16"\nshape = [4, 8]\nseed = -1\n', ("case[0].seed:", "-1")),    # the key it wrote
    ('[[case]]\ndtype = "bf16"\nshape = [4, 8]\nseed = 1\nseeds = [2]\n', ("case[0]", "both seed and seeds")),
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


# ------------------------------------------------------------------ op variants

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


def test_the_readme_examples_of_a_suite_and_a_case_are_what_they_say():
    """README's suite file parses, every case of it; its `replay --case` JSON hashes to the id it
    is written with."""
    import re
    from pathlib import Path

    from harness.cases.params import case_from_json
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    toml = re.search(r"```toml\n(.*?)```", readme, re.S)[1]
    suite = parse_suite(toml, "README.md")
    assert suite.name == "mine" and len(suite.cases) > 1
    assert {c.activation for c in suite.cases} == {"silu", "sigmoid"} and {c.dtype for c in suite.cases} >= {"fp32"}
    case_id, text = re.search(r"harness replay (\w{12}) --case\s+'(\{.*?\})'", readme, re.S).groups()
    assert case_from_json(" ".join(text.split())).case_id == case_id
