"""The package as `pip install .` (not editable) builds it: no warning of the package's own
configuration, and the data a user needs ships (the named suites, the report template)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "harness", "references", "cases", "reports")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A copy of the sources (the build writes build/ and egg-info beside them) installed with
    `pip install --target`: the build's output and the target directory."""
    pytest.importorskip("setuptools", reason="the build backend is installed with the dev environment")
    tmp = tmp_path_factory.mktemp("pkg")
    src, target = tmp / "src", tmp / "target"
    src.mkdir()
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(p, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(target), str(src)],
                       capture_output=True, text=True, cwd=tmp, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout + r.stderr, target


def test_the_build_prints_no_warning_of_the_package(installed):
    log, _ = installed
    for warning in ("BuildBackendWarning", "SetuptoolsDeprecationWarning", "absent from the `packages`",
                    "Package would be ignored"):
        assert warning not in log


def test_the_installed_package_ships_its_suites_and_report_template(installed):
    _, target = installed
    assert sorted(p.name for p in (target / "harness" / "cases" / "suites").iterdir()) == ["full.toml", "quick.toml"]
    assert (target / "harness" / "reports" / "templates" / "report.html").is_file()
    probe = ("import harness, harness.cases.suite as s, harness.reports.html as h; "
             "print(harness.__file__); print(*[n for n, _, _ in s.list_suites()]); "
             "print((h.TEMPLATES / 'report.html').is_file())")
    env = {**os.environ, "PYTHONPATH": str(target)}
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=target.parent, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    where, suites, template = r.stdout.split("\n")[:3]
    assert where.startswith(str(target))          # the installed copy, not the work tree
    assert suites.split() == ["full", "quick"] and template == "True"
