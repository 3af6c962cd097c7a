"""The command line end to end (harness/cli.py, harness/commands/): exit codes, results.csv, --resume,
--shard + merge, report, cases, JUnit. Misbehaving implementations, killed and concurrent runs and
bad files are tests/test_robustness.py's. Most runs here use --isolate inline (what is under test
is the command, not the worker) and --repeats 0 (no timing calls), to stay fast."""
from __future__ import annotations

import pandas as pd
import pytest

from harness.cases.case import Case
from harness.cases.suite import load_suite
from harness.cli import main
from harness.reports.rundir import read_results
from harness.reports.schema import columns
from harness.schedule import shard
from tests.conftest import SILU_IN_BF16

SPEC_COLUMNS = ["case_id", "impl", "rounding", "device", "dtype", "gate_dtype", "weight_dtype", "shape",
                "zero_centered_gamma", "eps", "gate_dist", "output", "reference", "max_ulp", "mean_ulp",
                "max_abs_err", "max_rel_err", "max_scaled_err", "budget_metric", "budget", "status",
                "group_size", "norm_before_gate"]
KEY = ["case_id", "impl", "output", "reference"]
FAST = ["--isolate", "inline", "--repeats", "0", "--no-report", "--device", "cpu"]

TINY = """
name = "tiny"
description = "tiny test suite"
[[group]]
dtype = ["bf16", "fp16"]
shape = [[4, 32]]
gate_dist = ["normal", "negative"]
[[group]]
dtype = ["fp32"]
shape = [[2, 16]]
"""


@pytest.fixture
def suite(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return str(p)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage(code, err):
    assert code == 2, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("harness: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err


def test_run_passing_suite_in_workers(capsys, tmp_path, suite):
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "run", "--impl", "torch", "--cases", suite, "--device", "cpu",
                         "--out", out_dir, "--no-report", "--repeats", "1")
    assert code == 0, out + err
    assert "harness: 50 pass, 0 fail, 0 error, 0 skip" in out
    df = read_results(out_dir / "results.csv")
    assert list(df.columns[:len(SPEC_COLUMNS)]) == SPEC_COLUMNS and set(df.columns) == set(columns())
    assert len(df) == 5 * 10 and not df.duplicated(KEY).any()
    assert set(df["status"]) == {"pass"} and set(df["impl"]) == {"torch"} and set(df["device"]) == {"cpu"}
    assert set(df["output"]) == {"y", "y_infer", "dx", "dgate", "dweight"}
    assert set(df["reference"]) == {"exact", "model:chain"}
    assert list(dict.fromkeys(df["case_id"])) == [c.case_id for c in load_suite(suite).cases]   # suite order
    assert df["replay"].str.startswith("harness replay ").all() and (df["impl_seconds"] > 0).all()
    t = pd.read_csv(out_dir / "timing.csv").set_index("stage")["seconds"]
    assert {"wall", "references", "analysis", "impl:torch"} <= set(t.index) and "harness: time " in err


def test_run_precision_bug_exits_1(capsys, tmp_path, monkeypatch):
    (tmp_path / "silu_bf16_plugin.py").write_text(SILU_IN_BF16)
    monkeypatch.syspath_prepend(str(tmp_path))
    s = tmp_path / "s.toml"
    s.write_text('[[group]]\ndtype = ["bf16"]\nshape = [[8, 64]]\ngate_dist = ["normal", "negative"]\n')
    code, out, err = run(capsys, "run", "--impl", "bad=silu_bf16_plugin:silu_in_bf16", "--cases", s, "--out", tmp_path / "o",
                         *FAST)
    assert code == 1, out + err
    df = read_results(tmp_path / "o" / "results.csv")
    y = df[(df["output"] == "y") & (df["reference"] == "model:chain")]
    assert (y["status"] == "fail").any() and "FAIL" in out and "replay: harness replay" in out


@pytest.mark.parametrize("argv_fn", [
    lambda s, t: ["run", "--impl", "no-such-impl", "--cases", s, "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", t + "/missing.toml", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", "no-such-suite", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--shard", "0/2", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--shard", "3/2", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--shard", "half", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--shard-by", "shape", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--jobs", "0", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--timeout", "0", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--timeout", "inf", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--timeout", "1e12", "--out", t],     # past what a wait takes
    lambda s, t: ["run", "--impl", "torch", "--cases", "hypothesis", "--timeout", "nan", "--out", t],
    lambda s, t: ["identify", "--impl", "torch", "--cases", s, "--timeout", "0", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--threads", "0", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--gpus", "a", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--gpus", "0,1,0", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--repeats", "-1", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--impl", "torch", "--cases", s, "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--bogus-flag", "--out", t],
    lambda s, t: ["run", "--cases", s, "--out", t],
    lambda s, t: ["frobnicate"],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--baseline", t + "/nowhere", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--budgets", t + "/nowhere.csv", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", "hypothesis", "--resume", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--max-examples", "3", "--out", t],   # hypothesis's only
    lambda s, t: ["run", "--impl", "torch", "--cases", s, "--seed", "1", "--out", t],
    lambda s, t: ["run", "--impl", "torch", "--cases", "hypothesis", "--max-examples", "0", "--out", t],
])
def test_usage_errors_exit_2(capsys, tmp_path, suite, argv_fn):
    code, out, err = run(capsys, *argv_fn(suite, str(tmp_path / "o")))
    assert_usage(code, err)
    assert not (tmp_path / "o" / "results.csv").exists()


def test_bad_suite_content_exits_2(capsys, tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('[[group]]\ndtype = ["bf17"]\nshape = [[4, 8]]\n')
    code, out, err = run(capsys, "run", "--impl", "torch", "--cases", p, "--out", tmp_path / "o")
    assert_usage(code, err)
    assert str(p) in err and "dtype" in err


def test_device_cuda_without_cuda_exits_2(capsys, tmp_path, suite):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, out, err = run(capsys, "run", "--impl", "torch", "--cases", suite, "--device", "cuda",
                         "--out", tmp_path / "o")
    assert_usage(code, err)
    assert "cuda" in err.lower()


def test_unavailable_impl_exits_2(capsys, tmp_path, suite):
    import torch
    if torch.cuda.is_available():
        pytest.skip("te may be available with CUDA")
    code, out, err = run(capsys, "run", "--impl", "te", "--cases", suite, "--device", "cpu", "--out", tmp_path / "o")
    assert_usage(code, err)
    assert "te" in err


def test_resume_after_a_kill_mid_write(capsys, tmp_path, suite):
    out_dir = tmp_path / "out"
    args = ["run", "--impl", "torch", "--impl", "torch-fused", "--cases", suite, "--out", out_dir, *FAST]
    assert run(capsys, *args)[0] == 0
    full = read_results(out_dir / "results.csv")
    assert len(full) == 5 * 2 * 10
    lines = (out_dir / "results.csv").read_text().splitlines(keepends=True)
    # header + 3 finished pairs + 3 rows of the 4th pair + a torn half line (killed mid-write)
    kept = lines[: 1 + 3 * 10 + 3] + [lines[1 + 3 * 10 + 3][:40]]
    (out_dir / "results.csv").write_text("".join(kept))
    code, out, err = run(capsys, *args, "--resume")
    assert code == 0, out + err
    assert f"[{5 * 2 - 3}/{5 * 2 - 3}]" in err                  # the 3 finished pairs were not run again
    df = read_results(out_dir / "results.csv")
    assert not df.duplicated(KEY).any() and len(df) == len(full)
    assert set(map(tuple, df[KEY].values)) == set(map(tuple, full[KEY].values))
    assert set(df["status"]) == {"pass"}
    # nothing left to do: a second resume keeps everything and runs no pair
    code, out, err = run(capsys, *args, "--resume")
    assert code == 0 and len(read_results(out_dir / "results.csv")) == len(full) and "[1/" not in err


def test_a_new_run_replaces_the_old_one(capsys, tmp_path, suite):
    out_dir = tmp_path / "out"
    assert run(capsys, "run", "--impl", "torch-fused", "--cases", suite, "--out", out_dir, *FAST)[0] == 0
    one = tmp_path / "one.toml"
    one.write_text('[[group]]\ndtype = ["bf16"]\nshape = [[4, 8]]\n')
    assert run(capsys, "run", "--impl", "torch", "--cases", one, "--out", out_dir, *FAST)[0] == 0
    df = read_results(out_dir / "results.csv")
    assert set(df["impl"]) == {"torch"} and len(df) == 10
    assert len(pd.read_csv(out_dir / "pair-timing.csv")) == 1


def test_shard_and_merge_equal_unsharded(capsys, tmp_path, suite):
    cases = list(load_suite(suite).cases)
    assert all(shard(cases, k, 2) for k in (1, 2))        # both shards non-empty for this suite
    base = ["run", "--impl", "torch", "--cases", suite, *FAST]
    assert run(capsys, *base, "--out", tmp_path / "all")[0] == 0
    for k in (1, 2):
        code, out, err = run(capsys, *base, "--shard", f"{k}/2", "--out", tmp_path / f"s{k}")
        assert code == 0, out + err
    s1, s2 = (read_results(tmp_path / d / "results.csv") for d in ("s1", "s2"))
    assert not set(s1["case_id"]) & set(s2["case_id"])
    code, out, err = run(capsys, "merge", tmp_path / "s1", tmp_path / "s2", "--out", tmp_path / "merged",
                         "--cases", suite)
    assert code == 0, out + err
    merged = read_results(tmp_path / "merged" / "results.csv").set_index(KEY).sort_index()
    whole = read_results(tmp_path / "all" / "results.csv").set_index(KEY).sort_index()
    assert merged.index.equals(whole.index)
    assert (merged["max_ulp"].values == whole["max_ulp"].values).all()
    pairs = [pd.read_csv(tmp_path / d / "pair-timing.csv", dtype=str) for d in ("merged", "all")]
    assert sorted(zip(pairs[0].case_id, pairs[0].impl)) == sorted(zip(pairs[1].case_id, pairs[1].impl))
    # a shard missing: merge with the suite refuses
    code, out, err = run(capsys, "merge", tmp_path / "s1", "--out", tmp_path / "m1", "--cases", suite)
    assert_usage(code, err)
    assert "missing" in err


def test_merge_refuses_bad_inputs(capsys, tmp_path, suite):
    a = tmp_path / "a"
    assert run(capsys, "run", "--impl", "torch", "--cases", suite, "--out", a, *FAST)[0] == 0
    assert_usage(*run(capsys, "merge", a, a, "--out", tmp_path / "m")[::2])            # overlapping
    lines = (a / "results.csv").read_text().splitlines(keepends=True)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "results.csv").write_text("".join(lines[:-3]))                              # a pair cut short
    code, out, err = run(capsys, "merge", cut, "--out", tmp_path / "m2")
    assert_usage(code, err)
    assert "interrupted" in err
    assert_usage(*run(capsys, "merge", tmp_path / "nope", "--out", tmp_path / "m3")[::2])


def test_bad_results_inputs_exit_2(capsys, tmp_path):
    empty = tmp_path / "e"
    empty.mkdir()
    (empty / "results.csv").write_text("")
    assert_usage(*run(capsys, "merge", empty, "--out", tmp_path / "m")[::2])
    assert_usage(*run(capsys, "report", empty)[::2])
    assert_usage(*run(capsys, "report", tmp_path / "nowhere")[::2])
    foreign = tmp_path / "f"
    foreign.mkdir()
    (foreign / "results.csv").write_text("a,b\n1,2\n")
    assert_usage(*run(capsys, "budgets", "regen", "--from", foreign, "-o", tmp_path / "b.csv")[::2])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_usage(*run(capsys, "run", "--impl", "torch", "--out", blocker / "sub", "--no-report")[::2])


def test_cases_lists_suites_and_cases(capsys, suite):
    code, out, err = run(capsys, "cases")
    assert code == 0 and any(ln.split()[0] == "quick" for ln in out.splitlines() if ln.strip())
    code, out, err = run(capsys, "cases", suite)
    assert code == 0
    assert {ln.split()[0] for ln in out.splitlines()[:-1]} == {c.case_id for c in load_suite(suite).cases}
    assert out.splitlines()[-1] == "5 cases"
    assert_usage(*run(capsys, "cases", "no-such-suite")[::2])


def test_a_junit_file_lost_after_the_check_is_one_line_and_the_rest_written(capsys, tmp_path, suite, monkeypatch):
    """--junit's directory is checked before the sweep; where writing fails after it anyway, the
    command says so naming --junit (exit 2), and report.html is still written."""
    from harness.api import Results

    def lost(self, path, data=None):
        raise FileNotFoundError(2, "No such file or directory", str(path) + ".tmp")
    monkeypatch.setattr(Results, "write_junit", lost)
    o, j = tmp_path / "o", tmp_path / "junit.xml"
    code, out, err = run(capsys, "run", "--impl", "torch", "--cases", suite, "--out", o, "--junit", j,
                         "--isolate", "inline", "--repeats", "0", "--device", "cpu")
    assert_usage(code, err)
    assert f"--junit {j}: cannot write it (No such file or directory)" in err
    assert (o / "report.html").stat().st_size > 0 and (o / "results.csv").is_file()


def test_junit_and_report(capsys, tmp_path, suite):
    j = tmp_path / "sub" / "junit.xml"
    o = tmp_path / "o"
    code, out, err = run(capsys, "run", "--impl", "torch", "--cases", suite, "--out", o, "--junit", j,
                         "--isolate", "inline", "--repeats", "0", "--device", "cpu")
    assert code == 0, out + err
    import xml.etree.ElementTree as ET
    root = ET.parse(j).getroot()
    assert len(root.findall(".//testcase")) >= 5
    assert not root.findall(".//failure") and not root.findall(".//error")
    import torch
    html = (o / "report.html").read_text()
    env = html[html.index('<section id="environment">'):]                  # gathered while the sweep ran
    assert "<th>torch</th><td" in env and torch.__version__ in env and "<th>impl torch</th>" in env
    (o / "report.html").unlink()
    code, out, err = run(capsys, "report", o)
    assert code == 0 and (o / "report.html").stat().st_size > 0


def test_numeric_looking_case_id_survives_resume_and_baseline(capsys, tmp_path):
    # a seed whose case id is all digits: pandas must not turn it into a number
    from dataclasses import replace
    c = Case("bf16", "bf16", "bf16", (4, 32), False, 1e-5, "standard", "normal", "one", 0)
    c = next(replace(c, seed=s) for s in range(5000) if replace(c, seed=s).case_id.isdigit())
    suite = tmp_path / "one.toml"
    suite.write_text(c.to_toml() + "\n")
    cid = load_suite(str(suite)).cases[0].case_id
    assert cid.isdigit()
    out = tmp_path / "o"
    args = ["run", "--impl", "torch", "--cases", suite, "--out", out, *FAST]
    assert run(capsys, *args)[0] == 0
    assert run(capsys, *args, "--resume")[0] == 0
    assert run(capsys, *args, "--baseline", out)[0] == 0
    df = read_results(out / "results.csv")
    assert len(df) == 10 and (df["case_id"] == cid).all()


def test_hypothesis_run_writes_results_summary_and_report(capsys, tmp_path):
    out = tmp_path / "h"
    code, o, e = run(capsys, "run", "--impl", "torch", "--cases", "hypothesis", "--max-examples", "2",
                     "--seed", "5", "--device", "cpu", "--out", out, "--isolate", "inline")
    assert code == 0, o + e
    for f in ("results.csv", "summary.csv", "report.html"):
        assert (out / f).stat().st_size > 0, f


# ------------------------------------------------------------------ the command as a process

def _harness(*argv, stdout=None, unbuffered=False):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run([sys.executable, *argv], stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120, env=env)


def test_a_closed_pipe_is_a_quiet_exit_0():
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-m", "harness", "cases", "quick"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()                      # the reader goes away (`| head -1`)
    assert p.wait(timeout=120) == 0
    assert b"Traceback" not in p.stderr.read()


def test_a_closed_pipe_changes_neither_the_verdict_nor_the_files(tmp_path):
    import subprocess
    import sys
    suite = tmp_path / "s.toml"
    suite.write_text('[[group]]\ndtype = ["bf16"]\nshape = [[8, 64]]\n')
    out = tmp_path / "o"
    # unbuffered, as a CI log is: the first print after the reader left raises (buffered, a run this
    # short meets the closed pipe only at the last flush, after its files)
    p = subprocess.run(f"PYTHONUNBUFFERED=1 {sys.executable} -m harness run --impl silu-in-bf16=harness.mutants:silu_in_bf16 "
                       f"--cases {suite} --device cpu --isolate inline --repeats 0 --out {out} "
                       f"--junit {tmp_path / 'j.xml'} | true", shell=True, stderr=subprocess.PIPE, text=True,
                       timeout=120, executable="/bin/bash")           # `| true`: the reader is gone at once
    assert "Traceback" not in p.stderr, p.stderr
    for name in ("results.csv", "summary.csv", "report.html"):
        assert (out / name).is_file(), name
    assert (tmp_path / "j.xml").is_file()
    pipefail = subprocess.run(f"set -o pipefail; PYTHONUNBUFFERED=1 {sys.executable} -m harness report {out} | true", shell=True,
                              executable="/bin/bash", capture_output=True, text=True, timeout=120)
    assert pipefail.returncode == 0, pipefail.stderr
    run = subprocess.run(f"set -o pipefail; PYTHONUNBUFFERED=1 {sys.executable} -m harness run --impl "
                         f"silu-in-bf16=harness.mutants:silu_in_bf16 --cases {suite} --device cpu --isolate inline "
                         f"--repeats 0 --no-report --out {tmp_path / 'o2'} | true", shell=True, executable="/bin/bash",
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr                              # the verdict, not the pipe's end


def test_output_that_cannot_be_written_is_not_exit_0():
    with open("/dev/full", "w") as full:
        buffered = _harness("-m", "harness", "cases", stdout=full)                    # fails at the last flush
        unbuffered = _harness("-m", "harness", "cases", stdout=full, unbuffered=True)  # at the first print
    for r in (buffered, unbuffered):          # one line, exit 2, whether the first print or the last flush failed
        assert r.returncode == 2 and "No space left on device: '<stdout>'" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert "Exception ignored" not in r.stderr


def test_listing_a_suite_imports_no_torch():
    code = ("import sys\nfrom harness.cli import main\ntry:\n    main(['cases', 'quick'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)\n")
    p = _harness("-c", code)
    assert p.returncode == 0 and " cases" in p.stdout and p.stderr.strip().endswith("False"), p.stderr


def test_a_profiler_still_reports():
    # the command ends with os._exit (harness.worker.exit_now), except under a profiler or tracer
    p = _harness("-m", "cProfile", "-s", "tottime", "-m", "harness", "cases")
    assert p.returncode == 0, p.stderr
    assert "quick" in p.stdout and "function calls" in p.stdout
