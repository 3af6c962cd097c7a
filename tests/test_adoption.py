"""A kernel repository adopts the harness in one test file (SPEC §6).

A throwaway repository with a src/ layout: package `mykernel`, its factory registered under the
entry-point group harness.impls (the metadata an install would write — a *.dist-info with
entry_points.txt — on PYTHONPATH, which is all importlib.metadata needs), a tests/cases.py of its
own, and the documented test file. History: a correct kernel (the chain), then SiLU computed in
bf16. The test file passes on the good commit and fails on the bad one with the failure record;
`pytest -n 2` agrees. pytest runs in a subprocess with PYTHONPATH=src, as a CI job of that
repository would; each run once per module. That `harness bisect` (the installed command) names
the bad commit of such a repository, found by the entry point's name in the installed metadata and
imported from src/ of each commit: test_bisect.py's
test_finds_the_regression_by_entry_point_and_leaves_repo_alone."""
from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import SILU_IN_BF16, commit, git

# The whole gate of the kernel repository (the plugin's docstring shows the same).
TEST_FILE = """\
import harness.pytest_plugin as hp
from cases import TINY                          # the repository's own tests/cases.py

test_gated_norm = hp.suite("mykernel", cases=TINY)
"""

OWN_CASES = """\
from pathlib import Path

TINY = str(Path(__file__).with_name("tiny.toml"))
"""

OWN_TEST = """\
import cases


def test_its_own_cases_module_is_imported():
    assert cases.__file__.endswith("tests/cases.py")
"""

TINY = """\
name = "tiny"
description = "two small bf16 cases"
[[group]]
dtype = ["bf16"]
shape = [[4, 64]]
seeds = [0, 1]
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "mykernel"
version = "0.1.0"
dependencies = ["gated-rmsnorm-harness"]

[project.entry-points."harness.impls"]
mykernel = "mykernel.norm:make"

[tool.setuptools.packages.find]
where = ["src"]
"""

GOOD = """\
from harness.impls.torch_ref import chain


def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
"""

BAD = SILU_IN_BF16 + "\n\nmake = silu_in_bf16\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("adopt")
    repo = root / "mykernel"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    c = {"good": commit(repo, {"pyproject.toml": PYPROJECT, "src/mykernel/__init__.py": "",
                               "src/mykernel/norm.py": GOOD, "tests/test_harness.py": TEST_FILE,
                               "tests/cases.py": OWN_CASES, "tests/test_own.py": OWN_TEST,
                               "tests/tiny.toml": TINY}, "gated norm: the op chain")}
    c["bad"] = commit(repo, {"src/mykernel/norm.py": BAD}, "faster SiLU (bf16)")
    site = root / "site"                      # what `pip install -e .` would leave for importlib.metadata
    info = site / "mykernel-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mykernel\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[harness.impls]\nmykernel = mykernel.norm:make\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(site)])}

    def run(commit_name: str, *args) -> tuple[int, str]:
        """pytest in the repository at that commit; its wall time printed."""
        git(repo, "checkout", "-q", c[commit_name])
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfs", *args],
                           cwd=repo, env=env, capture_output=True, text=True)
        print(f"adoption: pytest {' '.join(args)} at {commit_name}: {time.perf_counter() - t0:.1f} s")
        return p.returncode, p.stdout + p.stderr
    return repo, c, env, site, run


def failed_ids(out: str) -> set[str]:
    """The failed node ids, less xdist loadgroup's "@group" suffix."""
    return {re.sub(r"@[^\]]+$", "", i) for i in re.findall(r"^FAILED (\S+)", out, re.M)}


def test_the_test_file_is_short():
    assert len(TEST_FILE.splitlines()) <= 5


def test_good_passes_with_and_without_xdist(kernel):
    repo, c, env, site, run = kernel
    rc, out = run("good")
    assert rc == 0, out
    assert re.search(r"^3 passed", out, re.M), out       # two cases, one test each, and its own test
    rc, out = run("good", "-n", "2", "--dist", "loadgroup")
    assert rc == 0 and re.search(r"^3 passed", out, re.M), out


def test_bad_fails_with_the_failure_record_and_xdist_gives_the_same_verdict(kernel):
    repo, c, env, site, run = kernel
    rc, out = run("bad")
    assert rc == 1, out
    assert "2 failed, 1 passed" in out, out
    ids = failed_ids(out)
    assert len(ids) == 2 and all(re.search(r"test_gated_norm\[[0-9a-f]{12}-bf16_4x64_", i) for i in ids), ids
    case_id = re.search(r"test_gated_norm\[([0-9a-f]{12})-", sorted(ids)[0])[1]
    record = re.search(rf"^E\s+AssertionError: {case_id} \[bf16 4x64 .*?\]: \d+ of 10 checks not within budget$"
                       rf"(.*?)^(?:FAILED|_)", out, re.M | re.S)
    assert record, out
    body = record[1]
    assert re.search(rf"FAIL\s+mykernel {case_id} (y|dx|dgate|dweight) vs (exact|model:chain): ", body)
    assert re.search(r"error [0-9.e+-]+ > budget [0-9.e+-]+", body)      # metric, value, budget
    assert re.search(r"worst element: x\[\d+,\d+\]=0x[0-9a-f]{4}", body)
    assert f"replay: harness replay {case_id} --impl mykernel --cases {repo / 'tests' / 'tiny.toml'}" in body
    xout = repo.parent / "xdist-out"
    rc2, out2 = run("bad", "-n", "2", "--dist", "loadgroup", f"--harness-out={xout}")   # one token: not a rootdir candidate
    assert rc2 == 1, out2
    assert failed_ids(out2) == ids, out2
    assert "@h64-bf16-bf16-bf16" in out2, out2           # grouped by compile key (--dist loadgroup)
    with open(xout / "results.csv", newline="") as fh:    # the workers' rows, merged by the controller
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 10 and {r["status"] for r in rows} >= {"fail"}
