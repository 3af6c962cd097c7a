"""`harness run --jobs N` (harness/jobs.py): the same results as one process, in suite order; a
worker that dies keeps what the others finished and makes the run exit 2."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from harness.cli import main
from tests.test_cli import TINY

REPO = Path(__file__).resolve().parents[1]

# A plug-in that kills its worker process on the fp32 cases (hidden 16), and is the eager chain
# everywhere else.
DIES = """
import os
from harness.impls.torch_ref import chain
def make(h, **kw):
    if h == 16:
        os._exit(3)
    return chain(h, **kw)
"""


@pytest.fixture
def suite(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return str(p)


@pytest.fixture
def child_path(monkeypatch, tmp_path):
    """Workers are new processes: they find the repo and the test's plug-ins through PYTHONPATH."""
    parts = [str(tmp_path), str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(parts))
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize("by", [["--shard-by", "case"], []])            # [] = by shape
def test_jobs_equal_one_process(capsys, tmp_path, suite, child_path, by):
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["run", "--impl", "torch", "--impl", "torch-fused", "--cases", suite, "--device", "cpu",
                 "--out", str(one), "--no-report"]) == 0
    assert main(["run", "--impl", "torch", "--impl", "torch-fused", "--cases", suite, "--device", "cpu",
                 "--out", str(two), "--no-report", "--jobs", "2", *by]) == 0
    err = capsys.readouterr().err
    a = pd.read_csv(one / "results.csv", dtype=str)
    b = pd.read_csv(two / "results.csv", dtype=str)
    pd.testing.assert_frame_equal(a, b)                      # same rows, same order, same text
    assert sorted(p.name for p in (two / "jobs").iterdir()) == ["1-of-2", "2-of-2", "split.txt"]
    t = pd.read_csv(two / "timing.csv").set_index("stage")["seconds"]
    assert {"wall", "references", "analysis", "impl:torch", "impl:torch-fused"} <= set(t.index)
    assert (t > 0).all() and "harness: time " in err
    for out, jobs in ((one, None), (two, {1, 2})):                    # one line per pair, its stages
        pt = pd.read_csv(out / "pair-timing.csv", dtype={"case_id": str})
        assert sorted(zip(pt.case_id, pt.impl)) == sorted(zip(a.case_id, a.impl))[::len(a) // len(pt)]
        assert len(pt) == len(a) // 8 and (pt.impl_seconds > 0).all() and (pt.analysis > 0).all()
        assert pt.groupby("case_id").references.apply(lambda r: (r > 0).sum()).eq(1).all()
        assert pt.references.sum() == pytest.approx(pd.read_csv(out / "timing.csv").set_index("stage")
                                                    ["seconds"]["references"], abs=1e-4)
        assert jobs is None or set(pt.job) == jobs


def test_dead_worker_keeps_the_rest_and_exits_2(capsys, tmp_path, suite, child_path):
    (tmp_path / "dies_plugin.py").write_text(DIES)
    out = tmp_path / "o"
    code = main(["run", "--impl", "d=dies_plugin:make", "--cases", suite, "--device", "cpu", "--out", str(out),
                 "--no-report", "--jobs", "3"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "did not finish" in err
    df = pd.read_csv(out / "results.csv", dtype=str)
    assert len(df) and set(df["shape"]) == {"4x32"}           # the bf16/fp16 cases finished
    assert (df["status"] == "pass").all()


@pytest.mark.parametrize("extra", [["--jobs", "0"], ["--jobs", "2", "--shard", "1/2"]])
def test_jobs_usage_errors(capsys, tmp_path, suite, extra):
    code = main(["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert code == 2 and "--jobs" in err and "Traceback" not in err


@pytest.mark.parametrize("n", [1, 3, 7, 16])
def test_shard_by_shape_keeps_compile_keys_together(n):
    from harness.cases.suite import load_suite
    from harness.runner import compile_key, shard
    cases = list(load_suite("full").cases)
    parts = [shard(cases, k, n, by="shape") for k in range(1, n + 1)]
    ids = [c.case_id for p in parts for c in p]
    assert sorted(ids) == sorted(c.case_id for c in cases)             # disjoint and complete
    owners: dict = {}
    for k, p in enumerate(parts):
        for c in p:
            assert owners.setdefault(compile_key(c), k) == k             # one key, one shard
    order = {c.case_id: i for i, c in enumerate(cases)}
    for p in parts:
        assert [order[c.case_id] for c in p] == sorted(order[c.case_id] for c in p)
    # dealt to the least loaded: shard costs (KEY_COST_IN_CASES per key + its cases) differ by at
    # most the costliest key
    from harness.runner import KEY_COST_IN_CASES
    cost = [len({compile_key(c) for c in p}) * KEY_COST_IN_CASES + len(p) for p in parts]
    biggest = max(KEY_COST_IN_CASES + sum(compile_key(c) == key for c in cases) for key in owners)
    assert max(cost) - min(cost) <= biggest


def test_shard_by_needs_shard_or_jobs(capsys, tmp_path, suite):
    code = main(["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(tmp_path),
                 "--shard-by", "shape"])
    assert code == 2 and "--shard-by" in capsys.readouterr().err


# A worker that dies of an uncaught exception exits 1, like one whose checks failed: the parent
# must notice the missing cases. This plug-in makes the harness's own reference build raise.
CRASHES = """
import sys
import harness.runner as R
from harness.impls.torch_ref import chain as make
_build = R.build
def _raising(inp):
    if inp.hidden == 16:
        raise RuntimeError("boom")
    return _build(inp)
if "--shard" in sys.argv:          # only in a worker, never in the test process that imports it too
    R.build = _raising
"""


def test_worker_crash_with_exit_1_is_a_failed_job(capsys, tmp_path, suite, child_path):
    (tmp_path / "crash_plugin.py").write_text(CRASHES)
    out = tmp_path / "o"
    # a first, complete run in the same directory: nothing of it may survive into the next one
    assert main(["run", "--impl", "c=tests.test_jobs:_chain", "--cases", suite, "--device", "cpu", "--out", str(out),
                 "--no-report", "--jobs", "3"]) == 0
    code = main(["run", "--impl", "c=crash_plugin:make", "--cases", suite, "--device", "cpu", "--out", str(out),
                 "--no-report", "--jobs", "3"])
    err = capsys.readouterr().err
    assert code == 2 and "did not finish" in err, err
    df = pd.read_csv(out / "results.csv", dtype=str)
    assert set(df["shape"]) == {"4x32"}                        # the crashed fp32 cases are not there


def test_resume_needs_the_same_split(capsys, tmp_path, suite, child_path):
    out = tmp_path / "o"
    assert main(["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(out), "--no-report",
                 "--jobs", "2"]) == 0
    assert main(["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(out), "--no-report",
                 "--jobs", "2", "--resume"]) == 0                 # nothing left to do: same results
    code = main(["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(out), "--no-report",
                 "--jobs", "3", "--resume"])
    assert code == 2 and "holds a run of 2 jobs, by shape, not 3 jobs" in capsys.readouterr().err
    code = main(["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(out), "--no-report",
                 "--jobs", "2", "--shard-by", "case", "--resume"])     # same N, another split
    assert code == 2 and "not 2 jobs, by case" in capsys.readouterr().err
    before = pd.read_csv(out / "results.csv", dtype=str)
    (out / "jobs" / "split.txt").unlink()                  # a run from before split.txt: resumable
    assert main(["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(out), "--no-report",
                 "--jobs", "2", "--resume"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv", dtype=str), before)


def test_resume_after_the_suite_grew_has_no_duplicates(tmp_path, suite, child_path):
    """The by-shape split deals keys over all cases: a new case can move a key to another worker,
    which reruns it; the rows the first owner still holds must not be merged a second time."""
    out, fresh = tmp_path / "o", tmp_path / "fresh"
    args = ["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--no-report", "--jobs", "2"]
    assert main([*args, "--out", str(out)]) == 0
    owners = {p.name: set(pd.read_csv(p / "results.csv", dtype=str)["case_id"]) for p in (out / "jobs").glob("*-of-2")}
    Path(suite).write_text(Path(suite).read_text() + '[[group]]\ndtype = ["fp16"]\nshape = [[3, 8]]\nseeds = [5, 6, 7]\n')
    assert main([*args, "--out", str(out), "--resume"]) == 0
    moved = {p.name: set(pd.read_csv(p / "results.csv", dtype=str)["case_id"]) for p in (out / "jobs").glob("*-of-2")}
    assert any(moved[k] - owners[k] and owners[k] & set().union(*(moved[j] for j in moved if j != k))
               for k in owners), "the grown suite should move a key between workers (else this test shows nothing)"
    assert main([*args, "--out", str(fresh)]) == 0
    got, want = (pd.read_csv(d / "results.csv", dtype=str) for d in (out, fresh))
    key = ["case_id", "impl", "output", "reference"]
    assert not got.duplicated(key).any() and len(got) == len(want)
    assert list(got[key].itertuples(index=False)) == list(want[key].itertuples(index=False))
    pt = pd.read_csv(out / "pair-timing.csv", dtype={"case_id": str})
    assert not pt.duplicated(["case_id", "impl"]).any()


def _chain(h, **kw):
    from harness.impls.torch_ref import chain
    return chain(h, **kw)


def test_report_shows_where_the_time_went(capsys, tmp_path, suite):
    out = tmp_path / "o"
    assert main(["run", "--impl", "torch", "--cases", suite, "--device", "cpu", "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    t = pd.read_csv(out / "timing.csv").set_index("stage")["seconds"]
    assert f"references {t['references']:.1f} s" in html and "implementations" in html and "mpmath" in html
    pt = pd.read_csv(out / "pair-timing.csv")
    worst = pt.assign(t=pt.references + pt.impl_seconds + pt.analysis).nlargest(1, "t").iloc[0]
    assert "slowest pairs" in html and f"torch {worst.label}: {worst.t:.1f} s (mostly " in html


def test_workers_share_the_cores(monkeypatch):
    from harness.jobs import _child_env
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setattr("harness.jobs._cores", lambda: 16)
    env = _child_env(4)
    assert env["OMP_NUM_THREADS"] == "4" and env["TORCHINDUCTOR_COMPILE_THREADS"] == "4"
    assert _child_env(32)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")                          # the user's choice stands
    assert _child_env(4)["OMP_NUM_THREADS"] == "2"


def test_a_damaged_worker_file_is_left_out_with_one_line(tmp_path):
    from harness.jobs import read_or_none
    empty = tmp_path / "pair-timing.csv"
    empty.write_text("")                                      # killed between open and write
    lines: list[str] = []
    assert read_or_none(pd.read_csv, empty, lines.append) is None
    assert len(lines) == 1 and "unreadable" in lines[0] and "EmptyDataError" in lines[0]
    assert read_or_none(pd.read_csv, tmp_path / "missing.csv", lines.append) is None and len(lines) == 1


def test_slowest_pairs_on_hand_made_and_damaged_files(tmp_path):
    from harness.runner import slowest_pairs
    p = tmp_path / "pair-timing.csv"
    p.write_text("case_id,label,impl,references,impl_seconds,analysis,mpmath\n"
                 "01,a 4x8,fla,0.0,30.0,1.0,0.0\n02,b 4x8,torch,2.0,0.1,0.5,0.4\n03,c 4x8,torch,0.1,0.1,9.0,8.0\n")
    assert slowest_pairs(p, top=2) == "fla a 4x8: 31.0 s (mostly implementation); torch c 4x8: 9.2 s (mostly analysis)"
    p.write_text("")
    assert slowest_pairs(p) == "" and slowest_pairs(tmp_path / "none.csv") == ""
    p.write_text("case_id,label\n01,a\n")                      # columns missing
    assert slowest_pairs(p) == ""
