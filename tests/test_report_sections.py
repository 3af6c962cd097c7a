"""report.html, section by section, on small hand-made frames: the verdict with skips, which model
each implementation realises, worst-case cards per failing dtype, speed beside accuracy,
determinism, the accuracy grid by regime, the baseline."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from harness.reports import html as report
from tests.report_rows import SECTIONS, cards, frame, render, row, section, small_frame, text


@pytest.fixture
def small() -> pd.DataFrame:
    return small_frame()


@pytest.fixture(scope="module")
def small_html(tmp_path_factory) -> str:
    """The page of the small frame, rendered once for the tests that only read it."""
    return render(tmp_path_factory.mktemp("small"), small_frame())


def test_verdict_counts_failures_and_skips(small_html):
    v = section(small_html, "verdict")
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


def test_accuracy_grid_rows_carry_the_regime(small_html):
    a = section(small_html, "accuracy")
    assert "<th>regime</th>" in a
    body = [text(r).strip() for r in re.findall(r"<tr>(.*?)</tr>", a[a.index("<tbody>"):], re.S)]
    assert any(r.startswith("bf16 y exact normal worst ulp 3") for r in body)
    assert any(r.startswith("bf16 y exact extreme worst ulp 4000") for r in body)
    # A's model:chain and B's model:fused share the "declared model" row
    assert any(r.startswith("bf16 y declared model normal worst ulp 0.25 0.5") for r in body)


def test_baseline_section_only_when_given(small, tmp_path):
    base = small.copy()
    base.loc[base["case_id"] == "c2", ["max_ulp", "max_scaled_err"]] = [1.0, 1.0]   # c2 y, dx were better
    cur = small.assign(regressed=np.where(small["case_id"] == "c2", True, False))
    html = render(tmp_path, cur, baseline=base)
    assert set(re.findall(r'<section id="([a-z]+)"', html)) == SECTIONS
    b = section(html, "baseline")
    assert "worse: <b>2</b>" in b and "better: <b>0</b>" in b and "Regressed" in b
