"""harness.compile_caches: TRITON_CACHE_DIR pinned to Triton's default unless the user set it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.compile_caches import pin_triton_cache_dir, triton_default_cache_dir

REPO = Path(__file__).resolve().parents[1]


def test_pins_triton_default_when_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TRITON_HOME", raising=False)
    env = {}
    assert pin_triton_cache_dir(env) == str(tmp_path / ".triton" / "cache") == env["TRITON_CACHE_DIR"]


def test_follows_triton_home(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_HOME", str(tmp_path / "th"))
    assert triton_default_cache_dir() == str(tmp_path / "th" / ".triton" / "cache")


def test_leaves_it_unset_where_the_default_cannot_be_written(monkeypatch, tmp_path):
    home = tmp_path / "ro"
    home.mkdir()
    home.chmod(0o500)                      # read-only home: ~/.triton cannot be created
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("TRITON_HOME", raising=False)
    try:
        if os.access(home, os.W_OK):       # running as root: permissions do not bind
            monkeypatch.setenv("TRITON_HOME", "/proc/no-such-dir")
        env = {}
        assert pin_triton_cache_dir(env) is None and "TRITON_CACHE_DIR" not in env
    finally:
        home.chmod(0o700)


def test_leaves_a_chosen_directory_alone():
    env = {"TRITON_CACHE_DIR": "/somewhere/else"}
    assert pin_triton_cache_dir(env) == "/somewhere/else" and env == {"TRITON_CACHE_DIR": "/somewhere/else"}


def test_the_cli_pins_it_before_any_command(tmp_path):
    # a fresh interpreter: `harness cases` (no compile at all) still leaves the variable set
    code = ("import os, sys; from harness.cli import main; main(['cases']); "
            "print('DIR=' + os.environ.get('TRITON_CACHE_DIR', 'unset'), file=sys.stderr)")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TRITON_HOME")}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"DIR={tmp_path / '.triton' / 'cache'}" in p.stderr
