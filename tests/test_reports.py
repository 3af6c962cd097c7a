"""reports/: summary.csv numbers and report.html, each section's content on small hand-made frames
(verdict with skips, which model each implementation realises, worst-case cards per failing
dtype, speed beside accuracy, determinism, the accuracy grid by regime, baseline), hostile strings
escaped, 50,000 rows rendered in seconds, and a headless Chromium load (where installed) that
proves the page's JS ran without throwing and that it draws something."""
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

from harness.reports import html as report
from harness.reports.outputs import RunData, formats, write_outputs
from harness.reports.schema import columns
from harness.reports.summary import SUMMARY_COLUMNS, summarize

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = set(report.SECTIONS)


def row(impl, case, output, status, *, ulp=np.nan, scaled=np.nan, dtype="bf16", ref="exact", rounding="chain",
        regime="normal", hidden=64, tokens=4, gate="normal", seconds=1e-3, repeatable=True, differing=0,
        **extra) -> dict:
    """One results.csv row. y vs exact and every model check gate on ULP (budget 2, or 0.5 vs a
    model), the other outputs vs exact on the scaled error (budget 8); extreme rows are not gated."""
    metric = "ulp" if output == "y" or ref != "exact" else "scaled"
    budget = math.inf if regime == "extreme" else 2.0 if output == "y" and ref == "exact" else \
        0.5 if metric == "ulp" else 8.0
    measured = status in ("pass", "fail")
    r = {"case_id": case, "label": f"{dtype} {tokens}x{hidden} gate:{gate}", "impl": impl, "rounding": rounding,
         "device": "cpu", "dtype": dtype, "out_dtype": dtype, "act_dtype": dtype, "output": output,
         "reference": ref, "regime": regime, "max_ulp": ulp, "mean_ulp": ulp / 4, "max_scaled_err": scaled,
         "budget_metric": metric, "budget": budget, "status": status, "hidden": hidden, "tokens": tokens,
         "gate_dist": gate, "worst_index": "0,1", "worst_inputs": "x[0,1]=0x3f80 (1) gate=0xbf00 (-0.5)",
         "worst_got": 1.0, "worst_ref": 1.0000001, "reason": "" if status == "pass" else f"{output} not good",
         "replay": f"harness replay {case} --impl {impl} --cases quick --device cpu", "suite": "quick",
         "pair_seconds": 0.08, "impl_seconds": seconds if measured else np.nan,
         "repeatable": repeatable if measured else np.nan, "differing_elements": differing if measured else np.nan,
         "reference_kind": "exact" if ref == "exact" else "model",
         "reference_model": "" if ref == "exact" else ref.removeprefix("model:"), "reference_math": "accurate",
         "fail_kind": {"pass": "", "fail": "over_budget"}.get(status, status)}
    return {**r, **extra}


def frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows).reindex(columns=list(columns()))


@pytest.fixture
def small() -> pd.DataFrame:
    return frame([
        row("A", "c1", "y", "pass", ulp=1.0, scaled=0.1),
        row("A", "c2", "y", "fail", ulp=3.0, scaled=0.3, hidden=128, gate="saturating"),
        # an error row's stray numbers must not count
        {**row("A", "c3", "y", "error", ulp=99.0, scaled=99.0), "reason": "RuntimeError: boom"},
        row("A", "c1", "dx", "pass", ulp=5.0, scaled=6.0),
        row("A", "c2", "dx", "pass", ulp=4.0, scaled=7.5),
        row("A", "c1", "y", "pass", ulp=0.25, scaled=0.1, ref="model:chain"),
        row("A", "c4", "y", "pass", ulp=4000.0, scaled=90.0, regime="extreme"),
        row("B", "c1", "y", "pass", ulp=0.5, scaled=0.05, ref="model:fused", rounding="fused"),
        row("B", "c5", "y", "pass", ulp=0.0, scaled=0.0, dtype="fp32", rounding="fused"),
        {**row("B", "c6", "y", "skip", rounding="fused"), "reason": "hidden 19 not supported"},
        {**row("B", "c6", "y", "skip", ref="model:fused", rounding="fused"), "reason": "hidden 19 not supported"},
    ])


def render(tmp_path: Path, df: pd.DataFrame, **kw) -> str:
    data = RunData(df, summarize(df), kw.pop("exit_code", 1), kw.pop("title", "t"), kw.pop("env", {"torch": "2.x"}),
                   kw.pop("baseline", None), kw.pop("suite", "quick"))
    path = tmp_path / "report.html"
    formats()["report"].write(data, path)
    return path.read_text()


def section(html: str, name: str) -> str:
    m = re.search(rf'<section id="{name}">(.*?)</section>', html, re.S)
    assert m, f"no section {name}"
    return m.group(1)


def text(fragment: str) -> str:
    """The visible text of an HTML fragment, whitespace collapsed (entities left as written)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment))


def cards(html: str) -> list[str]:
    return [text(c) for c in re.findall(r'<div class="case">(.*?)</div>', section(html, "worst"), re.S)]


# ---------------------------------------------------------------- summary.csv

def test_summarize_counts_regimes_and_margins(small):
    s = summarize(small)
    assert list(s.columns) == SUMMARY_COLUMNS
    s = s.set_index(["impl", "out_dtype", "output", "reference", "regime"])
    y = s.loc[("A", "bf16", "y", "exact", "normal")]
    assert (y.checks, y.fail, y.error, y.skip) == (3, 1, 1, 0)
    assert y.max_ulp == 3.0 and y.worst == 3.0                  # the error row's 99 ignored
    assert y.metric == "ulp" and y.budget == 2.0 and y.margin == -1.0
    dx = s.loc[("A", "bf16", "dx", "exact", "normal")]
    assert dx.metric == "scaled" and dx.worst == 7.5 and dx.margin == 0.5
    ext = s.loc[("A", "bf16", "y", "exact", "extreme")]           # its own group: inf budget, not a failure
    assert ext.worst == 4000.0 and ext.budget == math.inf and ext.fail == 0
    skip = s.loc[("B", "bf16", "y", "exact", "normal")]
    assert (skip.checks, skip.skip) == (1, 1) and math.isnan(skip.worst)


def test_write_outputs_writes_the_default_formats(small, tmp_path):
    data = RunData(small, summarize(small), 1, "t", {"torch": "x"})
    written = write_outputs(tmp_path, data)
    assert sorted(p.name for p in written) == ["report.html", "summary.csv"]     # junit only when asked
    s = pd.read_csv(tmp_path / "summary.csv")
    assert list(s.columns) == SUMMARY_COLUMNS and s["checks"].sum() == len(small)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "summary.csv"]   # no temp file left


# ---------------------------------------------------------------- report.html sections

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


def test_verdict_counts_failures_and_skips(small, tmp_path):
    v = section(render(tmp_path, small), "verdict")
    assert "11 checks" in v and "pass 7" in v and "fail 1" in v and "error 1" in v and "skip 2" in v
    failed = v[v.index("What failed"):v.index("Skipped")]
    # the failure table: case id, label, output, reference, reason and the replay command
    assert "c2" in failed and "bf16 4x128 gate:saturating" in failed and "y not good" in failed
    assert "harness replay c2 --impl A --cases quick --device cpu" in failed
    assert "RuntimeError: boom" in failed and "harness replay c3" in failed
    assert "c1" not in failed                                   # passing checks are not listed
    skipped = text(v[v.index("Skipped"):])
    # one row per implementation and case, with its reason and how many checks it stands for
    assert skipped.count("hidden 19 not supported") == 1 and "B c6" in skipped and " 2 " in skipped


def identify_frame() -> pd.DataFrame:
    """X declares chain: y within chain and fused, dx within chain only -> realises chain.
    Y declares fused: bf16 y within xhat only, dx within fused only -> no single model.
    Z declares chain and was measured against it alone (a normal run) and fails bf16 dx."""
    rows = []
    fits = {("X", "y"): {"chain", "fused"}, ("X", "dx"): {"chain"},
            ("Y", "y"): {"xhat"}, ("Y", "dx"): {"fused"}}
    own = {"X": "chain", "Y": "fused"}
    for (impl, out), ok in fits.items():
        for m in ("chain", "fused", "xhat"):
            for case in ("k1", "k2"):
                good = m in ok or case == "k1"             # one failing case is enough to miss a model
                rows.append(row(impl, case, out, "pass" if good else "fail", ulp=0.25 if good else 3.0,
                                ref=f"model:{m}", rounding=own[impl]))
    rows += [row("Z", "k1", "y", "pass", ulp=0.25, ref="model:chain"),
             row("Z", "k1", "dx", "fail", ulp=9.0, ref="model:chain")]
    return frame(rows)


def test_models_section_per_output_and_verdict_lines(tmp_path):
    html = render(tmp_path, identify_frame())
    m = section(html, "models")
    lines = [text(li).strip() for li in re.findall(r"<li>(.*?)</li>", m, re.S)]
    assert lines[0].startswith("X realises chain") and "declares chain ★" in lines[0]
    assert lines[1].startswith("Y realises no single declared model: each output fits some model")
    assert lines[2].startswith("Z realises no single declared model: bf16 dx fit none")
    assert "only one model measured" in lines[2] and "only one model measured" not in lines[0]
    body = [text(r).strip() for r in re.findall(r"<tr>(.*?)</tr>", m[m.index("<tbody>"):], re.S)]
    # impl, dtype, output, then model chain / fused / xhat, then the models within budget
    assert "X bf16 y within (accurate) ★ within (accurate) 1 of 2 over chain (accurate), fused (accurate)" in body
    assert "X bf16 dx within (accurate) ★ 1 of 2 over 1 of 2 over chain (accurate)" in body
    assert "Y bf16 y 1 of 2 over 1 of 2 over ★ within (accurate) xhat (accurate)" in body
    assert "Z bf16 dx 1 of 1 over ★ – – none" in body
    # checks against a model an implementation does not declare: counted in the verdict, not listed
    v = section(html, "verdict")
    assert "6 checks against models an implementation does not declare" in text(v)
    failed = v[v.index("What failed"):]
    listed = [text(r).strip() for r in re.findall(r"<tr>(.*?)</tr>", failed[failed.index("<tbody>"):], re.S)]
    assert [r.split()[:2] + r.split()[6:8] for r in listed] == [["Z", "k1", "dx", "model:chain"],   # 18 x budget
                                                               ["Y", "k2", "y", "model:fused"]]    # 6 x budget


def test_worst_cards_cover_every_failing_dtype(tmp_path):
    rows = [row("A", f"f{i:02d}", "y", "fail", ulp=1000.0 + i, dtype="fp32") for i in range(30)]
    rows += [row("A", "b1", "y", "fail", ulp=3.0, dtype="bf16"),
             row("A", "b2", "y", "pass", ulp=1.0, dtype="bf16"),
             # a failure without a measurement (the wrong dtype): its group's worst all the same
             {**row("B", "h1", "dx", "fail", dtype="fp16"), "reason": "dx dtype float32, expected float16"},
             row("B", "h2", "dx", "pass", scaled=7.9, dtype="fp16")]
    got = cards(render(tmp_path, frame(rows)))
    assert len(got) == report.WORST_N
    bf16 = [c for c in got if "(bf16)" in c]
    assert len(bf16) == 1
    c = bf16[0]
    for part in ("case id b1", "x[0,1]=0x3f80 (1) gate=0xbf00 (-0.5)", "got / ref 1 / 1.0000001",
                 "3 ulp vs budget 2 = 1.5 × budget", "harness replay b1 --impl A --cases quick --device cpu"):
        assert part in c, (part, c)
    fp16 = [c for c in got if "(fp16)" in c]
    assert len(fp16) == 1 and "dx dtype float32, expected float16" in fp16[0] and "harness replay h1" in fp16[0]
    assert sum("(fp32)" in c for c in got) == report.WORST_N - 2
    assert "f29" in got[1] or "f29" in got[0]                   # the rest: highest ratio first


def test_worst_cards_more_groups_than_cap(tmp_path):
    rows = [row(f"I{i:02d}", "c", "y", "fail", ulp=3.0, dtype=dt) for i in range(9) for dt in ("bf16", "fp16", "fp32")]
    assert len(cards(render(tmp_path, frame(rows)))) == 27 > report.WORST_N


def test_speed_section_on_cpu_omits_the_floor(tmp_path):
    rows = [row("fast", c, "y", "pass", ulp=0.5, scaled=0.5, seconds=s, tokens=t)
            for c, s, t in [("a", 1e-3, 4), ("b", 2e-3, 8), ("c", 5e-3, 4096)]]
    rows += [row("fast", "a", "y", "pass", ulp=0.25, scaled=0.3, ref="model:chain", seconds=1e-3),
             row("slow", "a", "y", "pass", ulp=1.5, scaled=2.0, seconds=4e-2)]
    s = section(render(tmp_path, frame(rows)), "speed")
    assert "bandwidth floor" not in s and "GPU time" not in s and "host-inclusive" in s
    body = [text(r).strip() for r in re.findall(r"<tr>(.*?)</tr>", s[s.index("<tbody>"):], re.S)]
    # impl, model, cases timed, timed calls, median ms, ms at the largest case and its label, worst
    # ULP / scaled vs model, vs exact, worst / budget
    assert body[0] == "fast chain 3 forward + backward 2 5 bf16 4096x64 gate:normal 0.25 0.3 0.5 0.5 0.5"
    assert body[1].startswith("slow chain 1 forward + backward 40 40 bf16 4x64 gate:normal") and \
        body[1].endswith("1.5 2 0.75")
    assert "data:image/png;base64," in s


def test_speed_section_on_cuda_shows_the_gpu_time_and_the_floor(tmp_path):
    rows = [row("k", c, "y", "pass", ulp=0.5, scaled=0.5, seconds=1e-3, tokens=t, floor_fraction=f,
                bytes_moved=1000, device="cuda", gpu_seconds=g, gpu_method=m)
            for c, t, f, g, m in [("a", 4, 0.1, 1e-4, "graph"), ("b", 8, 0.2, 2e-4, "profiler"),
                                  ("c", 4096, 0.523, 3e-4, "graph")]]
    s = section(render(tmp_path, frame(rows)), "speed")
    assert "median % of bandwidth floor" in s and "% of floor at largest case" in s
    assert "median GPU time (ms)" in s and "median wall time, host-inclusive (ms)" in s
    assert re.search(r"<td>20\.0</td>\s*<td>52\.3</td>", s)
    # GPU median, at the largest case, the methods used; then the wall time's
    assert re.search(r"<td>0\.2</td>\s*<td>0\.3</td>\s*<td>graph/profiler</td>\s*<td>1</td>", s)


def test_speed_section_says_which_implementations_time_the_forward_alone(tmp_path):
    skip = "forward-only implementation (factory.backward = False)"
    rows = [row("serve", "a", "y", "pass", ulp=0.5, scaled=0.5)]
    rows += [{**row("serve", "a", out, "skip"), "reason": skip} for out in ("dx", "dgate", "dweight")]
    rows += [row("train", "a", "y", "pass", ulp=0.5, scaled=0.5), row("train", "a", "dx", "pass", scaled=1.0),
             {**row("train", "b", "dx", "skip"), "reason": "zero-centred gamma: not supported"}]
    s = section(render(tmp_path, frame(rows)), "speed")
    body = [text(r).strip() for r in re.findall(r"<tr>(.*?)</tr>", s[s.index("<tbody>"):], re.S)]
    assert body[0].startswith("serve chain 1 forward only ") and body[1].startswith("train chain 1 forward + backward ")


def test_determinism_lists_non_repeatable_outputs(tmp_path):
    rows = [row("A", "c1", "dweight", "pass", scaled=1.0, repeatable=False, differing=7),
            row("A", "c1", "dweight", "pass", ulp=0.1, ref="model:chain", repeatable=False, differing=7),
            row("A", "c1", "y", "pass", ulp=0.5),
            row("B", "c1", "dx", "pass", scaled=1.0, repeatable=False, differing=0)]     # second call raised
    d = section(render(tmp_path, frame(rows)), "determinism")
    assert "<b>2</b> of 3 outputs were not repeatable" in d
    body = [text(r).strip() for r in re.findall(r"<tr>(.*?)</tr>", d[d.index("<tbody>"):], re.S)]
    assert body == ["A c1 bf16 4x64 gate:normal dweight 7", "B c1 bf16 4x64 gate:normal dx second call raised"]


def test_determinism_all_repeatable_and_unmeasured(tmp_path):
    ok = frame([row("A", "c1", "y", "pass", ulp=0.5), row("A", "c2", "y", "pass", ulp=0.5)])
    assert "All outputs repeatable: 2 outputs of 2" in section(render(tmp_path, ok), "determinism")
    # as read back from results.csv: booleans as text
    assert "All outputs repeatable" in section(render(tmp_path, ok.assign(repeatable="True")), "determinism")
    none = ok.assign(repeatable=np.nan)
    assert "not measured" in section(render(tmp_path, none), "determinism")


def test_accuracy_grid_rows_carry_the_regime(small, tmp_path):
    a = section(render(tmp_path, small), "accuracy")
    assert "<th>regime</th>" in a
    body = [text(r).strip() for r in re.findall(r"<tr>(.*?)</tr>", a[a.index("<tbody>"):], re.S)]
    assert any(r.startswith("bf16 y exact normal worst ulp 3") for r in body)
    assert any(r.startswith("bf16 y exact extreme worst ulp 4000") for r in body)
    # A's model:chain and B's model:fused share the "declared model" row
    assert any(r.startswith("bf16 y declared model normal worst ulp 0.25 0.5") for r in body)


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


def test_baseline_section_only_when_given(small, tmp_path):
    base = small.copy()
    base.loc[base["case_id"] == "c2", ["max_ulp", "max_scaled_err"]] = [1.0, 1.0]   # c2 y, dx were better
    cur = small.assign(regressed=np.where(small["case_id"] == "c2", True, False))
    html = render(tmp_path, cur, baseline=base)
    assert set(re.findall(r'<section id="([a-z]+)"', html)) == SECTIONS
    b = section(html, "baseline")
    assert "worse: <b>2</b>" in b and "better: <b>0</b>" in b and "Regressed" in b


def _bench():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "bench_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_large_results_are_capped(tmp_path):
    df = _bench().synth(2400)
    html = render(tmp_path, df)
    assert "First 2,000 of 2,400 rows" in html


def test_many_rows_with_identify_and_a_baseline_render_every_section(tmp_path):
    """Every section of a large run with identify's references and a baseline (its speed is
    bench/bench_report.py's figure, not a test's)."""
    bench = _bench()
    df, base = bench.synth(8_000, identify=True), bench.synth(8_000, seed=1, identify=True)
    write_outputs(tmp_path, RunData(df, summarize(df), 1, "big", {}, base, "synthetic"))
    html = (tmp_path / "report.html").read_text()
    assert set(re.findall(r'<section id="([a-z]+)"', html)) == SECTIONS
    assert "First 2,000 of 8,000 rows" in html and len(html) < 20e6


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
    bench = _bench()
    out = tmp_path / "out"
    out.mkdir()
    render(out, bench.synth(600, identify=True), baseline=bench.synth(600, seed=1))
    uri = (out / "report.html").as_uri()

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
    assert set(re.findall(r'<section id="([a-z]+)"', dom.stdout)) == SECTIONS

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


def test_titles_placed_explicitly_draw_the_same_figures(small, monkeypatch):
    """plots.TITLE_Y spares matplotlib's placing of each title on every draw; these figures have
    nothing on top of an axes for that placing to avoid, so they are the same bytes without it."""
    from harness.reports import plots
    d = report.prepare(small)
    g = d[d["_gated"]]

    def draw():
        return [plots.histograms(g), plots.heatmap(g), plots.gate(g), report.speed(g)["plot"]]
    placed = draw()
    assert all(placed)
    monkeypatch.setattr(plots, "TITLE_Y", None)                 # matplotlib's own placing
    assert draw() == placed
