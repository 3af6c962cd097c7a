"""JUnit XML (harness.reports.outputs.junit_xml) and `harness run --junit`: one testsuite per
implementation named SUITE:IMPL, skipped counted, each check's time its share of pair_seconds,
failure types over_budget / regressed / invalid_output, hostile text kept well-formed."""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from harness.cli import main
from harness.reports.outputs import RunData, formats
from harness.reports.summary import summarize

SUITE = """
name = "junit"
[[group]]
dtype = ["bf16"]
shape = [[4, 32]]
gate_dist = ["normal", "negative"]
"""


def check(impl, case, output, reference, status, *, ulp=math.nan, budget=0.5, reason="", pair_seconds=0.4,
          **extra) -> dict:
    return {"case_id": case, "label": f"bf16 4x32 {case}", "impl": impl, "output": output, "reference": reference,
            "status": status, "budget_metric": "ulp", "budget": budget, "max_ulp": ulp, "reason": reason,
            "pair_seconds": pair_seconds, "replay": f"harness replay {case} --impl {impl} --cases quick",
            "suite": "quick", **extra}


def _frame() -> pd.DataFrame:
    return pd.DataFrame([
        # pair (c1, x): 4 checks over 0.4 s -> 0.1 s each
        check("x", "c1", "y", "exact", "pass", ulp=0.2),
        check("x", "c1", "y", "model:chain", "fail", ulp=3.0, reason="y ulp error 3 > budget 0.5 <&>"),
        check("x", "c1", "dx", "exact", "fail", ulp=0.1, regressed=True,
              reason="regressed: 0.1 vs baseline 0.01 (threshold 0.0125)"),
        check("x", "c1", "dx", "model:chain", "fail", reason="dx dtype float32, expected bfloat16"),
        # pair (c2, x): 2 checks over 1 s
        check("x", "c2", "y", "exact", "fail", ulp=math.inf, budget=2.0,
              reason="y non-finite (nan) where the reference is finite"),
        check("x", "c2", "dx", "exact", "error", reason="raised RuntimeError: boom \x1b[31mred\x1b[0m",
              pair_seconds=1.0),
        # another implementation, its pair skipped
        check("z", "c1", "y", "exact", "skip", reason="hidden 32 not supported", pair_seconds=0.02),
        check("z", "c1", "y", "model:fused", "skip", reason="hidden 32 not supported", pair_seconds=0.02),
    ])


def _write(tmp_path, df, suite="quick"):
    p = tmp_path / "sub" / "junit.xml"
    p.parent.mkdir()
    formats()["junit"].write(RunData(df, summarize(df), 1, "t", {}, None, suite), p)
    return p


def test_suites_per_implementation_counts_and_times(tmp_path):
    df = _frame()
    df.loc[df["case_id"] == "c2", "pair_seconds"] = 1.0
    p = _write(tmp_path, df)
    root = ET.parse(p).getroot()
    assert (root.get("name"), root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == \
        ("quick", "8", "4", "1", "2")
    x, z = root.findall("testsuite")
    assert (x.get("name"), x.get("tests"), x.get("failures"), x.get("errors"), x.get("skipped")) == \
        ("quick:x", "6", "4", "1", "0")
    assert (z.get("name"), z.get("tests"), z.get("failures"), z.get("errors"), z.get("skipped")) == \
        ("quick:z", "2", "0", "0", "2")
    times = [float(tc.get("time")) for tc in x.findall("testcase")]
    assert times == [0.1, 0.1, 0.1, 0.1, 0.5, 0.5]                # each check's share of its pair's time
    assert float(x.get("time")) == pytest.approx(1.4) and float(root.get("time")) == pytest.approx(1.42)
    z_cases = z.findall("testcase")
    assert [tc.find("skipped").get("message") for tc in z_cases] == ["hidden 32 not supported"] * 2
    assert all(tc.find("failure") is None and tc.find("error") is None for tc in z_cases)
    assert [f.name for f in p.parent.iterdir()] == ["junit.xml"]      # no temp file left behind


def test_failure_types_and_messages(tmp_path):
    cases = ET.parse(_write(tmp_path, _frame())).getroot().find("testsuite").findall("testcase")
    assert cases[0].find("failure") is None and cases[0].find("system-out") is not None
    assert cases[1].get("classname") == "quick.x.y" and cases[1].get("name") == "bf16 4x32 c1 [c1] y vs model:chain"
    fails = [tc.find("failure") for tc in cases[1:5]]
    assert [f.get("type") for f in fails] == ["over_budget", "regressed", "invalid_output", "invalid_output"]
    assert fails[0].get("message") == "y ulp error 3 > budget 0.5 <&>"            # escaped and read back
    assert "replay: harness replay c1 --impl x --cases quick" in fails[0].text
    err = cases[5].find("error")
    assert err.get("message").startswith("raised RuntimeError: boom") and "\x1b" not in err.get("message")


def test_suite_name_falls_back_to_the_rows(tmp_path):
    root = ET.parse(_write(tmp_path, _frame(), suite="")).getroot()
    assert [s.get("name") for s in root.findall("testsuite")] == ["quick:x", "quick:z"]
    (tmp_path / "b").mkdir()
    root = ET.parse(_write(tmp_path / "b", _frame().drop(columns="suite"), suite="")).getroot()
    assert [s.get("name") for s in root.findall("testsuite")] == ["harness:x", "harness:z"]


def test_cli_run_junit(tmp_path):
    suite = tmp_path / "j.toml"
    suite.write_text(SUITE)
    xml = tmp_path / "junit.xml"
    code = main(["run", "--impl", "torch", "--impl", "bug=harness.mutants:silu_in_bf16", "--cases", str(suite),
                 "--device", "cpu", "--out", str(tmp_path / "out"), "--no-report", "--junit", str(xml),
                 "--isolate", "inline"])
    assert code == 1
    df = pd.read_csv(tmp_path / "out" / "results.csv")
    root = ET.parse(xml).getroot()
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"junit:torch", "junit:bug"}                 # the suite's own name
    assert int(root.get("tests")) == len(df) == 2 * 2 * 5 * 2          # cases x impls x outputs (y_infer too) x references
    assert int(root.get("failures")) == int((df["status"] == "fail").sum()) > 0
    assert int(suites["junit:torch"].get("failures")) == 0
    bug = suites["junit:bug"]
    types = {f.get("type") for f in bug.iter("failure")}
    assert types == {"over_budget"}
    pair = df[df["impl"] == "bug"].groupby("case_id")["pair_seconds"].first()
    assert float(bug.get("time")) == pytest.approx(pair.sum(), abs=0.01)
