"""JUnit XML (reports/junit.py) and `harness run --junit`."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pandas as pd

from harness.cli import main
from harness.reports.junit import write_junit

SUITE = """
name = "junit"
[[group]]
dtype = ["bf16"]
shape = [[4, 32]]
gate_dist = ["normal", "negative"]
"""


def _frame():
    base = {"case_id": "abc123def456", "label": "bf16 4x32", "impl": "x", "output": "y"}
    return pd.DataFrame([
        {**base, "reference": "exact", "status": "pass", "reason": float("nan")},
        {**base, "reference": "model:chain", "status": "fail", "reason": "y ulp error 3 > budget 0.5 <&>"},
        {**base, "output": "dx", "reference": "exact", "status": "error", "reason": "raised RuntimeError: boom"},
    ])


def test_write_junit_counts_and_elements(tmp_path):
    df = _frame()
    p = tmp_path / "sub" / "junit.xml"
    write_junit(df, p)
    root = ET.parse(p).getroot()
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = suite.findall("testcase")
    assert len(cases) == 3
    assert cases[1].get("classname") == "x.y.model:chain"
    assert "abc123def456" in cases[1].get("name") and "bf16 4x32" in cases[1].get("name")
    assert cases[1].find("failure").get("message") == "y ulp error 3 > budget 0.5 <&>"
    assert cases[2].find("error").get("message").startswith("raised RuntimeError")
    assert cases[0].find("failure") is None and cases[0].find("error") is None
    assert [f.name for f in p.parent.iterdir()] == ["junit.xml"]      # no temp file left behind


def test_cli_run_junit(tmp_path, capsys):
    suite = tmp_path / "j.toml"
    suite.write_text(SUITE)
    xml = tmp_path / "junit.xml"
    code = main(["run", "--impl", "torch", "--impl", "bug=harness.mutants:SiluInBf16", "--cases", str(suite),
                 "--device", "cpu", "--out", str(tmp_path / "out"), "--no-report", "--junit", str(xml)])
    assert code == 1
    df = pd.read_csv(tmp_path / "out" / "results.csv")
    suite_el = ET.parse(xml).getroot().find("testsuite")
    assert int(suite_el.get("tests")) == len(df) == 2 * 2 * 8
    assert int(suite_el.get("failures")) == int((df["status"] == "fail").sum()) > 0
    assert int(suite_el.get("errors")) == int((df["status"] == "error").sum())
    failed = {tc.get("classname") for tc in suite_el.iter("testcase") if tc.find("failure") is not None}
    assert failed and all(c.startswith("bug.") for c in failed)
