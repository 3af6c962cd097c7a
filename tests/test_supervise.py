"""The `harness` command watched by its parent (harness.supervise): what a plug-in's module runs in
the command's own process — code at import, a thread, an exit hook — cannot end the command with a
code of its own. Each session is the installed command in a subprocess, as a user types it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import SILU_IN_BF16
from tests.test_pytest_plugin import SUITE          # a bf16 and an fp16 case of 4x64

GOOD = """
from harness.impls.torch_ref import chain


def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
"""

SLOW = """
import time


def slow(hidden_size, **kw):
    time.sleep(60)
"""

PLUGINS = {
    # ends the process at import, status 0: no verdict, no file
    "quits_at_import.py": "import os\nos._exit(0)\n",
    # a kernel over budget whose exit hook ends the process with status 0 after the verdict (1)
    "zeroes_the_exit.py": SILU_IN_BF16 + "\nmake = silu_in_bf16\n\nimport atexit, os\natexit.register(os._exit, 0)\n",
    # a thread that ends the process with status 0 while a pair is still running
    "quits_mid_sweep.py": SLOW + "\nimport os, threading\n\nthreading.Timer(2.0, os._exit, (0,)).start()\nmake = slow\n",
    "fine.py": GOOD,
    "sleeps.py": SLOW,
}


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    root = tmp_path_factory.mktemp("supervise")
    for name, body in PLUGINS.items():
        (root / name).write_text(body)
    (root / "s.toml").write_text(SUITE)
    return root


def harness(root, impl: str, *more, sigchld=signal.SIG_DFL) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", "run", "--impl", impl, "--cases", str(root / "s.toml"),
                             "--device", "cpu", "--out", str(root / impl.split("=")[0]), "--no-report", *more],
                            cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGCHLD, sigchld))


def ended(p: subprocess.Popen, timeout=120) -> tuple[int, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out + err


@pytest.mark.parametrize("impl,code,says", [
    ("q=quits_at_import:make", 2, "ended before it finished (exit status 0) and gave no verdict"),
    ("z=zeroes_the_exit:make", 1, "FAIL  z "),
    ("m=quits_mid_sweep:make", 2, "ended before it finished (exit status 0) and gave no verdict"),
    ("f=fine:make", 0, "harness: 20 pass, 0 fail"),
])
def test_the_exit_code_is_the_commands_whatever_its_process_ran(plugins, impl, code, says):
    rc, text = ended(harness(plugins, impl, "--timeout", "30"))
    assert rc == code and says in text, text
    if code == 2:
        assert text.count("harness: error:") == 1


def _workers(root, name: str) -> list[int]:
    lock = root / name / ".harness.lock"
    deadline = time.time() + 60
    while time.time() < deadline:
        got = [int(ln.split()[1]) for ln in (lock.read_text().splitlines() if lock.exists() else [])
               if ln.startswith("worker ")]
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("no worker started")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig,code,says,sigchld", [
    (signal.SIGTERM, -signal.SIGTERM, "", signal.SIG_DFL),        # ended as before the watching parent
    (signal.SIGINT, 130, "harness: interrupted", signal.SIG_DFL),  # sent to the parent alone (kill -INT), passed on
    (signal.SIGTERM, -signal.SIGTERM, "", signal.SIG_IGN),        # a caller that ignores SIGCHLD: the same
])
def test_a_signal_to_the_command_reaches_it_and_leaves_no_worker(plugins, sig, code, says, sigchld):
    p = harness(plugins, "s=sleeps:slow", "--timeout", "30", sigchld=sigchld)
    pids = _workers(plugins, "s")
    time.sleep(1)
    p.send_signal(sig)
    rc, text = ended(p)
    assert rc == code and says in text and "gave no verdict" not in text, text
    deadline = time.time() + 15
    while any(map(_alive, pids)) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, pids))


def test_help_and_usage_errors_keep_their_codes():
    for argv, code in ((["--help"], 0), (["run", "--help"], 0), (["nonsense"], 2), (["run"], 2)):
        p = subprocess.run([sys.executable, "-m", "harness", *argv], capture_output=True, text=True, timeout=120)
        assert p.returncode == code, (argv, p.stderr)
        assert "gave no verdict" not in p.stderr and (code or p.stderr == "")


WATCHED = """
import atexit, os, signal, sys, time
import harness.supervise as s
from harness.worker import exit_now
s.GRACE = 1.0
how = sys.argv[1]


def main():
    if how == "hangs-after-its-verdict":
        atexit.register(time.sleep, 600)
        return 1
    if how == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "odd-signal":
        os.kill(os.getpid(), 40)
    return 0
exit_now(s.watched(main, exit_now, lambda: None))
"""


@pytest.mark.parametrize("how,code,says", [
    ("hangs-after-its-verdict", 1, ""),          # its code stands; its exit hooks ended after GRACE
    ("killed", 2, "killed by SIGKILL (out of memory? the kernel's OOM killer sends SIGKILL) before its verdict"),
    ("odd-signal", 2, "killed by signal 40 before its verdict"),
])
def test_the_parent_says_how_the_command_ended(tmp_path, how, code, says):
    (tmp_path / "w.py").write_text(WATCHED)
    t0 = time.time()
    p = subprocess.run([sys.executable, str(tmp_path / "w.py"), how], capture_output=True, text=True, timeout=120)
    assert p.returncode == code and says in p.stderr, p.stderr
    assert time.time() - t0 < 30


def test_a_process_already_threaded_at_start_runs_the_command_unwatched(plugins, tmp_path):
    """A start-up hook that starts a thread (as one starting CUDA's driver does): no fork then — a
    child could not use CUDA or could inherit the thread's lock —, the command runs as it is."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import threading, time\n"
                                           "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    p = subprocess.Popen([sys.executable, "-m", "harness", "run", "--impl", "f=fine:make", "--cases",
                          str(plugins / "s.toml"), "--device", "cpu", "--out", str(tmp_path / "o"), "--no-report"],
                         cwd=plugins, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(plugins)])},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rc, text = ended(p)
    assert rc == 0 and "harness: 20 pass, 0 fail" in text, text
    # the command ran in the process started, not in a child of it: the lock names that one
    assert (tmp_path / "o" / ".harness.lock").read_text().startswith(f"pid {p.pid} ")


def test_the_lock_names_the_command_as_started_when_watched(plugins, tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "harness", "run", "--impl", "f=fine:make", "--cases",
                          str(plugins / "s.toml"), "--device", "cpu", "--out", str(tmp_path / "o"), "--no-report"],
                         cwd=plugins, env={**os.environ, "PYTHONPATH": str(plugins)}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    rc, text = ended(p)
    assert rc == 0, text
    assert (tmp_path / "o" / ".harness.lock").read_text().startswith(f"pid {p.pid} ")
