"""The sweep's parts (harness/runner.py, harness/resume.py, harness/worker.py, reports/rundir.py) one
at a time: worker environments, re-gating on resume (what resume keeps: tests/test_resume.py), the
worker protocol, the lock."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.cases.suite import load_suite
from harness.impls.registry import resolve
from harness.pipeline.settings import Settings
from harness.references.errors import UsageError
from harness.reports.rundir import RunDir, read_results
from harness.resume import regate
from harness.worker import worker_env
from harness.worker import describe_exit
from tests.conftest import make_case, pair_rows, running

HEADER = "impl,rounding,dtype,output,reference,regime,metric,budget\n"


# ------------------------------------------------------------------------------ workers

def test_worker_env_pins_threads_and_gpu(monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    env = worker_env(1, 3, "1")
    assert env["OMP_NUM_THREADS"] == "1" and env["TORCHINDUCTOR_COMPILE_THREADS"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in worker_env(2, 1, None) or os.environ.get("CUDA_VISIBLE_DEVICES")


# ------------------------------------------------------------------------------ regate

def _rows(budgets=(), path="", case=None, impl="torch", repeats=0):
    """One measured pair's rows, in process."""
    case = case or make_case(shape=(4, 32))
    s = Settings("cpu", tuple(budgets), path, repeats=repeats)
    return case, pd.DataFrame(pair_rows(case, resolve(impl), s))


def _tight(tmp_path):
    from harness.budgets import load_budget_file
    f = tmp_path / "tight.csv"
    f.write_text(HEADER + "*,*,*,y,exact,*,ulp,0\n")
    return tuple(load_budget_file(str(f))), str(f)


def test_regate_follows_the_current_budgets_both_ways(tmp_path):
    case, df = _rows()
    impls = {"torch": resolve("torch")}
    assert (df["status"] == "pass").all()
    tight, path = _tight(tmp_path)
    t = regate(df, {case.case_id: case}, impls, Settings("cpu", tight, path, suite_ref="s.toml"))
    y = t["output"].isin(["y", "y_infer"]) & (t["reference"] == "exact")      # y_infer has y's budget
    assert (t[y]["status"] == "fail").all() and (t[~y]["status"] == "pass").all()
    assert t[y]["reason"].str.match(r"y(?:_infer)? ulp error \S+ > budget 0 at \[").all()
    assert (t[y]["budget_source"] == path).all() and t[y]["count_over"].isna().all()
    assert t["replay"].str.contains("--cases s.toml").all() and (t["suite"] == "s.toml").all()
    assert not t["replay"].str.contains("--timeout").any()                # the default timeout is not said
    back = regate(t, {case.case_id: case}, impls, Settings("cpu"))
    assert (back["status"] == "pass").all() and (back["budget_source"] == "default").all()
    assert (back["reason"] == "").all()
    for c in ("max_ulp", "max_scaled_err", "worst_index"):        # measurements untouched
        assert back[c].tolist() == df[c].tolist()


def test_regate_keeps_what_is_not_about_a_budget():
    """The fail_kind column decides what is re-gated; the words are never read back."""
    case, df = _rows()
    df = df.copy()
    for k, (status, kind, why) in enumerate([
            ("fail", "nan_reference", "y reference is NaN at [0,0]: a NaN never passes"),
            ("fail", "non_finite", "y non-finite (nan) at [0,0] where the reference is finite"),
            ("fail", "contract", "gradient missing (None)"),
            ("error", "error", "timed out after 5 s (--timeout); the worker was killed"),
            ("skip", "skip", "not supported"),
            ("fail", "regressed", "regressed: 0.4 vs baseline 0.1 (threshold 0.2)"),
            ("fail", "contract", "y ulp error 9 > budget 0.5 at [0] vs exact"),    # worded like a budget fail
            ("pass", "", "y reference is NaN: words that are not the verdict")]):
        df.loc[k, ["status", "fail_kind", "reason"]] = [status, kind, why]
    out = regate(df, {case.case_id: case}, {"torch": resolve("torch")}, Settings("cpu"))
    assert out["status"].tolist() == ["fail", "fail", "fail", "error", "skip", "pass", "fail", "pass", "pass", "pass"]
    assert out["fail_kind"].tolist() == ["nan_reference", "non_finite", "contract", "error", "skip", "", "contract", "",
                                         "", ""]
    assert out["reason"].tolist()[:5] == df["reason"].tolist()[:5] and out["reason"].tolist()[5::2] == ["", "", ""]


def test_regate_applies_the_repeatability_policy():
    case, df = _rows()
    df = df.copy()
    df["repeatable"], df["differing_elements"] = True, 0
    df.loc[0, ["repeatable", "differing_elements", "differing_index", "differing_first", "differing_later"]] = \
        [False, 3, "1,2", 0.5, 0.25]
    out = regate(df, {case.case_id: case}, {"torch": resolve("torch")}, Settings("cpu"))
    assert out.loc[0, "status"] == "fail" and out.loc[0, "fail_kind"] == "not_repeatable"
    assert "3 elements differ" in out.loc[0, "reason"] and "[1,2]: 0.5, then 0.25" in out.loc[0, "reason"]
    assert (out["status"][1:] == "pass").all()
    again = regate(out, {case.case_id: case}, {"torch": resolve("torch")}, Settings("cpu", allow_nondeterministic=True))
    assert (again["status"] == "pass").all() and (again["fail_kind"] == "").all()


# ------------------------------------------------------------------------------ worker

def test_describe_exit():
    assert "SIGSEGV" in describe_exit(-signal.SIGSEGV)
    assert "SIGKILL" in describe_exit(-signal.SIGKILL) and "out of memory" in describe_exit(-signal.SIGKILL)
    assert "status 3" in describe_exit(3)
    assert "stopped answering" in describe_exit(None)


def test_worker_dies_with_its_parent(tmp_path):
    """A process that starts a worker and is then killed with SIGKILL takes the worker (its judge)
    with it, and the judge the implementation's process."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from harness.pipeline.settings import Settings\n"
        "from harness.pipeline.remote import Worker\n"
        "w = Worker(Settings('cpu'))\n"
        "assert w.start() is None\n"
        "print(w.pid, w.p.impl_pid, flush=True)\n"
        "time.sleep(600)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1])]
                                                      + [os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pid, impl = map(int, p.stdout.readline().split())
        assert running(pid) and running(impl) and impl != pid
        p.kill()
        p.wait()
        import time
        end = time.time() + 15
        while (running(pid) or running(impl)) and time.time() < end:
            time.sleep(0.1)
        assert not running(pid) and not running(impl)
    finally:
        if p.poll() is None:
            p.kill()




# ------------------------------------------------------------------------------ lock

def test_lock_is_reentrant_in_process_and_names_its_holder(tmp_path):
    rd = RunDir(tmp_path).create()
    with rd.lock():
        with rd.lock():                          # the CLI holds it around run_plan, which takes it too
            rd.note_worker(12345)
        text = rd.file(".harness.lock").read_text()
        assert text.startswith(f"pid {os.getpid()} ") and "worker 12345\n" in text
        code = ("import sys\nfrom harness.reports.rundir import RunDir\n"
                "try:\n    RunDir(sys.argv[1]).lock().__enter__()\n"
                "except Exception as e:\n    print(e)\n")
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True).stdout
        assert f"in use by another harness run (pid {os.getpid()} " in out
    with rd.lock():                               # released: free again
        pass


def test_check_outputs(tmp_path):
    rd = RunDir(tmp_path).create()
    rd.check_outputs()
    (tmp_path / "report.html").mkdir()
    with pytest.raises(UsageError, match="report.html is a directory"):
        rd.check_outputs()


def test_nan_values_round_trip(tmp_path):
    rd = RunDir(tmp_path).create()
    _, df = _rows()
    df.loc[0, ["max_ulp", "status"]] = [math.nan, "fail"]           # a NaN never passes
    rd.write_results(df)
    back = read_results(rd.results)
    assert math.isnan(back.loc[0, "max_ulp"]) and back["impl"].tolist() == df["impl"].tolist()


def test_a_prespawned_worker_is_taken_and_spares_are_dropped():
    from harness import worker as W
    from harness.pipeline.remote import Worker
    env = W.sweep_envs(1, None)[0]
    W.prespawn([env, env])
    pids = [p.pid for _, p in W._SPARE]
    try:
        w = Worker(Settings("cpu"), env)
        assert w.start() is None and w.pid in pids             # a spare, not a new process
        w.stop()
    finally:
        W.drop_spares()
    assert not W._SPARE and not any(running(p) for p in pids)


def test_a_spare_is_taken_though_the_command_changed_its_environment_since(monkeypatch):
    """A library the command imports after the spares started may write into os.environ; the
    sweep's workers are built from the environment the spares started with, so they are taken."""
    from harness import worker as W
    from harness.pipeline.remote import Worker
    try:
        W.prespawn([W.sweep_envs(1, None)[0]], preload=("torch",))
        pids = [p.pid for _, p in W._SPARE]
        monkeypatch.setenv("HARNESS_TEST_WRITTEN_BY_A_LIBRARY", "1")
        env = W.sweep_envs(1, None)[0]
        assert "HARNESS_TEST_WRITTEN_BY_A_LIBRARY" not in env
        w = Worker(Settings("cpu"), env)
        assert w.start() is None and w.pid in pids
        w.stop()
    finally:
        W.drop_spares()
    assert "HARNESS_TEST_WRITTEN_BY_A_LIBRARY" in W.sweep_envs(1, None)[0]     # the command's own again


def test_a_spare_is_not_taken_for_another_path_nor_once_its_implementation_process_died():
    """A spare lists its built-ins on the path the command said it would send: for another path a
    fresh worker starts (its imports would come from elsewhere); a spare whose implementation
    process died before its settings is passed over, not started and failed."""
    from harness import worker as W
    from harness.pipeline.remote import Worker
    env = W.sweep_envs(1, None)[0]
    try:
        W.prespawn([env], preload=("torch",), path=["/no/such/folder"] + sys.path)
        W.prespawn([env])
        other_path, plain = (p for _, p in W._SPARE)
        deadline = time.monotonic() + 120
        while not W.descendants(plain.pid) and time.monotonic() < deadline:    # forked once imported
            time.sleep(0.05)
        for child in W.descendants(plain.pid):      # the implementation's process, killed while it waits
            os.kill(child, 9)
        assert plain.impl.poll(60) and not plain.waiting()
        w = Worker(Settings("cpu"), env)
        assert w.start() is None and w.pid not in (other_path.pid, plain.pid)
        w.stop()
    finally:
        W.drop_spares()


def test_results_read_back_one_type_per_column_without_a_warning(tmp_path):
    """A column blank on most rows (`repeatable` on skip rows, here past pandas' first chunk) reads
    back as one type, from the text written and from the file, with no DtypeWarning."""
    import warnings

    from harness.reports.rundir import read_results
    rows = [{"case_id": f"c{k}", "impl": "x", "output": "y", "reference": "exact", "status": "skip",
             "repeatable": True if k % 50 == 0 or k > 40000 else None} for k in range(60000)]
    rd = RunDir(tmp_path).create()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = rd.write_results(pd.DataFrame(rows), read_back=True)
        again = read_results(rd.results)
    for d in (back, again):
        assert len(d) == 60000 and int(d["repeatable"].eq(True).sum()) == 801 + 19999


def test_lines_rendered_as_pairs_arrive_are_the_frame_as_pandas_writes_it(tmp_path):
    """The sweep writes results.csv from each pair's lines as it appended them: the same text,
    byte for byte, as pandas' rendering of the frame of every row, for every kind of cell (NaN, NA
    and None blank, numpy floats, a count as an integral float, text with commas, quotes, a newline),
    and it reads back as that frame."""
    import io

    import numpy as np

    from harness.reports.rundir import read_csv, render_rows, results_header, results_text
    rows = [{"case_id": "c1", "impl": "x", "output": "y", "reference": "exact", "status": "error",
             "reason": 'bad, "quoted",\nnewline; ü', "max_ulp": float("nan"), "max_scaled_err": np.float64(0.1),
             "cr_mismatch": 3.0, "certified": None, "repeatable": True},
            {"case_id": "c1", "impl": "x", "output": "dx", "reference": "model:chain", "status": "fail",
             "max_ulp": 1e-300, "max_scaled_err": float("inf"), "cr_mismatch": 0, "certified": float("nan"), "fail_kind": pd.NA,
             "repeatable": False, "not_a_column": "dropped"},
            {"case_id": "c2", "impl": "x", "output": "y", "reference": "exact", "status": "skip", "reason": "NA",
             "max_ulp": 0.5, "max_scaled_err": -0.0, "cr_mismatch": 12, "certified": 7.0}]
    frame = pd.DataFrame(rows).drop(columns="not_a_column")
    lines = render_rows(rows[:2]) + render_rows(rows[2:])
    assert results_header() + lines == results_text(frame)
    back = RunDir(tmp_path).create().write_rendered([render_rows(rows[2:]), render_rows(rows[:2])])
    assert list(back["output"]) == ["y", "y", "dx"] and back["reason"].iloc[1] == 'bad, "quoted",\nnewline; ü'
    assert back.equals(read_csv(io.StringIO(results_text(frame.iloc[[2, 0, 1]]))))
    assert read_results(tmp_path / "results.csv")["certified"].isna().tolist() == [False, True, True]


def test_cases_given_as_objects_are_checked_and_each_runs_once():
    """The Python API's `cases=[...]`: a repeated case runs once (results.csv holds one line per
    pair and output, as a suite's collapsed duplicates do), in first-given order; anything but a
    Case is a usage error naming its position."""
    from harness.api import plan
    a, b = load_suite("quick").cases[:2]
    assert [c.case_id for c in plan(["torch"], cases=[b, a, b, a], device="cpu").cases] == [b.case_id, a.case_id]
    with pytest.raises(UsageError, match=r"cases\[1\]: a str, expected a Case"):
        plan(["torch"], cases=[a, "quick"], device="cpu")


def test_the_api_refuses_what_the_command_line_refuses_in_gpus(tmp_path, monkeypatch):
    """run_plan checks its GPU list as --gpus does: a repeated index would double one GPU's share
    silently (worker k on GPU k mod N), a negative one names no GPU, nor one past those it sees."""
    from harness.api import plan, run_plan
    from harness.references.errors import UsageError
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    p = plan(["torch"], "quick", "cpu")
    for gpus, said in (((0, 1, 0), "GPU 0 given more than once"), ((-1,), "integers >= 0"),
                       ((1, 2), "sees 2 GPUs, numbered from 0 .CUDA_VISIBLE_DEVICES='3,1'.; 2 is not among them")):
        with pytest.raises(UsageError, match=said):
            run_plan(p, tmp_path / "o", jobs=2, gpus=gpus)
        assert not (tmp_path / "o" / "results.csv").exists()
