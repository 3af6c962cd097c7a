"""report.html as a whole: self-contained (nothing fetched), every section present, hostile strings
escaped, empty and minimal frames, a large run with every section (its speed is
bench/bench_report.py's figure, not a test's), figures drawn in forked children, and a headless
Chromium load (where installed) that proves the page's JS ran without throwing and that it draws
something."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.reports import html as report
from harness.reports.outputs import RunData, write_outputs
from harness.reports.summary import summarize
from tests.report_rows import SECTIONS, bench, frame, render, row, section, small_frame, text


@pytest.fixture
def small() -> pd.DataFrame:
    return small_frame()


def test_report_sections_and_offline(small, tmp_path):
    html = render(tmp_path, small, env={"torch": "2.x", "git": "abc"})
    assert set(re.findall(r'<section id="([a-z]+)"', html)) == SECTIONS - {"baseline"}
    # nothing fetched: no network src/href, no CSS url()/@import of a remote
    assert not re.search(r'(?:src|href)\s*=\s*["\']?\s*(?:https?:)?//', html, re.I)
    assert not re.search(r'url\(\s*["\']?\s*(?:https?:)?//|@import', html, re.I)
    assert "http://" not in html and "https://" not in html
    assert len(re.findall(r'src="data:image/png;base64,', html)) >= 4      # histograms, heatmap, gate, speed
    env = text(section(html, "environment"))
    assert "torch 2.x" in env and "git abc" in env


def test_hostile_strings_are_escaped(small, tmp_path):
    evil = small.copy()
    evil.loc[evil["status"] == "fail", "reason"] = "<script>alert(1)</script>"
    evil.loc[evil["impl"] == "B", "impl"] = '<img src=x onerror="alert(2)">'
    evil.loc[evil["case_id"] == "c1", "gate_dist"] = "$\\frac{$"         # would break matplotlib's mathtext
    evil.loc[evil["case_id"] == "c2", "label"] = "a & b </td></tr></table>"
    html = render(tmp_path, evil, title="<i>title</i>", env={"<k>": "<v>"})
    assert html.count("<script") == 1                    # the page's own script only
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=&#34;alert(2)&#34;&gt;" in html
    assert "<i>title</i>" not in html and "&lt;i&gt;title&lt;/i&gt;" in html
    assert "a &amp; b &lt;/td&gt;&lt;/tr&gt;&lt;/table&gt;" in html and "&lt;k&gt;" in html


def test_empty_and_minimal_frames_render(tmp_path):
    empty = render(tmp_path, frame([]), exit_code=2)
    assert set(re.findall(r'<section id="([a-z]+)"', empty)) == SECTIONS - {"baseline"}
    assert "No implementation ran." in empty and "Repeatability was not measured." in empty
    assert "No timed case." in empty and "0 checks" in empty
    # only the columns results.csv must have
    minimal = pd.DataFrame([{"case_id": "a", "impl": "x", "output": "y", "reference": "exact", "status": "pass"}])
    html = render(tmp_path, minimal, exit_code=0)
    assert "PASS" in html and "x: no model check was measured" in html


def test_many_rows_with_identify_and_a_baseline_render_every_section(tmp_path):
    """Every section of a large run with identify's references and a baseline; the results table
    shows its first 2,000 rows only."""
    synth = bench().synth
    df, base = synth(8_000, identify=True), synth(8_000, seed=1, identify=True)
    write_outputs(tmp_path, RunData(df, summarize(df), 1, "big", {}, base, "synthetic"))
    html = (tmp_path / "report.html").read_text()
    assert set(re.findall(r'<section id="([a-z]+)"', html)) == SECTIONS
    assert "First 2,000 of 8,000 rows" in html and len(html) < 20e6


# ---------------------------------------------------------------- figures

def test_figures_drawn_in_children_come_back_as_drawn():
    """The report's figures draw in forked children; what comes back is what the job returned, and
    a job that fails there runs again here, raising its own error."""
    from harness.reports import plots
    for cores in (plots.FORK_DRAWING_CORES, 1):                # in children; here, one after the other
        assert plots.in_children({"a": lambda: [{"title": "t", "img": "data:x"}], "b": lambda: None}, cores)() == \
            {"a": [{"title": "t", "img": "data:x"}], "b": None}

        def broken():
            raise ValueError("bad figure")
        with pytest.raises(ValueError, match="bad figure"):
            plots.in_children({"c": broken}, cores)()
    import os
    parent = os.getpid()
    assert plots.in_children({"pid": os.getpid}, plots.FORK_DRAWING_CORES)()["pid"] != parent


def test_histograms_one_figure_per_output_dtype_in_order_with_one_colour_each(tmp_path):
    """Each output dtype's histograms are a figure of their own (drawn beside the others), in the
    report's dtype order, each implementation one colour in all of them; budgets falling in one bin
    are one line; the page shows every figure, in that order."""
    from harness.reports import plots
    rows = [row(impl, f"c{k}", "y", "pass", ulp=u, dtype=dt, ref=ref, rounding="chain")
            for k, (impl, dt, u) in enumerate([("B", "fp32", 0.4), ("A", "bf16", 1.0), ("A", "fp32", 3.0),
                                                ("B", "bf16", 0.2)])
            for ref in ("exact", "model:chain")]
    rows[0]["budget"] = 1.5                    # in the bin (1, 2] of the others' 2 against exact: one line
    d = report.prepare(frame(rows))
    grid = plots.histogram_grid(d)
    assert grid.dtypes == ["fp32", "bf16"] and grid.colour == {"A": "C0", "B": "C1"}    # the report's orders
    assert grid.budget_bins == {("bf16", "y"): [1, 3], ("fp32", "y"): [1, 3]}       # 0.5 vs a model, 2 vs exact
    assert grid.bins == 5                      # through the last non-empty bin: 3 ULP in (2, 4]
    figures = [job() for job in plots.histogram_jobs(d).values()]
    assert [f["title"] for f in figures] == ["fp32: max ULP per row, fraction of rows",
                                             "bf16: max ULP per row, fraction of rows"]
    assert len({f["img"] for f in figures}) == 2
    page = render(tmp_path, frame(rows))
    shown = re.findall(r'alt="max ULP histograms for ([^"]+)"', section(page, "histograms"))
    assert shown == [f["title"] for f in figures]
    assert plots.histogram_grid(d[d["max_ulp"].isna()]) is None and plots.histogram_jobs(d[d["max_ulp"].isna()]) == {}
    rows[0]["budget"] = 64.0                   # a budget past every error: every panel's axis reaches it
    assert plots.histogram_grid(report.prepare(frame(rows))).bins == 9           # (32, 64] is bin 8


def test_the_page_is_the_same_drawn_in_children_and_here(small, tmp_path, monkeypatch):
    """The figures drawn in forked children (FORK_DRAWING_CORES or more cores) come back into the
    page in order, the same bytes as drawn one after the other in this process."""
    from harness.reports import plots
    pages = []
    for cores in (plots.FORK_DRAWING_CORES, 1):
        monkeypatch.setattr(plots, "_cores", lambda cores=cores: cores)
        out = tmp_path / str(cores)
        out.mkdir()
        pages.append(render(out, small))
    assert pages[0] == pages[1]


def test_titles_placed_explicitly_draw_the_same_figures(small, monkeypatch):
    """plots.TITLE_Y spares matplotlib's placing of each title on every draw; these figures have
    nothing on top of an axes for that placing to avoid, so they are the same bytes without it."""
    from harness.reports import plots
    d = report.prepare(small)
    g = d[d["_gated"]]

    def draw():
        return [[job() for job in plots.histogram_jobs(g).values()], plots.heatmap(g), plots.gate(g),
                report.speed_plot(g)]
    placed = draw()
    assert all(placed)
    monkeypatch.setattr(plots, "TITLE_Y", None)                 # matplotlib's own placing
    assert draw() == placed


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
    synth = bench().synth
    out = tmp_path / "out"
    out.mkdir()
    render(out, synth(600, identify=True), baseline=synth(600, seed=1))
    uri = (out / "report.html").as_uri()
    png = tmp_path / "shot.png"

    # One load, two findings. (b) the page's JS ran to the end (marker), nothing threw (error hook),
    # every section is there; #selftest also clicks sort headers, filters and "show more" on every
    # table first. (a) a screenshot of it that is not blank.
    dom = _run_chromium(exe, tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", f"--screenshot={png}",
                        "--window-size=1280,2000", uri + "#selftest")
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body, f"no DOM dumped: {dom.stderr[-2000:]}"
    assert 'data-js-ok="1"' in body.group(0) and 'data-js-selftest="1"' in body.group(0), body.group(0)
    assert "data-js-error" not in body.group(0), body.group(0)
    # the page logs nothing itself, so any console line (error, warning, uncaught) is a finding
    console = [ln for ln in dom.stderr.splitlines() if "Uncaught" in ln or ":CONSOLE" in ln]
    assert not console, console
    assert set(re.findall(r'<section id="([a-z]+)"', dom.stdout)) == SECTIONS

    # (a) the screenshot: several colours over a meaningful share of pixels
    import matplotlib.image as mpimg
    assert png.exists(), "chromium wrote no screenshot"
    img = mpimg.imread(png)[..., :3]
    q = (img * 255).astype(np.uint8).reshape(-1, 3)
    colours, counts = np.unique(q, axis=0, return_counts=True)
    assert len(colours) > 20
    assert 1 - counts.max() / counts.sum() > 0.05, "screenshot is (almost) one colour"
