"""A case as a value (cases/case.py): its id is stable across processes and depends on every
parameter (the later axes at their defaults keep the ids of before), its regime and label; the
hypothesis strategies draw valid cases whose printed entries reproduce them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.cases.case import Case
from harness.cases.suite import load_suite, parse_suite
from tests.conftest import make_case

ROOT = Path(__file__).resolve().parents[1]
P = "suites/my.toml"


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


def test_regime():
    assert make_case().regime == "normal"
    assert make_case(gate_dist="negative").regime == "normal"
    assert make_case(x_dist="zero_row").regime == "normal"
    assert make_case(x_dist="outlier").regime == "normal"
    for kw in (dict(x_dist="large"), dict(x_dist="tiny"), dict(x_dist="subnormal"),
               dict(gate_dist="saturating"), dict(gate_dist="underflow"), dict(eps=0.1), dict(eps=0.3)):
        assert make_case(**kw).regime == "extreme", kw
    assert make_case(eps=0.099).regime == "normal"


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
