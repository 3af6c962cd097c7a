"""Every path that takes a case from outside checks it once (cases.case: param_problem, from_params):
suite files, `harness replay --case` JSON, merge inputs and baselines. A bad value is one line
naming it and the fix, exit 2, before any work; merge refuses shards of different devices or schema
versions; a baseline's metric column holds numbers; a case too big for the machine's memory is an
`error` row (in a sweep and in replay), never a crash."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.cases.case import Case
from harness.cases.suite import parse_suite
from harness.references.errors import UsageError
from harness.reports.schema import SCHEMA_VERSION
from tests.conftest import make_case
from tests.test_robustness import TWO, one_line_usage, run

REPO = Path(__file__).resolve().parents[1]
GOOD = make_case()
PARAMS = {**GOOD.params(), "shape": [4, 32]}


# ------------------------------------------------------------------------------ suites

@pytest.mark.parametrize("eps,needle", [("inf", "inf"), ("nan", "nan"), ("-inf", "-inf"), ("1e-50", "1e-50"),
                                        ("1e39", "1e+39"), ("-1.0", "-1.0")])
def test_a_suite_eps_that_verifies_nothing_is_refused(eps, needle):
    """eps = inf made every output 0, so that a SiLU-in-bf16 kernel passed."""
    with pytest.raises(UsageError) as ei:
        parse_suite(f'[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\neps = [{eps}]\n', "s.toml")
    msg = str(ei.value)
    assert msg.startswith("s.toml: group[0].eps: ") and needle in msg and "e.g. 1e-5" in msg


def test_a_suite_with_an_infinite_eps_exits_2_before_the_sweep(capsys, tmp_path):
    (tmp_path / "s.toml").write_text('[[case]]\ndtype = "bf16"\nshape = [4, 32]\neps = inf\n')
    code, _, err = run(capsys, "run", "--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu",
                       "--out", tmp_path / "o")
    assert one_line_usage(code, err) and "case[0].eps: inf" in err
    assert not (tmp_path / "o" / "results.csv").exists()


def test_every_case_field_has_its_check():
    """A new axis is checked at every boundary once it has its line in PARAM_CHECKS."""
    from dataclasses import fields

    from harness.cases.case import PARAM_CHECKS
    assert list(PARAM_CHECKS) == [f.name for f in fields(Case)]


def test_an_invalid_case_is_a_bug_of_whoever_builds_it():
    with pytest.raises(ValueError, match="eps: inf"):
        make_case(eps=float("inf"))
    with pytest.raises(ValueError, match="group_size: 7 does not divide the hidden size 32"):
        make_case(group_size=7)
    assert Case(**PARAMS).case_id == GOOD.case_id                                 # shape as a list or tuple
    assert Case(**{**PARAMS, "eps": 1}).case_id == Case(**{**PARAMS, "eps": 1.0}).case_id      # one spelling


# ------------------------------------------------------------------------------ replay --case

@pytest.mark.parametrize("change,needle", [
    ({"dtype": "bf99"}, "dtype: 'bf99' is not one of fp32, fp16, bf16"),
    ({"shape": [4, -8]}, "shape: [4, -8] has a size <= 0"),
    ({"shape": []}, "shape: [] is not a list of 1 to 4 integers"),
    ({"shape": [4, 32.5]}, "shape: [4, 32.5] is not a list"),
    ({"group_size": 7}, "group_size: 7 does not divide the hidden size 32"),
    ({"group_size": 0}, "group_size: 0 is not a positive integer"),
    ({"eps": -1}, "eps: -1 is not a positive, finite number"),
    ({"eps": "1e-5"}, "eps: '1e-5' is not a number"),
    ({"norm_before_gate": "no"}, "norm_before_gate: 'no' is not true/false"),
    ({"zero_centered_gamma": 1}, "zero_centered_gamma: 1 is not true/false"),
    ({"x_dist": "gaussian"}, "x_dist: 'gaussian' is not one of standard"),
    ({"dy_dist": "zeros"}, "dy_dist: 'zeros' is not one of normal, ones, positive"),
    ({"activation": "swish"}, "activation: 'swish' is not one of silu, sigmoid"),
    ({"seed": -3}, "seed: -3 is not a non-negative integer"),
    ({"flavour": "x"}, "flavour: unknown parameter"),
    ({"dtype": None}, "dtype: None is not one of"),
])
def test_replay_case_json_bad_values_exit_2_naming_them(capsys, change, needle):
    params = {**PARAMS, **change}
    code, _, err = run(capsys, "replay", GOOD.case_id, "--impl", "torch", "--device", "cpu",
                       "--case", json.dumps(params))
    assert one_line_usage(code, err), err
    assert f"--case: {needle}" in err, err


@pytest.mark.parametrize("text,needle", [("{", "not JSON"), ("[1, 2]", "expected the case's parameters"),
                                         ('{"dtype": "bf16"}', "gate_dtype: missing"),
                                         (json.dumps({**PARAMS, "eps": float("inf")}), "eps: inf")])
def test_replay_case_json_that_is_no_case_exits_2(capsys, text, needle):
    code, _, err = run(capsys, "replay", GOOD.case_id, "--impl", "torch", "--device", "cpu", "--case", text)
    assert one_line_usage(code, err) and needle in err, err


# ------------------------------------------------------------------------------ merge and baselines

@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One real run of two cases (inline: only its rows are wanted): its results rows (as text, to be
    edited) and suite file."""
    d = tmp_path_factory.mktemp("sweep")
    (d / "two.toml").write_text(TWO)
    from harness.cli import main
    assert main(["run", "--impl", "torch", "--cases", str(d / "two.toml"), "--device", "cpu", "--out",
                 str(d / "o"), "--no-report", "--repeats", "0", "--isolate", "inline"]) == 0
    return pd.read_csv(d / "o" / "results.csv", dtype=str, keep_default_na=False), d / "two.toml"


def _write(df: pd.DataFrame, d: Path) -> str:
    d.mkdir(parents=True, exist_ok=True)
    df.to_csv(d / "results.csv", index=False)
    return str(d)


def _shards(df, tmp_path, edit_b=None):
    first = df["case_id"] == df["case_id"].iloc[0]
    b = df[~first].copy()
    if edit_b:
        edit_b(b)
    return _write(df[first], tmp_path / "a"), _write(b, tmp_path / "b")


@pytest.mark.parametrize("edit,needle", [
    (lambda b: b.__setitem__("device", "cuda"), "different devices (cpu, cuda)"),
    (lambda b: b.__setitem__("schema_version", "1"), f"mix schema versions 1, {SCHEMA_VERSION}"),
    (lambda b: b.__setitem__("eps", "-1.0"), "eps: -1.0 is not a positive"),
    (lambda b: b.__setitem__("norm_before_gate", "maybe"), "norm_before_gate: 'maybe' is not true/false"),
    (lambda b: b.__setitem__("seed", "5"), "its parameters hash to"),
    (lambda b: b.loc.__setitem__((b.index[-1], "harness_version"), ""), "has no harness version: a torn or partial"),
    (lambda b: b.loc.__setitem__(b.index[-1], b.iloc[0]), "is in it twice: not one run's results.csv"),
])
def test_merge_refuses_shards_that_do_not_add_up(capsys, tmp_path, sweep, edit, needle):
    df, _ = sweep
    a, b = _shards(df, tmp_path, edit)
    code, _, err = run(capsys, "merge", a, b, "--out", tmp_path / "m")
    assert one_line_usage(code, err) and needle in err, err
    assert not (tmp_path / "m" / "results.csv").exists()


def test_merge_refuses_shards_all_of_another_schema_version(capsys, tmp_path, sweep):
    df, _ = sweep
    old = df.assign(schema_version="1")
    a, b = _shards(old, tmp_path)
    code, _, err = run(capsys, "merge", a, b, "--out", tmp_path / "m")
    assert one_line_usage(code, err) and f"schema version 1, this harness writes {SCHEMA_VERSION}" in err, err


@pytest.mark.parametrize("column,value,needle", [
    ("max_ulp", "n/a", "column max_ulp: 'n/a' is not a number"),
    ("max_scaled_err", "0.5 ulp", "column max_scaled_err: '0.5 ulp' is not a number"),
    ("eps", "-1.0", "eps: -1.0 is not a positive"),
    ("shape", "4x0", "shape: [4, 0] has a size <= 0"),
])
def test_a_baseline_that_is_not_numbers_or_cases_exits_2_before_the_sweep(capsys, tmp_path, sweep, column,
                                                                          value, needle):
    df, suite = sweep
    bad = df.copy()
    bad.loc[bad.index[3], column] = value
    if column in ("eps", "shape"):           # a case's parameter: every row of that case
        bad.loc[bad["case_id"] == bad.loc[bad.index[3], "case_id"], column] = value
    base = _write(bad, tmp_path / "base")
    out = tmp_path / "o"
    code, _, err = run(capsys, "run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", out,
                       "--baseline", base)
    assert one_line_usage(code, err) and needle in err, err
    assert not (out / "results.csv").exists()


# ------------------------------------------------------------------------------ too big for memory

BIG = Case("fp32", "fp32", "fp32", (65536, 16384), False, 1e-5, "standard", "normal", "one", 0)  # 8 GB in float64
ADDRESS_SPACE = 4 << 30          # what the command may map: torch loads, the big case's inputs cannot


def _limited(*argv, cwd):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    return subprocess.run([sys.executable, "-m", "harness", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300, preexec_fn=limit, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_a_case_too_big_for_memory_is_an_error_row_and_the_sweep_goes_on(tmp_path):
    (tmp_path / "s.toml").write_text(BIG.to_toml() + '\n[[case]]\ndtype = "bf16"\nshape = [4, 32]\n')
    r = _limited("run", "--impl", "torch", "--cases", "s.toml", "--device", "cpu", "--out", "o", "--no-report",
                 "--repeats", "0", cwd=tmp_path)
    assert r.returncode == 1 and "internal error" not in r.stderr, r.stderr[-2000:]
    df = pd.read_csv(tmp_path / "o" / "results.csv", dtype={"case_id": str})
    big = df[df["case_id"] == BIG.case_id]
    assert len(big) == 10 and set(big["status"]) == {"error"}
    assert big["reason"].str.contains("can't allocate memory").all()
    assert set(df[df["case_id"] != BIG.case_id]["status"]) == {"pass"}


def test_replay_of_a_case_too_big_for_memory_is_an_error_row(tmp_path):
    r = _limited("replay", BIG.case_id, "--impl", "torch", "--device", "cpu", "--case",
                 json.dumps(BIG.params()), cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
    assert r.stdout.count("ERROR out of memory") == 10 and "0 pass, 0 fail, 10 error" in r.stdout
