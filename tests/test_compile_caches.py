"""harness.compile_caches: TRITON_CACHE_DIR pinned to Triton's default unless the user set it."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.compile_caches import pin_triton_cache_dir, triton_default_cache_dir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def triton_installed(monkeypatch):
    """The CPU CI has no Triton: pretend it is there (pinning only looks it up)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "triton" else real(name, *a))


def test_nothing_pinned_or_created_without_triton(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TRITON_HOME", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    env = {}
    assert pin_triton_cache_dir(env) is None and env == {} and not (tmp_path / ".triton").exists()


def test_pins_triton_default_when_unset(monkeypatch, tmp_path, triton_installed):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TRITON_HOME", raising=False)
    env = {}
    assert pin_triton_cache_dir(env) == str(tmp_path / ".triton" / "cache") == env["TRITON_CACHE_DIR"]


def test_follows_triton_home(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_HOME", str(tmp_path / "th"))
    assert triton_default_cache_dir() == str(tmp_path / "th" / ".triton" / "cache")


def test_leaves_it_unset_where_the_default_cannot_be_written(monkeypatch, tmp_path, triton_installed):
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
    # a fresh interpreter: `harness cases` (no compile at all) leaves the variable set where
    # Triton is importable (here a stand-in package on the path), and unset where it is not
    fake = tmp_path / "fake"
    (fake / "triton").mkdir(parents=True)
    (fake / "triton" / "__init__.py").write_text("")
    code = ("import os, sys; from harness.cli import main; main(['cases']); "
            "print('DIR=' + os.environ.get('TRITON_CACHE_DIR', 'unset'), file=sys.stderr)")
    base = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TRITON_HOME")}
    runs = [(str(fake) + os.pathsep + str(REPO), f"DIR={tmp_path / '.triton' / 'cache'}")]
    if importlib.util.find_spec("triton") is None:
        runs.append((str(REPO), "DIR=unset"))
    for path, want in runs:
        env = dict(base, HOME=str(tmp_path), PYTHONPATH=path)
        p = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert want in p.stderr, (want, p.stderr[-500:])
