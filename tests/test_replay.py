"""`harness replay` (harness/replay.py): a recorded failing case reruns bit for bit, from a suite or
rebuilt from results.csv; unknown ids and tampered rows are usage errors (exit 2). The sweep and
the replay from its suite run in workers, as by default; the other replays run inline (what they
prove is where the case comes from and what is printed or written, not the worker), which also
shows that the pair's bits do not depend on where it runs."""
from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

from harness.cli import main
from harness.references.formats import bits_hex as _hex
from harness.references.formats import fmt_of

# A plug-in with a precision bug: SiLU evaluated in bf16.
BUG = "bug=harness.mutants:silu_in_bf16"
SUITE = """
name = "replay"
[[group]]
dtype = ["bf16", "fp16"]
shape = [[4, 64]]
gate_dist = ["normal"]
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    suite = d / "replay.toml"
    suite.write_text(SUITE)
    out = d / "out"
    code = main(["run", "--impl", BUG, "--cases", str(suite), "--device", "cpu", "--out", str(out),
                 "--no-report"])
    assert code == 1
    df = pd.read_csv(out / "results.csv", dtype={"case_id": str})
    return suite, out, df


INLINE = ["--isolate", "inline"]


def _worst_from_output(text: str, output: str, reference: str):
    """(index, got bits) of the first element listed under the `output vs reference` header."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if re.match(rf"^{output}\s+vs {re.escape(reference)}\s", ln):
            idx = re.match(r"^\s+\[([\d,]*)\]", lines[i + 1]).group(1)
            bits = re.search(r"got=\S+ \((0x[0-9a-f]+)\)", lines[i + 2]).group(1)
            return idx, bits
    raise AssertionError(f"no {output} vs {reference} block in:\n{text}")


def _expected_bits(row) -> str:
    fmt = fmt_of(row["out_dtype"])
    return _hex(torch.tensor(float(row["worst_got"]), dtype=torch.float64).to(fmt.dtype))


@pytest.mark.parametrize("source", ["suite", "dir", "csv"])
def test_replay_reproduces_worst_element_bit_for_bit(capsys, recorded, source):
    suite, out, df = recorded
    failing = df[df["status"] == "fail"]
    assert not failing.empty
    case_id = failing["case_id"].iloc[0]
    cases = {"suite": str(suite), "dir": str(out), "csv": str(out / "results.csv")}[source]
    where = [] if source == "suite" else INLINE
    capsys.readouterr()
    code = main(["replay", case_id, "--impl", BUG, "--cases", cases, "--device", "cpu", "--top", "3", *where])
    text = capsys.readouterr().out
    assert code == 1
    rows = df[df["case_id"] == case_id]
    checked = 0
    for _, row in rows.iterrows():
        if pd.isna(row["worst_index"]) and pd.isna(row["worst_got"]):
            continue
        idx, bits = _worst_from_output(text, row["output"], row["reference"])
        worst_index = str(row["worst_index"])
        assert idx == worst_index, (row["output"], row["reference"])
        assert bits == _expected_bits(row), (row["output"], row["reference"])
        checked += 1
    assert checked == len(rows) == 10
    assert f"case {case_id}" in text
    for k in ("exact=", "golden=", "ref=[", "ulp=", "scaled=", "abs=", "rel=", "gate=0x", "dy=0x"):
        assert k in text


def test_replay_structured_matches_recorded(recorded):
    from harness.impls.registry import resolve
    from harness.replay import find_case, run_case
    suite, out, df = recorded
    row = df[(df["status"] == "fail") & (df["output"] == "y")].iloc[0]
    case = find_case(row["case_id"], str(out))
    r = run_case(case, resolve(BUG), "cpu", top=1, isolate="inline")
    c = next(c for c in r.result.checks if c.output == "y" and c.reference.label == row["reference"])
    e = c.measured.elements[0]
    assert ",".join(map(str, e.index)) == str(row["worst_index"])
    assert e.got_hex == _expected_bits(row)
    assert c.status == "fail" and c.fail_kind == "over_budget"


def test_replay_of_a_case_given_as_json(capsys, recorded):
    """Cases from no suite (hypothesis, a list given to harness.verify) replay from their JSON."""
    import json
    from harness.replay import find_case
    suite, out, df = recorded
    case = find_case(df["case_id"].iloc[0], str(suite))
    text = json.dumps(case.params())
    assert main(["replay", case.case_id, "--impl", "torch", "--case", text, "--device", "cpu", "--top", "0",
                 *INLINE]) == 0
    assert main(["replay", "0" * 12, "--impl", "torch", "--case", text, *INLINE]) == 2
    assert main(["replay", case.case_id, "--impl", "torch", "--case", "{not json", *INLINE]) == 2
    assert "hash" in capsys.readouterr().err


def test_replay_of_a_sigmoid_case_given_as_json(capsys):
    """A sigmoid case replays from its JSON: the activation is one of its parameters, and the
    sigmoid mutant that ignores it fails there, naming the case."""
    import json

    from harness.cases.case import Case
    case = Case("bf16", "bf16", "bf16", (4, 32), False, 1e-5, "standard", "normal", "one", 0, activation="sigmoid")
    text = json.dumps(case.params())
    assert '"activation": "sigmoid"' in text
    assert main(["replay", case.case_id, "--impl", "torch", "--case", text, "--device", "cpu", "--top", "0",
                 *INLINE]) == 0
    capsys.readouterr()
    spec = "activation-ignored=harness.mutants:activation_ignored"
    assert main(["replay", case.case_id, "--impl", spec, "--case", text, "--device", "cpu", "--top", "1",
                 *INLINE]) == 1
    assert case.case_id in capsys.readouterr().out


def test_replay_out_writes_results(tmp_path, capsys, recorded):
    suite, out, df = recorded
    cid = df["case_id"].iloc[0]
    code = main(["replay", cid, "--impl", "torch", "--cases", str(suite), "--device", "cpu",
                 "--out", str(tmp_path / "r"), "--top", "1", *INLINE])
    assert code == 0
    got = pd.read_csv(tmp_path / "r" / "results.csv", dtype={"case_id": str})
    assert len(got) == 10 and set(got["status"]) == {"pass"} and set(got["case_id"]) == {cid}


def test_replay_unknown_id_is_usage_error(capsys, recorded):
    suite, out, _ = recorded
    for cases in (str(suite), str(out)):
        assert main(["replay", "000000000000", "--impl", "torch", "--cases", cases, *INLINE]) == 2
        err = capsys.readouterr().err
        assert "000000000000" in err and "Traceback" not in err


def test_replay_tampered_row_is_usage_error(tmp_path, capsys, recorded):
    _, out, df = recorded
    cid = df["case_id"].iloc[0]
    bad = df.copy()
    bad.loc[bad["case_id"] == cid, "seed"] = 12345
    f = tmp_path / "results.csv"
    bad.to_csv(f, index=False)
    assert main(["replay", cid, "--impl", "torch", "--cases", str(f), *INLINE]) == 2
    err = capsys.readouterr().err
    assert "hash" in err and cid in err
