"""--resume (harness.resume, reports/rundir.py repair_for_resume): only complete pairs of this
invocation's implementations, source hashes and device are kept, a torn last record (a write cut
short, inside a quoted field too) is dropped, a foreign file is refused in one line."""
from __future__ import annotations

import pandas as pd
import pytest

from harness.impls.registry import resolve
from harness.impls.source import source_hash
from harness.pipeline.settings import Settings
from harness.references.errors import UsageError
from harness.reports.rundir import PAIR_TIMING, RunDir, read_results
from harness.resume import expected_checks, resume_rows
from harness.runner import Sweep
from tests.conftest import make_case, pair_rows


def _sweep(tmp_path, impls=("torch",), cases=None, device="cpu", budgets=(), path=""):
    cases = cases or [make_case(shape=(4, 32)), make_case(shape=(2, 16), dtype="fp32", gate_dtype="fp32",
                                                           weight_dtype="fp32")]
    impls = [resolve(i) for i in impls]
    s = Settings(device, tuple(budgets), path, impl_hashes={i.name: source_hash(i) for i in impls})
    return Sweep(list(cases), impls, s, RunDir(tmp_path))


def _write_pairs(rd, sweep):
    for c in sweep.cases:
        for i in sweep.impls:
            rows = pair_rows(c, i, sweep.settings)
            rd.append_pair(rows)
            rd.append_csv_row(PAIR_TIMING, {"case_id": c.case_id, "impl": i.name}, ["case_id", "impl"])


def test_resume_keeps_complete_pairs_only(tmp_path):
    sw = _sweep(tmp_path, impls=("torch", "torch-fused"))
    rd = sw.rundir
    _write_pairs(rd, sw)
    text = rd.results.read_text()
    lines = text.splitlines(keepends=True)
    # the last pair cut short: 3 of its rows and a torn fourth
    rd.results.write_text("".join(lines[:-5]) + lines[-5][:30])
    with open(rd.file(PAIR_TIMING), "a") as f:
        f.write("torn,li")
    kept = resume_rows(sw)
    assert len(kept) == 3 * 10 and (kept.groupby(["case_id", "impl"]).size() == 10).all()
    assert len(read_results(rd.results)) == 30                  # rewritten whole, atomically
    pt = pd.read_csv(rd.file(PAIR_TIMING), dtype=str)
    assert len(pt) == 3 and set(zip(pt.case_id, pt.impl)) == set(zip(kept.case_id, kept.impl))


def test_whole_records_cuts_outside_quotes_only():
    from harness.reports.rundir import whole_records
    assert whole_records(b'a,b\n1,"x\ny"\n2,"p""q') == b'a,b\n1,"x\ny"\n'
    assert whole_records(b'a,b\n1,"x\n') == b'a,b\n'                 # torn just after a quoted newline
    assert whole_records(b'a,b\n1,"x""\ny"\n') == b'a,b\n1,"x""\ny"\n'  # a doubled quote inside
    assert whole_records(b'a,b\n1,2\n') == b'a,b\n1,2\n' and whole_records(b'a,b') == b''


@pytest.mark.parametrize("tear", ["after the message's newline", "inside its second line"])
def test_resume_after_a_write_torn_inside_a_multiline_message(tmp_path, tear):
    """A pair whose row holds a newline in a quoted field, killed mid-write: the pairs before it
    are kept, the torn one runs again (the file stays readable, not 'not a readable results.csv')."""
    sw = _sweep(tmp_path, impls=("torch", "torch-fused"))
    rd = sw.rundir
    for n, (c, i) in enumerate((c, i) for c in sw.cases for i in sw.impls):
        rows = pair_rows(c, i, sw.settings)
        if n == 3:
            rows[0]["notes"] = 'first line, "quoted"\nsecond line'
        rd.append_pair(rows)
    text = rd.results.read_text()
    cut = text.index("second line") + (0 if tear.startswith("after") else len("second"))
    rd.results.write_text(text[:cut])
    kept = resume_rows(sw)
    assert len(kept) == 3 * 10 and (kept.groupby(["case_id", "impl"]).size() == 10).all()
    assert (sw.cases[1].case_id, "torch-fused") not in set(zip(kept.case_id, kept.impl))


def test_resume_drops_other_impls_cases_devices_and_duplicates(tmp_path):
    sw = _sweep(tmp_path, impls=("torch", "torch-fused"))
    _write_pairs(sw.rundir, sw)
    lines = sw.rundir.results.read_text().splitlines(keepends=True)
    sw.rundir.results.write_text("".join(lines + lines[1:9]))        # a pair written twice
    mine = _sweep(tmp_path, impls=("torch",), cases=sw.cases[:1])
    kept = resume_rows(mine)
    assert len(kept) == 10 and set(kept["impl"]) == {"torch"} and set(kept["case_id"]) == {sw.cases[0].case_id}
    assert not kept.duplicated(["case_id", "impl", "output", "reference"]).any()
    # rows measured on another device are not this invocation's
    df = read_results(sw.rundir.results)
    df["device"] = "cuda"
    sw.rundir.write_results(df)
    assert len(resume_rows(mine)) == 0 and not sw.rundir.results.exists()


def test_resume_keys_on_what_ran(tmp_path):
    """A pair is kept only for the --impl text and the source hash that produced it."""
    from dataclasses import replace
    sw = _sweep(tmp_path, impls=("torch", "torch-fused"))
    _write_pairs(sw.rundir, sw)
    assert len(resume_rows(sw)) == 2 * 2 * 10
    changed = replace(sw, settings=replace(sw.settings, impl_hashes={**sw.settings.impl_hashes, "torch": "0" * 16}))
    kept = resume_rows(changed)
    assert set(kept["impl"]) == {"torch-fused"} and len(kept) == 2 * 10
    other = replace(sw, impls=[replace(sw.impls[1], spec="torch-fused=harness.impls.torch_ref:fused")])
    assert len(resume_rows(other)) == 0                # another --impl text under the same name
    _write_pairs(sw.rundir, sw)
    unknown = replace(sw, settings=replace(sw.settings, impl_hashes={}))
    assert len(resume_rows(unknown)) == 0              # a source that cannot be hashed always reruns


def test_resume_refuses_a_foreign_results_file_with_one_line(tmp_path):
    sw = _sweep(tmp_path)
    sw.rundir.results.write_text("a,b\n1,2\n")
    with pytest.raises(UsageError, match="not a results.csv"):
        resume_rows(sw)


def test_expected_checks_follow_the_declared_model():
    e = expected_checks([resolve("torch"), resolve("torch-fused")], models=("chain", "xhat"))
    assert ("y", "model:chain") in e["torch"] and ("y", "model:fused") not in e["torch"]
    assert len(e["torch"]) == 5 * 3 and len(e["torch-fused"]) == 5 * 4
