"""`harness bisect` end to end on a throwaway git repository holding a plug-in implementation:
good commits, a commit that does not import (skipped), a fix, a precision regression (SiLU in
bf16), more commits. The user's repository must come out exactly as it went in."""
from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from harness.cli import main

# The machine may have no global git identity; fixed dates keep the shas stable.
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}

GOOD_IMPL = """\
from harness.impls.torch_ref import GatedRMSNorm


def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return GatedRMSNorm(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma,
                        dtype=dtype, device=device)


make.rounding = "chain"
"""

# The regression: SiLU evaluated in bf16 instead of float32.
BAD_IMPL = """\
import torch
import torch.nn.functional as F
from harness.impls.torch_ref import GatedRMSNorm


class Fast(GatedRMSNorm):
    def forward(self, x, gate):
        xf = x.float()
        g = self.weight.float() + (1 if self.zero_centered_gamma else 0)
        n = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * g).to(x.dtype)
        return (n.float() * F.silu(gate.to(torch.bfloat16)).float()).to(x.dtype)


def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return Fast(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma,
                dtype=dtype, device=device)


make.rounding = "chain"
"""

SUITE = """\
name = "bisect-tiny"
description = "two small bf16 cases: enough to see a bf16 SiLU, a few seconds per commit"
[[group]]
dtype = ["bf16"]
shape = [[4, 64]]
gate_dist = ["normal"]
seeds = [0, 1]
"""


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def commit(repo: Path, files: dict[str, str], msg: str) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("bisect")
    repo = root / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    c = {}
    c["base"] = commit(repo, {"myimpl.py": GOOD_IMPL, "README": "v0\n"}, "base")
    c["readme1"] = commit(repo, {"README": "v1\n"}, "readme 1")
    c["comment"] = commit(repo, {"myimpl.py": "# tidy\n" + GOOD_IMPL}, "comment")
    c["broken"] = commit(repo, {"myimpl.py": "def make(:\n"}, "wip: does not import")
    c["fixed"] = commit(repo, {"myimpl.py": GOOD_IMPL}, "fix import")
    c["regress"] = commit(repo, {"myimpl.py": BAD_IMPL}, "faster SiLU")
    c["readme2"] = commit(repo, {"README": "v2\n"}, "readme 2")
    c["head"] = commit(repo, {"myimpl.py": "# faster\n" + BAD_IMPL}, "comment 2")
    # An uncommitted edit the user has in flight: bisect must leave it alone.
    (repo / "README").write_text("local edit\n")
    suite = root / "suite.toml"
    suite.write_text(SUITE)
    return repo, c, suite


def snapshot(repo: Path) -> dict:
    refs = git(repo, "for-each-ref", "--format=%(refname)")
    return {"head": git(repo, "rev-parse", "HEAD"), "branch": git(repo, "symbolic-ref", "HEAD"),
            "status": git(repo, "status", "--porcelain"), "refs": refs,
            "worktrees": git(repo, "worktree", "list", "--porcelain"),
            "bisect_files": sorted(p.name for p in (repo / ".git").iterdir() if p.name.startswith("BISECT")),
            "worktree_dirs": sorted(p.name for p in (repo / ".git" / "worktrees").iterdir())
            if (repo / ".git" / "worktrees").exists() else []}


def assert_untouched(repo: Path, before: dict) -> None:
    after = snapshot(repo)
    assert after == before
    assert "refs/bisect" not in after["refs"]
    assert not (repo / ".git" / "refs" / "bisect").exists()
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert after["status"] == "M README"


def test_finds_the_regression_and_leaves_repo_alone(history, capsys):
    repo, c, suite = history
    before = snapshot(repo)
    rc = main(["bisect", str(repo), c["base"], "main", "--impl", "mine=myimpl:make",
               "--cases", str(suite), "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"first bad commit: {c['regress']}" in out
    assert "faster SiLU" in out
    assert "output=y reference=exact" in out          # the failing output is named, with its ULPs
    assert "max_ulp=" in out and "budget=" in out
    assert_untouched(repo, before)


def test_good_that_is_already_bad(history, capsys):
    repo, c, suite = history
    before = snapshot(repo)
    rc = main(["bisect", str(repo), c["regress"], c["head"], "--impl", "mine=myimpl:make",
               "--cases", str(suite)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "already over budget" in out and "output=y" in out
    assert_untouched(repo, before)


def test_failing_build_is_untestable(history, capsys):
    repo, c, suite = history
    before = snapshot(repo)
    rc = main(["bisect", str(repo), c["base"], c["head"], "--impl", "mine=myimpl:make",
               "--cases", str(suite), "--build", "exit 3"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "cannot be tested: --build exited 3" in out
    assert_untouched(repo, before)


def test_not_a_repo(tmp_path, capsys):
    rc = main(["bisect", str(tmp_path), "a", "b", "--impl", "mine=myimpl:make"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "not a git repository" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("good,bad", [("nosuchrev", "main"), ("main", "deadbeef" * 5)])
def test_unknown_revision(history, capsys, good, bad):
    repo, _, suite = history
    rc = main(["bisect", str(repo), good, bad, "--impl", "mine=myimpl:make", "--cases", str(suite)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "not a commit" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("spec", ["torch", "mine=myimpl", "mine=my-impl:make"])
def test_impl_must_be_a_plugin_spec(history, capsys, spec):
    repo, c, suite = history
    rc = main(["bisect", str(repo), c["base"], "main", "--impl", spec, "--cases", str(suite)])
    assert rc == 2
    assert "NAME=MODULE:ATTR" in capsys.readouterr().err


def test_missing_suite_file(history, capsys):
    repo, c, _ = history
    rc = main(["bisect", str(repo), c["base"], "main", "--impl", "mine=myimpl:make",
               "--cases", str(repo / "nope.toml")])
    assert rc == 2
    assert "suite file not found" in capsys.readouterr().err


def test_exit_code_mapping():
    from harness.bisect import map_harness_exit
    assert [map_harness_exit(rc) for rc in (0, 1, 2, 3, 130, -9)] == [0, 1, 125, 125, 128, 128]
