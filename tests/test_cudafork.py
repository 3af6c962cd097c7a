"""harness.pipeline.cudafork: CUDA's driver started before a fork, by torch or behind its back (an
interpreter's start-up hook), is seen from the driver's threads; a worker template that finds it
running serves no worker (fresh interpreters do), and a forked implementation's process of a CUDA
sweep says why it cannot run, where a CPU sweep runs; on a GPU, the real driver started by a
sitecustomize: one clear error row per pair in worker processes, a passing sweep inline."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from harness import worker as W
from harness import worker_template as T
from harness.impls.registry import resolve
from harness.pipeline import cudafork
from harness.pipeline.remote import Worker
from harness.pipeline.settings import Settings
from harness.reports.rundir import read_results
from tests.conftest import make_case
from tests.test_worker_template import probe, said

REPO = Path(__file__).resolve().parents[1]
# a thread named as CUDA's driver names its own (Linux: PR_SET_NAME), alive as long as the process
FAKE_DRIVER = """\
import ctypes, threading

def _driver():
    ctypes.CDLL("libc.so.6").prctl(15, b"cuda00001400006")      # 15: PR_SET_NAME
    threading.Event().wait()

threading.Thread(target=_driver, daemon=True).start()
"""


def test_driver_threads_are_read_from_the_task_list(tmp_path):
    for tid, name in (("1", "python"), ("2", "cuda00001400006"), ("3", "cuda-EvtHandlr"), ("4", "pt_cuda")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "comm").write_text(name + "\n")
    (tmp_path / "5").mkdir()                                   # a thread that ended before its comm was read
    assert cudafork.driver_threads(str(tmp_path)) == ["cuda-EvtHandlr", "cuda00001400006"]
    assert cudafork.driver_threads(str(tmp_path / "absent")) == []


def test_a_driver_thread_in_this_process_is_seen(monkeypatch):
    """Seen without torch knowing (its flag held False); on a GPU, this test process's own real
    driver threads may be there already, so the fake one is counted."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    before = cudafork.driver_threads()
    assert (cudafork.cuda_started() == "") == (not before)
    named, stop = threading.Event(), threading.Event()

    def driver():
        ctypes.CDLL("libc.so.6").prctl(15, b"cuda00001400006")
        named.set()
        stop.wait()

    t = threading.Thread(target=driver, daemon=True)
    t.start()
    try:
        assert named.wait(10)
        assert cudafork.driver_threads().count("cuda00001400006") == before.count("cuda00001400006") + 1
        why = cudafork.cuda_started()
        assert why.startswith("CUDA's driver was running (its thread 'cuda") and "start-up hook" in why
    finally:
        stop.set()
        t.join(10)
    end = time.monotonic() + 10                  # the OS thread outlives join() by a moment
    while cudafork.driver_threads() != before and time.monotonic() < end:
        time.sleep(0.01)
    assert cudafork.driver_threads() == before


def test_only_a_cuda_sweep_of_a_process_forked_after_the_driver_is_refused():
    why = "CUDA's driver was running (its thread 'cuda00001400006'), started by an import"
    assert cudafork.unusable("", "cuda:0") == "" and cudafork.unusable(why, "cpu") == ""
    said = cudafork.unusable(why, "cuda:1")
    assert said.startswith("this implementation's process cannot use CUDA") and why in said
    assert "--isolate inline" in said


def hooked_env(tmp_path, probe_value: str) -> dict:
    """A worker's environment whose interpreters run FAKE_DRIVER at start-up (a sitecustomize)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAKE_DRIVER)
    env = {**W.sweep_envs(1, None)[0], "HARNESS_PROBE": probe_value}
    env["PYTHONPATH"] = os.pathsep.join([str(hook)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def test_a_template_whose_start_up_hook_starts_the_driver_serves_no_worker(tmp_path, monkeypatch):
    impl = probe(tmp_path, monkeypatch)
    env = hooked_env(tmp_path, "hooked")
    w = Worker(Settings("cpu"), env)
    try:
        assert said(w, impl).startswith("probe=hooked cuda=None")   # a CPU sweep runs
        assert not w.p.forked                                       # in a fresh interpreter
        t = T._TEMPLATES[T.key_of({"PYTHONUNBUFFERED": "1", **env})]
        assert not t.alive and "no worker can be forked from the template" in t.crashed
        assert "'cuda00001400006'" in t.crashed
    finally:
        w.stop()


def test_a_cuda_sweep_forked_after_the_driver_errs_and_runs_none_of_the_implementations_code(tmp_path,
                                                                                         monkeypatch):
    """The worker's own check (harness.pipeline.serve), on the CPU: the sweep's device says CUDA, so
    the implementation's process refuses each pair before calling anything — not even a `supports`,
    which may probe CUDA (and raise the driver's nameless error there) —; a case outside the
    declared variants still skips."""
    impl = probe(tmp_path, monkeypatch)
    (tmp_path / "probing_mod.py").write_text(
        "from probe_mod import make\n"
        "def probing(case):\n"
        "    raise RuntimeError('CUDA driver initialization failed')\n"
        "make.supports = probing\n")
    probing = resolve("probing=probing_mod:make")
    assert probing.supports is not None
    w = Worker(Settings("cuda"), hooked_env(tmp_path, "cuda-sweep"))
    try:
        plain, grouped = make_case(shape=(4, 32)), make_case(shape=(4, 32), group_size=8)
        got = list(w.run_many([(plain, impl), (grouped, impl), (plain, probing)], 120))
        assert all(r is not None for _, _, r, _ in got), [why for *_, why in got]
        ran, skipped, probed = (r for _, _, r, _ in got)
        for r in (ran, probed):
            assert {c.status for c in r.checks} == {"error"}
            text = r.checks[0].finding.text
            assert text.startswith("this implementation's process cannot use CUDA") and "--isolate inline" in text
            assert "'cuda00001400006'" in text and "probe=" not in text       # nothing of it ran
        assert {c.status for c in skipped.checks} == {"skip"}                  # it takes no group_size
        assert "takes no group_size argument" in skipped.checks[0].finding.text
    finally:
        w.stop()


REAL_DRIVER = """\
import ctypes
ctypes.CDLL("libcuda.so.1").cuInit(0)          # the driver started behind torch's back
"""
ONE_CASE = """
name = "one"
description = "one bf16 case"
[[group]]
dtype = ["bf16"]
shape = [[4, 32]]
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("isolate", ["process", "inline"])
def test_a_start_up_hook_that_starts_the_driver_gets_one_clear_line_per_pair(tmp_path, isolate):
    """On a GPU, with cuInit in every interpreter's sitecustomize: in worker processes every pair is an
    error row that says why and what to do; inline (no fork) the sweep runs and passes."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(REAL_DRIVER)
    (tmp_path / "one.toml").write_text(ONE_CASE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(REPO)])}
    r = subprocess.run([sys.executable, "-m", "harness", "run", "--impl", "torch", "--cases", str(tmp_path / "one.toml"),
                        "--device", "cuda", "--isolate", isolate, "--repeats", "0", "--no-report",
                        "--out", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=300)
    rows = read_results(tmp_path / "out" / "results.csv")
    assert len(rows) > 0
    if isolate == "inline":
        assert r.returncode == 0, r.stderr[-2000:]
        assert set(rows["status"]) == {"pass"}
    else:
        assert r.returncode != 0
        assert set(rows["status"]) == {"error"}
        assert rows["reason"].str.contains("cannot use CUDA: its worker forked it after CUDA had started").all()
        assert rows["reason"].str.contains("'cuda").all() and rows["reason"].str.contains("--isolate inline").all()
