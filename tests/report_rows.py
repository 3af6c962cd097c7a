"""Hand-made results.csv rows and the pages rendered from them: what the report tests
(test_summary, test_report_sections, test_report_page) build their frames and read their HTML with."""
from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from harness.reports import html as report
from harness.reports.outputs import RunData, formats
from harness.reports.schema import columns
from harness.reports.summary import summarize

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


def small_frame() -> pd.DataFrame:
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


def bench():
    """bench/bench_report.py, whose synth() makes a large results frame."""
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "bench_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
