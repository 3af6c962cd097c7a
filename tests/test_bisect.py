"""`harness bisect` end to end on a throwaway git repository with a src/ layout: good commits, a
commit that does not import (skipped), a fix, a precision regression (SiLU in bf16), one more bad
commit (so the first bad commit is not BAD itself). The history is as short as keeps git bisect
judging the commit that does not import: every judged commit costs a judge and its worker.
The user's checkout (at the regression) is also what an editable install's finder — put first on
sys.meta_path, as some build backends do — would import: each step must import its own commit.
The user's repository must come out exactly as it went in, with no bytecode written into it — run
as on a user's machine, where Python writes bytecode (this image sets PYTHONDONTWRITEBYTECODE=1,
which would hide a process that writes some). The main bisection runs the installed command
(`python -m harness bisect`), as a kernel repository's CI would; the others call harness.cli.main
in this process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from tests.conftest import SILU_IN_BF16, commit, git

GOOD_IMPL = """\
from harness.impls.torch_ref import chain


def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)


make.rounding = "chain"
make.supports = lambda case: "no fp16 kernel" if case.dtype == "fp16" else None
"""

# The regression: SiLU evaluated in bf16 instead of float32.
BAD_IMPL = SILU_IN_BF16 + """

make = silu_in_bf16
make.rounding = "chain"
make.supports = lambda case: "no fp16 kernel" if case.dtype == "fp16" else None
"""

SUITE = """\
name = "bisect-tiny"
description = "two small bf16 cases (enough to see a bf16 SiLU) and an fp16 one the plug-in skips"
[[group]]
dtype = ["bf16"]
shape = [[4, 64]]
seeds = [0, 1]
[[case]]
dtype = "fp16"
shape = [4, 64]
"""

# What an editable install's finder does (setuptools appends its own to sys.meta_path; others put
# theirs first): map the package to the user's checkout, whatever sys.path says.
EDITABLE_FINDER = """\
import importlib.machinery
import sys


class _Editable:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname == "mykernel":
            return importlib.machinery.PathFinder.find_spec(fullname, [{src!r}])
        return None


sys.meta_path.insert(0, _Editable)
"""


NORM = "src/mykernel/norm.py"


@pytest.fixture(autouse=True)
def writes_bytecode(monkeypatch):
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("bisect")
    repo = root / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    c = {}
    c["base"] = commit(repo, {NORM: GOOD_IMPL, "src/mykernel/__init__.py": "", "README": "v0\n"}, "base")
    c["comment"] = commit(repo, {NORM: "# tidy\n" + GOOD_IMPL, "README": "v1\n"}, "comment")
    c["broken"] = commit(repo, {NORM: "def make(:\n"}, "wip: does not import")
    c["fixed"] = commit(repo, {NORM: GOOD_IMPL}, "fix import")
    c["regress"] = commit(repo, {NORM: BAD_IMPL}, "faster SiLU")
    c["head"] = commit(repo, {NORM: "# faster\n" + BAD_IMPL, "README": "v2\n"}, "comment 2")
    # An uncommitted edit the user has in flight: bisect must leave it alone.
    (repo / "README").write_text("local edit\n")
    suite = root / "suite.toml"
    suite.write_text(SUITE)
    # An "installed" mykernel: its metadata (the entry point) and an editable finder onto the checkout.
    site = root / "site"
    info = site / "mykernel-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mykernel\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[harness.impls]\nmykernel = mykernel.norm:make\n")
    (site / "sitecustomize.py").write_text(EDITABLE_FINDER.format(src=str(repo / "src")))
    return repo, c, suite, site


def bytecode(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("__pycache__"))


def snapshot(repo: Path) -> dict:
    refs = git(repo, "for-each-ref", "--format=%(refname)")
    return {"head": git(repo, "rev-parse", "HEAD"), "branch": git(repo, "symbolic-ref", "HEAD"),
            "status": git(repo, "status", "--porcelain", "--ignored"), "refs": refs,
            # the repository, and the "installed" site whose sitecustomize every step imports
            "bytecode": bytecode(repo.parent),
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
    assert after["status"] == "M README" and after["bytecode"] == []


def test_the_editable_finder_would_shadow(history, tmp_path):
    """The control: with the finder installed, the worktree first on PYTHONPATH is not enough. It
    imports the user's checkout, so it must write no bytecode there: the bisect tests that share the
    repository check that bisect leaves none."""
    repo, _, _, site = history
    other = tmp_path / "other"
    (other / "mykernel").mkdir(parents=True)
    (other / "mykernel" / "__init__.py").write_text("")
    got = subprocess.run([sys.executable, "-B", "-c", "import mykernel; print(mykernel.__file__)"], check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": f"{other}{os.pathsep}{site}"}).stdout.strip()
    assert got == str(repo / "src" / "mykernel" / "__init__.py")
    assert bytecode(repo) == []


def test_finds_the_regression_by_entry_point_and_leaves_repo_alone(history):
    repo, c, suite, site = history
    before = snapshot(repo)
    # the installed command; PYTHONPATH: the entry point's metadata for the parent, the editable
    # finder in every step. -B: this process's own imports from `site` (the stand-in for
    # site-packages, whose bytecode pip writes at install) are not bisect's doing; every process
    # bisect starts must write none
    p = subprocess.run([sys.executable, "-B", "-m", "harness", "bisect", str(repo), c["base"], "main", "--impl", "mykernel",
                        "--cases", str(suite), "--device", "cpu"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(site)})
    rc, out, err = p.returncode, p.stdout, p.stderr
    assert rc == 0, out + err
    assert out.startswith(f"first bad commit: {c['regress']}\n"), out
    assert "faster SiLU" in out
    assert "decided by: FAIL  mykernel" in out and "worst element: " in out, out
    assert "replay: harness replay " in out and "--impl mykernel=mykernel.norm:make" in out
    assert f"PYTHONPATH=src{os.pathsep}." in out and "imported src/mykernel/norm.py of the commit" in out
    assert f"skipped {c['broken'][:12]}: --impl mykernel: importing 'mykernel.norm' raised SyntaxError" in out
    assert len(out.splitlines()) <= 8, out                 # a verdict, not the whole sweep
    verdicts = [ln for ln in err.splitlines() if ln.startswith("bisect: ")]
    # every judged commit imported its own file (never the checkout the finder points at)
    judged = [ln for ln in verdicts if " good: " in ln or " bad: " in ln]
    assert judged and all(ln.endswith("(imported src/mykernel/norm.py of the commit)") for ln in judged)
    good = next(ln for ln in verdicts if ln.startswith(f"bisect: {c['base'][:12]} good: "))
    assert "2 of 3 cases within budget, 1 skipped" in good           # the fp16 case gives skip rows: not a failure
    bad = next(ln for ln in verdicts if ln.startswith(f"bisect: {c['head'][:12]} bad: "))
    assert "(pair 1 of 3)" in bad                          # stopped at the first failing check
    assert_untouched(repo, before)


def test_good_that_is_already_bad(history, capsys):
    repo, c, suite, _ = history
    before = snapshot(repo)
    rc = main(["bisect", str(repo), c["regress"], c["head"], "--impl", "mine=mykernel.norm:make",
               "--cases", str(suite), "--path", "src"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "already over budget" in out and "decided by: FAIL  mine " in out and "PYTHONPATH=src;" in out
    assert_untouched(repo, before)


def test_judged_against_the_budget_file_given(history, capsys, tmp_path, monkeypatch):
    """--budgets reaches every commit's judge: with a budget file loose enough for the bf16 SiLU
    (given by a relative path), the regression and BAD are within budget — nothing to bisect —
    even though every commit's --build overwrites the file with junk: the steps judge the file as
    the command found it. A malformed one is refused before any commit runs."""
    repo, c, suite, _ = history
    before = snapshot(repo)
    monkeypatch.chdir(tmp_path)
    loose = tmp_path / "budgets.csv"
    loose.write_text("impl,rounding,math,dtype,output,reference,regime,metric,budget\n"
                     "mine,*,*,*,*,*,*,ulp,1e6\nmine,*,*,*,*,exact,*,scaled,1e6\n")
    rc = main(["bisect", str(repo), c["regress"], c["head"], "--impl", "mine=mykernel.norm:make",
               "--cases", str(suite), "--path", "src", "--budgets", "budgets.csv",
               "--build", f"echo junk > {loose}"])
    out = capsys.readouterr().out
    assert rc == 1 and f"BAD {c['head']} ({c['head'][:12]}) is within budget; nothing to bisect" in out, out
    assert loose.read_text() == "junk\n"                 # the builds ran
    bad = tmp_path / "bad.csv"
    bad.write_text("impl,rounding,math,dtype,output,reference,regime,metric,budget\nmine,*,*,*,*,*,*,ulp,lots\n")
    rc = main(["bisect", str(repo), c["regress"], c["head"], "--impl", "mine=mykernel.norm:make",
               "--cases", str(suite), "--budgets", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and str(bad) in err and len(err.strip().splitlines()) == 1, err
    assert_untouched(repo, before)


def test_failing_build_is_untestable(history, capsys):
    repo, c, suite, _ = history
    before = snapshot(repo)
    rc = main(["bisect", str(repo), c["base"], c["head"], "--impl", "mine=mykernel.norm:make",
               "--cases", str(suite), "--build", "exit 3"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "cannot be tested: --build exited 3" in out
    assert_untouched(repo, before)


def test_a_judge_that_exits_is_no_verdict(tmp_path):
    """os._exit(0) from the plug-in (here at import) ends the judge with status 0 but no judge.json:
    the commit is skipped, never good."""
    from harness.bisect import SKIP, run_step
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"quitter.py": "import os\nos._exit(0)\n"}, "quits")
    lines = []
    code = run_step(repo, "q=quitter:make", "quick", "cpu", tmp_path / "results", log=lines.append)
    assert code == SKIP
    assert "ended without a verdict during start-up" in lines[0] and "status 0" in lines[0]
    assert bytecode(repo) == []                            # the judge imported quitter.py, writing none


def test_not_a_repo(tmp_path, capsys):
    rc = main(["bisect", str(tmp_path), "a", "b", "--impl", "mine=myimpl:make"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "not a git repository" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("good,bad", [("nosuchrev", "main"), ("main", "deadbeef" * 5)])
def test_unknown_revision(history, capsys, good, bad):
    repo, _, suite, _ = history
    rc = main(["bisect", str(repo), good, bad, "--impl", "mine=myimpl:make", "--cases", str(suite)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "not a commit" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("spec,says", [("torch", "NAME=MODULE:ATTR"), ("mine=myimpl", "NAME=MODULE:ATTR"),
                                       ("mine=my-impl:make", "NAME=MODULE:ATTR"),
                                       ("mine=harness.impls.torch_ref:chain", "the harness's own")])
def test_impl_must_be_a_plugin_of_repo(history, capsys, spec, says):
    repo, c, suite, _ = history
    rc = main(["bisect", str(repo), c["base"], "main", "--impl", spec, "--cases", str(suite)])
    assert rc == 2
    assert says in capsys.readouterr().err


def test_missing_suite_file(history, capsys):
    repo, c, _, _ = history
    rc = main(["bisect", str(repo), c["base"], "main", "--impl", "mine=mykernel.norm:make",
               "--cases", str(repo / "nope.toml")])
    assert rc == 2
    assert "suite file not found" in capsys.readouterr().err


def test_import_roots(tmp_path):
    from harness.bisect_judge import import_roots
    assert import_roots(tmp_path) == [tmp_path.resolve()]
    (tmp_path / "src").mkdir()
    assert import_roots(tmp_path) == [(tmp_path / "src").resolve(), tmp_path.resolve()]
    assert import_roots(tmp_path, ["lib", "."]) == [(tmp_path / "lib").resolve(), tmp_path.resolve()]


def test_plugin_spec(history, monkeypatch):
    from harness.bisect import plugin_spec
    from harness.references.errors import UsageError
    _, _, _, site = history
    monkeypatch.syspath_prepend(str(site))
    assert plugin_spec("mykernel") == "mykernel=mykernel.norm:make"       # the installed entry point's value
    assert plugin_spec("mine=pkg.mod:make") == "mine=pkg.mod:make"
    assert plugin_spec("mykernel@fast") == "mykernel=mykernel.norm:make@fast"
    assert plugin_spec("mine=pkg.mod:make@ftz+fast") == "mine=pkg.mod:make@fast+ftz"
    for bad in ("torch", "nosuch", "mine=harness.impls.torch_ref:chain", "mine=pkg.mod:make@sloppy", "torch@fast"):
        with pytest.raises(UsageError):
            plugin_spec(bad)


def test_judge_refuses_a_module_outside_the_commit(tmp_path):
    """A spec naming a package the commit does not have (here torch) is untestable: it would be
    judged on the installed copy, never on the commit's code."""
    from harness.bisect_judge import SKIP, judge
    (tmp_path / "out").mkdir()
    assert judge("t=torch.nn:Linear", "quick", "cpu", tmp_path / "out", [str(tmp_path)]) == SKIP
    assert "no package 'torch' in the commit's import roots" in (tmp_path / "out" / "judge.json").read_text()


FAST_KERNEL = """
from harness.impls.fastmath import FastMath, emulation
make = emulation(FastMath(ftz=False))
make.rounding = "fused"
make.math = "fast"
"""
FAST_SUITE = """
[[case]]
dtype = "fp32"
shape = [8, 64]
gate_dist = "saturating"
"""


def test_judge_at_the_math_class_asked(tmp_path):
    """`--impl SPEC@CLASS` judges every commit at that class: the fast-math kernel is good at its
    declared class and bad at `accurate`, on the case where exp's argument rounding shows (fp32 y
    next to saturating gates)."""
    from harness.bisect_judge import BAD, GOOD, judge
    pkg = tmp_path / "tree" / "fastk"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "norm.py").write_text(FAST_KERNEL)
    suite = tmp_path / "s.toml"
    suite.write_text(FAST_SUITE)
    roots = [str(tmp_path / "tree")]
    for spec, code in (("k=fastk.norm:make", GOOD), ("k=fastk.norm:make@accurate", BAD)):
        out = tmp_path / spec.rpartition("@")[2]
        out.mkdir()
        assert judge(spec, str(suite), "cpu", out, roots) == code, (out / "judge.json").read_text()
