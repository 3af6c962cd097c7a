"""summary.csv: the numbers summarize() computes from results rows (regimes, margins, stray numbers
of error rows ignored), and write_outputs' default formats."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.reports.outputs import RunData, write_outputs
from harness.reports.summary import SUMMARY_COLUMNS, summarize
from tests.report_rows import small_frame


@pytest.fixture
def small() -> pd.DataFrame:
    return small_frame()


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
