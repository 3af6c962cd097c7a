"""The processes of a command, and what outlives it: a second run into a directory a first one holds,
kill -9 of a sweep, a plug-in's detached grandchild, a plug-in import that never returns. The same
misbehaving plug-ins as tests/test_robustness.py (its `plug` fixture), driven as subprocesses, since
processes are the point."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.reports.rundir import read_results
from tests.conftest import running
from tests.test_robustness import REPO, TWO, calls, one_line_usage, plug, run  # noqa: F401 — plug: the fixture


def _env(cwd, **more) -> dict:
    """This environment, with `cwd` (the plug-ins) and the repository first on PYTHONPATH."""
    path = [str(cwd), str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), **more)


# ---------------------------------------------------------------------- an import that hangs

def _tagged(tag: str) -> list[int]:
    """The running processes whose environment holds `tag`."""
    found = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and tag.encode() in Path(f"/proc/{d}/environ").read_bytes() and running(int(d)):
                found.append(int(d))
        except OSError:
            pass
    return found


def test_an_import_that_hangs_is_one_line_within_the_timeout_and_leaves_no_worker(plug):
    """The command imports a plug-in's module itself, to read its declarations, where no pair's
    timeout covers it: a module whose import never returns ends `run` (which started its workers
    first) and `replay` after --timeout with one line and exit 2, nothing written, and every process
    below them — their workers, and the child the module started before it hung — with them."""
    (plug / "hangs_on_import.py").write_text(
        "import os, subprocess, time\n"
        "child = subprocess.Popen(['sleep', '777'])\n"
        "open(os.environ['CHILD_PIDS'], 'a').write(f'{child.pid}\\n')\n"
        "time.sleep(1000)\n")
    tag, pids = f"{os.getpid()}-{time.time()}", plug / "children.txt"
    env = _env(plug, HARNESS_TEST_TAG=tag, CHILD_PIDS=str(pids))
    common = ["--impl", "h=hangs_on_import:make", "--device", "cpu", "--timeout", "1"]
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, "-m", "harness", *args, *common], cwd=plug, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for args in (["run", "--cases", "two.toml", "--out", "o"], ["replay", "0" * 12, "--cases", "two.toml"])]
    try:
        for p in procs:
            _, stderr = p.communicate(timeout=120)
            assert p.returncode == 2, stderr
            said = [ln for ln in stderr.splitlines() if ln.startswith("harness: ")]
            assert said == ["harness: --impl h=hangs_on_import:make: loading it did not finish within 1 s "
                            "(--timeout): does its module's import hang?"], stderr
    finally:
        for p in procs:
            p.kill()
    assert time.time() - t0 < 60 and not (plug / "o").exists()
    started = [int(x) for x in pids.read_text().split()]
    assert len(started) == 2                              # one child of each command's import
    _wait_for(lambda: not _tagged(f"HARNESS_TEST_TAG={tag}") and not any(running(c) for c in started), 15,
              "the commands' workers and the module's children to end with them")


# ---------------------------------------------------------------------- 5, 6: two runs, kill -9

def _harness(*argv, cwd):
    return subprocess.Popen([sys.executable, "-m", "harness", *map(str, argv)], cwd=cwd, env=_env(cwd),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(cond, seconds: float, what: str):
    end = time.time() + seconds
    while time.time() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


THREE = """
[[group]]
dtype = ["bf16"]
shape = [[4, 32]]
gate_dist = ["normal", "negative"]
[[group]]
dtype = ["fp32"]
shape = [[2, 16]]
"""


def test_second_run_fails_naming_the_first_and_kill_9_leaves_no_worker(capsys, plug):
    """Run A (--jobs 2: the hidden-32 cases on one worker, the hidden-16 case on the other; every
    case but the first waits while SLOW exists) is in its sweep, its first pair written, both
    workers waiting; run B into the same --out fails at once naming A.
    kill -9 A: both workers die with it; --resume finishes without duplicates; merge refuses
    duplicated keys."""
    (plug / "three.toml").write_text(THREE)
    (plug / "SLOW").write_text("")
    out = plug / "o"
    args = ["run", "--impl", "s=evil:fwd_slow", "--cases", "three.toml", "--device", "cpu", "--out", "o",
            "--no-report", "--jobs", "2", "--repeats", "0"]
    a = _harness(*args, cwd=plug)
    try:
        lock = out / ".harness.lock"
        workers = lambda: [int(ln.split()[1]) for ln in (lock.read_text().splitlines() if lock.exists() else [])
                           if ln.startswith("worker ")]

        def two_pairs_and_a_waiting_worker():
            if a.poll() is not None:
                raise AssertionError(f"run A ended: {a.communicate()}")
            return len(workers()) == 2 and (out / "results.csv").exists() and \
                len(read_results(out / "results.csv")) == 10 and calls(plug, "slow") == 2
        _wait_for(two_pairs_and_a_waiting_worker, 240, "run A's two workers and its first pair")
        assert lock.read_text().startswith(f"pid {a.pid} ")

        t0 = time.time()
        b = _harness("run", "--impl", "torch", "--cases", "three.toml", "--device", "cpu", "--out", "o",
                     cwd=plug)
        b_out, b_err = b.communicate(timeout=120)
        assert b.returncode == 2, b_out + b_err
        assert one_line_usage(b.returncode, b_err) and f"in use by another harness run (pid {a.pid} " in b_err
        assert time.time() - t0 < 60

        pids = workers()
        assert len(pids) == 2 and all(running(p) for p in pids)
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
        _wait_for(lambda: not any(running(p) for p in pids), 15, f"workers {pids} to die with their parent")
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    before = read_results(out / "results.csv")
    seconds = dict(zip(zip(before["case_id"], before["impl"]), before["pair_seconds"]))
    (plug / "SLOW").unlink()

    code, o, e = run(capsys, "run", "--impl", "s=evil:fwd_slow", "--cases", plug / "three.toml", "--device", "cpu",
                     "--out", out, "--no-report", "--jobs", "2", "--repeats", "0", "--resume")
    assert code == 0, o + e
    df = read_results(out / "results.csv")
    assert len(df) == 30 and not df.duplicated(["case_id", "impl", "output", "reference"]).any()
    assert (df["status"] == "pass").all()
    assert all(seconds[k] == s for k, s in zip(zip(df["case_id"], df["impl"]), df["pair_seconds"]) if k in seconds)
    # the two killed pairs ran again (a forward, the inference path's two, and the second call that
    # checks repeatability, each)
    assert calls(plug, "slow") == 2 + 2 * 4

    # merge refuses duplicated keys: the same directory twice, or one results.csv holding a pair twice
    code, o, e = run(capsys, "merge", out, out, "--out", plug / "m1")
    assert one_line_usage(code, e) and "more than one" in e
    dup = plug / "dup"
    dup.mkdir()
    lines = (out / "results.csv").read_text().splitlines(keepends=True)
    (dup / "results.csv").write_text("".join(lines + lines[1:9]))
    code, o, e = run(capsys, "merge", dup, "--out", plug / "m2")
    assert one_line_usage(code, e)


# ---------------------------------------------------------------------- a detached grandchild

GRANDCHILD = """
import os, time
from harness.impls.torch_ref import chain

def make(h, **kw):
    child = os.fork()
    if child == 0:                        # detached: its own session, its parent gone
        os.setsid()
        if os.fork() == 0:
            with open(os.environ["GRANDCHILDREN"], "a") as f:
                f.write(f"{os.getpid()}\\n")
            time.sleep(600)
        os._exit(0)
    os.waitpid(child, 0)
    return chain(h, **kw)
"""


def test_a_detached_grandchild_neither_holds_the_pipe_nor_outlives_the_command(tmp_path):
    """A plug-in's setsid + fork grandchild inherits the worker's output: the caller's pipe is
    never it (the command drains the worker's own), and the command ends it (its worker's
    implementation process is a subreaper, and stopping a worker ends its whole tree)."""
    (tmp_path / "detacher.py").write_text(GRANDCHILD)
    (tmp_path / "two.toml").write_text(TWO)
    pids = tmp_path / "pids"
    env = _env(tmp_path, GRANDCHILDREN=str(pids))
    p = subprocess.run([sys.executable, "-m", "harness", "run", "--impl", "g=detacher:make", "--cases", "two.toml",
                        "--device", "cpu", "--out", "o", "--no-report", "--repeats", "0"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    left = [int(v) for v in pids.read_text().split()]
    assert len(left) == 2 and not any(running(v) for v in left)
