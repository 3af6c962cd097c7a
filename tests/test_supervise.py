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


def harness(root, impl: str, *more) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", "run", "--impl", impl, "--cases", str(root / "s.toml"),
                             "--device", "cpu", "--out", str(root / impl.split("=")[0]), "--no-report", *more],
                            cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


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


def test_sigterm_reaches_the_command_and_ends_the_parent_alike(plugins):
    """SIGTERM to the command (a CI job's timeout) ends it as before the watching parent: by
    SIGTERM, no worker left behind."""
    p = harness(plugins, "s=sleeps:slow", "--timeout", "30")
    time.sleep(4)
    p.send_signal(signal.SIGTERM)
    rc, text = ended(p)
    assert rc == -signal.SIGTERM, text
    assert "gave no verdict" not in text


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
