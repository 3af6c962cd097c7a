"""reports/: summary.csv numbers, report.html structure (offline, all sections), and a headless
Chromium load that proves the page's JS ran without throwing and that it draws something."""
from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.reports.html import write_all
from harness.reports.schema import COLUMNS
from harness.reports.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("verdict", "accuracy", "histograms", "worst", "baseline", "environment")


def row(impl, case, output, status, *, ulp=np.nan, mean=np.nan, scaled=np.nan, dtype="bf16",
        ref="exact", hidden=64, gate="normal"):
    metric, budget = ("ulp", 2.0) if output == "y" else ("scaled", 8.0)
    return {"case_id": case, "label": f"{dtype} 4x{hidden} {case}", "impl": impl, "dtype": dtype,
            "out_dtype": dtype, "output": output, "reference": ref, "max_ulp": ulp, "mean_ulp": mean,
            "max_scaled_err": scaled, "budget_metric": metric, "budget": budget, "status": status,
            "hidden": hidden, "gate_dist": gate, "worst_inputs": "x[0, 1]=0x3f80 gate=0xbf00",
            "worst_got": 1.0, "worst_ref": 1.0000001, "replay": f"harness replay {case} --impl {impl} --cases quick",
            "reason": "" if status == "pass" else f"{output} over budget"}


@pytest.fixture
def small() -> pd.DataFrame:
    return pd.DataFrame([
        row("A", "c1", "y", "pass", ulp=1.0, mean=0.2, scaled=0.1),
        row("A", "c2", "y", "fail", ulp=3.0, mean=0.4, scaled=0.3, hidden=128, gate="saturating"),
        # an error row's stray numbers must not count
        {**row("A", "c3", "y", "error", ulp=99.0, mean=9.0, scaled=99.0), "reason": "RuntimeError: boom"},
        row("A", "c1", "dx", "pass", ulp=5.0, mean=1.0, scaled=6.0),
        row("A", "c2", "dx", "pass", ulp=4.0, mean=1.0, scaled=7.5),
        row("B", "c1", "y", "pass", ulp=0.5, mean=0.1, scaled=0.05, ref="model:chain"),
        row("B", "c1", "y", "pass", ulp=0.0, mean=0.0, scaled=0.0, dtype="fp32"),
    ]).reindex(columns=list(COLUMNS))


def test_summarize_counts_and_margins(small):
    s = summarize(small).set_index(["impl", "out_dtype", "output", "reference"])
    y = s.loc[("A", "bf16", "y", "exact")]
    assert (y.cases, y.failures, y.errors) == (3, 2, 1)
    assert y.max_ulp == 3.0 and math.isclose(y.mean_ulp, 0.3)      # error row's 99 / 9 ignored
    assert y.budget_metric == "ulp" and y.budget == 2.0 and y.margin == -1.0
    dx = s.loc[("A", "bf16", "dx", "exact")]
    assert (dx.cases, dx.failures, dx.errors) == (2, 0, 0)
    assert dx.max_scaled_err == 7.5 and dx.margin == 0.5          # scaled budget: margin on scaled
    assert s.loc[("B", "fp32", "y", "exact")].margin == 2.0
    assert len(s) == 4


def test_summarize_error_only_group_is_nan(small):
    only_err = small[small["status"] == "error"]
    s = summarize(only_err)
    assert len(s) == 1 and s.loc[0, "errors"] == 1 and math.isnan(s.loc[0, "max_ulp"])
    assert math.isnan(s.loc[0, "margin"])


def test_write_all_writes_both_files(small, tmp_path):
    write_all(tmp_path, small, env={"torch": "x"}, exit_code=1, title="t")
    s = pd.read_csv(tmp_path / "summary.csv")
    assert list(s.columns[:4]) == ["impl", "out_dtype", "output", "reference"]
    assert s["cases"].sum() == len(small)
    assert (tmp_path / "report.html").stat().st_size > 1000


def _ids(html: str) -> set[str]:
    return set(re.findall(r'<section id="([a-z]+)"', html))


def test_report_sections_and_offline(small, tmp_path):
    write_all(tmp_path, small, env={"torch": "2.x", "git": "abc"}, exit_code=1)
    html = (tmp_path / "report.html").read_text()
    assert _ids(html) == set(SECTIONS) - {"baseline"}
    # nothing fetched: no network src/href, no CSS url()/@import of a remote
    assert not re.search(r'(?:src|href)\s*=\s*["\']?\s*(?:https?:)?//', html, re.I)
    assert not re.search(r'url\(\s*["\']?\s*(?:https?:)?//|@import', html, re.I)
    assert "http://" not in html and "https://" not in html
    assert "harness replay c2 --impl A --cases quick" in html       # verbatim replay command
    assert "0x3f80" in html and "RuntimeError: boom" in html


def test_baseline_section_only_when_given(small, tmp_path):
    base = small.copy()
    base.loc[base["case_id"] == "c2", ["max_ulp", "max_scaled_err"]] = [1.0, 1.0]   # c2 y, dx were better
    cur = small.assign(regressed=np.where(small["case_id"] == "c2", True, False))
    write_all(tmp_path, cur, baseline=base, exit_code=1)
    html = (tmp_path / "report.html").read_text()
    assert _ids(html) == set(SECTIONS)
    section = html[html.index('<section id="baseline"'):html.index('<section id="environment"')]
    assert "worse: <b>2</b>" in section and "better: <b>0</b>" in section
    assert "Regressed" in section


def _bench_synth():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "bench_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.synth


def test_large_results_are_capped(tmp_path):
    df = _bench_synth()(2400)
    write_all(tmp_path, df, exit_code=1)
    html = (tmp_path / "report.html").read_text()
    assert "First 2,000 of 2,400 rows" in html
    assert pd.read_csv(tmp_path / "summary.csv")["cases"].sum() == 2400


# ---------------------------------------------------------------- headless Chromium

def _chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found:
        return found
    if os.geteuid() == 0 and (os.environ.get("CI") or os.environ.get("HARNESS_INSTALL_CHROMIUM")):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "chromium"], env=env, capture_output=True, timeout=900)
        found = shutil.which("chromium")
        if found:
            return found
        pytest.skip("chromium not installed and `apt-get install -y chromium` did not provide it")
    pytest.skip("/usr/bin/chromium missing; set HARNESS_INSTALL_CHROMIUM=1 (as root) to apt-get install it")


def _run_chromium(exe: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile{len(list(tmp.glob('profile*')))}"
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_report_in_headless_chromium(tmp_path):
    exe = _chromium()
    df = _bench_synth()(600)
    write_all(tmp_path / "out", df, baseline=_bench_synth()(600, seed=1), env={"torch": "2.x"}, exit_code=1)
    uri = (tmp_path / "out" / "report.html").as_uri()

    # (b) the page's JS ran to the end (marker), nothing threw (error hook), every section is there;
    # #selftest also clicks sort headers, filters and "show more" on every table first.
    dom = _run_chromium(exe, tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", uri + "#selftest")
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body, f"no DOM dumped: {dom.stderr[-2000:]}"
    assert 'data-js-ok="1"' in body.group(0) and 'data-js-selftest="1"' in body.group(0), body.group(0)
    assert "data-js-error" not in body.group(0), body.group(0)
    # the page logs nothing itself, so any console line (error, warning, uncaught) is a finding
    console = [ln for ln in dom.stderr.splitlines() if "Uncaught" in ln or ":CONSOLE" in ln]
    assert not console, console
    assert _ids(dom.stdout) == set(SECTIONS)

    # (a) a screenshot that is not blank: several colours over a meaningful share of pixels
    import matplotlib.image as mpimg
    png = tmp_path / "shot.png"
    _run_chromium(exe, tmp_path, f"--screenshot={png}", "--window-size=1280,2000", uri)
    assert png.exists(), "chromium wrote no screenshot"
    img = mpimg.imread(png)[..., :3]
    q = (img * 255).astype(np.uint8).reshape(-1, 3)
    colours, counts = np.unique(q, axis=0, return_counts=True)
    assert len(colours) > 20
    assert 1 - counts.max() / counts.sum() > 0.05, "screenshot is (almost) one colour"
