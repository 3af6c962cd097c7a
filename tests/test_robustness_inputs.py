"""Bad input files, output paths in the way, names pandas reads as missing, NaN references: each
is refused with one line and exit 2 before the sweep starts (nothing run, nothing written), or —
for NaN — fails the check. The process-level classes are tests/test_robustness.py's."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from harness.reports.rundir import read_csv, read_results
from tests.test_robustness import TWO, one_line_usage, run

HEADER = "impl,rounding,dtype,output,reference,regime,metric,budget\n"


# ---------------------------------------------------------------------- 7: files

def _nothing_ran(out: Path, err: str) -> bool:
    return not (out / "results.csv").exists() and "[1/" not in err and "cases x" not in err


@pytest.mark.parametrize("content", [
    b"",                                                                  # empty
    b"a,b\n1,2\n",                                                        # not a results.csv
    b"\xff\xfe\x00garbage\x00\xff\n\x81\x82",                             # not text
])
def test_bad_baseline_file_exits_2_before_the_sweep(capsys, tmp_path, content):
    (tmp_path / "s.toml").write_text(TWO)
    base = tmp_path / "base"
    base.mkdir()
    (base / "results.csv").write_bytes(content)
    out = tmp_path / "o"
    code, o, e = run(capsys, "run", "--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu",
                     "--out", out, "--baseline", base)
    assert one_line_usage(code, e), e
    assert _nothing_ran(out, e)


def test_missing_or_unreadable_baseline_exits_2_before_the_sweep(capsys, tmp_path):
    (tmp_path / "s.toml").write_text(TWO)
    out = tmp_path / "o"
    unreadable = tmp_path / "u"
    (unreadable / "results.csv").mkdir(parents=True)        # a directory where the file should be
    for base in (tmp_path / "nowhere", tmp_path, unreadable):
        code, o, e = run(capsys, "run", "--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu",
                         "--out", out, "--baseline", base)
        assert one_line_usage(code, e), e
        assert _nothing_ran(out, e)


@pytest.mark.parametrize("line,field", [
    ("*,chian,*,y,*,*,ulp,1", "rounding"), ("*,*,bf61,y,*,*,ulp,1", "dtype"), ("*,*,*,yy,*,*,ulp,1", "output"),
    ("*,*,*,y,exakt,*,ulp,1", "reference"), ("*,*,*,y,*,normall,ulp,1", "regime"),
    ("*,*,*,y,*,*,ulps,1", "metric"),
])
def test_budget_file_typo_exits_2_with_its_line(capsys, tmp_path, line, field):
    (tmp_path / "s.toml").write_text(TWO)
    b = tmp_path / "b.csv"
    b.write_text("# budgets\n" + HEADER + "*,*,*,dx,*,*,scaled,2\n" + line + "\n")
    out = tmp_path / "o"
    code, o, e = run(capsys, "run", "--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu",
                     "--out", out, "--budgets", b)
    assert one_line_usage(code, e), e
    assert f"{b}: line 4: " in e and field in e
    assert _nothing_ran(out, e)


def test_non_utf8_budget_file_exits_2_one_line(capsys, tmp_path):
    (tmp_path / "s.toml").write_text(TWO)
    b = tmp_path / "b.csv"
    b.write_bytes(HEADER.encode() + b"*,*,*,y,*,*,ulp,1 \xff\xfe\n")
    code, o, e = run(capsys, "run", "--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu",
                     "--out", tmp_path / "o", "--budgets", b)
    assert one_line_usage(code, e) and "line 2" in e and "UTF-8" in e, e


def test_output_paths_are_checked_before_the_work(capsys, tmp_path):
    (tmp_path / "s.toml").write_text(TWO)
    run_args = ["run", "--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu"]
    d = tmp_path / "adir"
    d.mkdir()
    blocked = tmp_path / "blocked"
    (blocked / "summary.csv").mkdir(parents=True)           # a run's own file name taken by a directory
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [   # (argv, what the one line says)
        (run_args + ["--out", tmp_path / "o1", "--junit", d], "is a directory"),
        (run_args + ["--out", tmp_path / "o1", "--junit", afile / "j.xml"], f"--junit {afile / 'j.xml'}: {afile} is "
                                                                            f"not a directory"),
        (["merge", tmp_path / "nowhere", "--out", tmp_path / "m", "--junit", afile / "j.xml"], "is not a directory"),
        (run_args + ["--out", blocked], "summary.csv is a directory"),
        (run_args + ["--out", afile], "cannot create the directory"),
        (run_args + ["--out", tmp_path / "o2", "--golden", afile], "--golden"),
        (["replay", "0123456789ab", "--impl", "torch", "--cases", tmp_path / "s.toml", "--out", afile],
         "is a file, expected a directory"),
        (["budgets", "regen", "--from", tmp_path / "nowhere", "-o", d], "is a directory"),
        (["budgets", "regen", "--from", tmp_path / "nowhere", "-o", tmp_path / "no" / "b.csv"], "no directory"),
    ]
    for argv, says in cases:
        code, o, e = run(capsys, *argv)
        assert one_line_usage(code, e) and says in e, (argv, e)
        assert "[1/" not in e and "cases x" not in e
    assert not (tmp_path / "o1").exists() and not (blocked / "results.csv").exists()


def test_budgets_regen_is_atomic(capsys, tmp_path, monkeypatch):
    (tmp_path / "s.toml").write_text(TWO)
    src = tmp_path / "src"
    assert run(capsys, "run", "--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu", "--out", src,
               "--no-report", "--isolate", "inline", "--repeats", "0")[0] == 0
    target = tmp_path / "budgets.csv"
    target.write_text("OLD\n")

    def boom(lines):
        raise RuntimeError("cut short")
    import harness.budgets
    monkeypatch.setattr(harness.budgets, "budget_file_text", boom)
    code, o, e = run(capsys, "budgets", "regen", "--from", src, "-o", target)
    assert code == 3
    assert target.read_text() == "OLD\n" and sorted(p.name for p in tmp_path.iterdir()) == \
        ["budgets.csv", "s.toml", "src"]                      # no half-written or temporary file
    monkeypatch.undo()
    code, o, e = run(capsys, "budgets", "regen", "--from", src, "-o", target)
    assert code == 0 and target.read_text().startswith("impl,rounding,math,dtype,")


def test_written_files_have_normal_permissions(capsys, tmp_path):
    (tmp_path / "s.toml").write_text(TWO)
    old = os.umask(0o002)
    try:
        out, junit = tmp_path / "o", tmp_path / "j" / "junit.xml"
        code, o, e = run(capsys, "run", "--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu",
                         "--out", out, "--junit", junit, "--isolate", "inline", "--repeats", "0")
        assert code == 0, o + e
    finally:
        os.umask(old)
    for f in ("results.csv", "summary.csv", "report.html", "timing.csv", "pair-timing.csv"):
        assert (out / f).stat().st_mode & 0o777 == 0o664, f
    assert junit.stat().st_mode & 0o777 == 0o664
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_file_that_cannot_be_written_is_named_and_the_old_one_kept(tmp_path, monkeypatch):
    """A write's error names no file (a full disk: ENOSPC at the write or the fsync): the error
    raised names the file being written; the file already there is left whole, no temporary beside it."""
    import errno

    from harness.references.atomic import atomic_write
    target = tmp_path / "report.html"
    target.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as ei:
        with atomic_write(target, "w") as f:
            f.write("new")
    assert ei.value.errno == errno.ENOSPC and ei.value.filename == str(target), ei.value
    assert str(target) in str(ei.value)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["report.html"]

# ---------------------------------------------------------------------- 8: names pandas reads as missing

@pytest.mark.parametrize("name", ["NA", "None", "nan", "null", "NaN", "NULL", "n/a"])
def test_missing_value_names_are_refused_at_impl(capsys, tmp_path, name):
    (tmp_path / "two.toml").write_text(TWO)
    code, o, e = run(capsys, "run", "--impl", f"{name}=harness.impls.torch_ref:chain", "--cases",
                     tmp_path / "two.toml", "--device", "cpu", "--out", tmp_path / "o")
    assert one_line_usage(code, e), e
    if "/" not in name:                     # "n/a" is not even a valid NAME=MODULE:ATTR
        assert "reads as a missing value" in e
    assert not (tmp_path / "o").exists()


def test_missing_value_names_are_refused_through_the_api():
    import harness
    from harness.impls.registry import resolve
    from harness.references.errors import UsageError
    impl = replace(resolve("torch"), name="None", spec="")
    with pytest.raises(UsageError, match="missing value"):
        harness.verify(impl, cases="quick", device="cpu")

    def null(h, **kw):
        pass
    with pytest.raises(UsageError, match="missing value"):
        harness.verify(null, cases="quick", device="cpu")


def test_csv_reads_keep_names_as_text(tmp_path):
    """Even a results.csv written by something else: impl and case ids stay the strings they were."""
    names = ["NA", "None", "nan", "null", "NaN", "N/A", "#N/A", "<NA>", "-nan", "1.#IND"]
    df = pd.DataFrame({"case_id": ["0123456789ab", "000000000001"] * 5, "impl": names, "output": "y",
                       "reference": "exact", "status": "skip", "max_ulp": [0.5, ""] * 5, "reason": ""})
    p = tmp_path / "results.csv"
    df.to_csv(p, index=False)
    back = read_results(p)
    assert back["impl"].tolist() == names and back["case_id"].tolist() == df["case_id"].tolist()
    assert back["reason"].tolist() == [""] * 10
    assert back["max_ulp"].isna().tolist() == [False, True] * 5
    assert read_csv(p, text=("impl",))["impl"].tolist() == names


# ---------------------------------------------------------------------- 9: NaN against a NaN reference

def test_nan_against_a_nan_reference_fails(inputs_factory):
    from harness.analysis.check import checks, rows
    from harness.analysis.result import PairResult
    from harness.impls.registry import resolve
    from harness.pipeline.call import first_call, make_module
    from harness.references.bundle import build
    from tests.conftest import make_case
    inp = inputs_factory((2, 16))
    x = inp.x.clone()
    x[0, 3] = float("nan")
    inp = replace(inp, x=x)
    impl = resolve("torch")
    outputs, problems, _ = first_call(*make_module(impl, inp, "cpu", {}), inp, torch.bfloat16, "cpu")
    assert not problems and all(bool(t.isnan().any()) for t in outputs.values())
    case = make_case(shape=(2, 16))
    outputs["y_infer"] = outputs["y"]                  # the inference path's y: the same NaN reference
    got = rows(PairResult(case, impl, "cpu", "bf16", checks(case, impl, build(inp, "auto"), outputs, {}, {})))
    assert len(got) == 10
    for r in got:
        assert r["status"] == "fail" and r["fail_kind"] == "nan_reference", r
        assert "reference is NaN" in r["reason"] and "never passes" in r["reason"]


RUN = ["run", "--impl", "torch", "--device", "cpu", "--isolate", "inline", "--repeats", "0", "--no-report"]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """One passing run of TWO (its suite and results), for the tests that edit a copy of its file."""
    from harness.cli import main
    d = tmp_path_factory.mktemp("good")
    (d / "s.toml").write_text(TWO)
    assert main([str(a) for a in (*RUN, "--cases", d / "s.toml", "--out", d / "good")]) == 0
    return d / "s.toml", read_results(d / "good" / "results.csv")


@pytest.mark.parametrize("edit,needle", [
    (lambda d, p: d.assign(max_ulp=d["max_ulp"].where(~p, float("nan")), budget_metric="ulp"),
     "says pass with ulp nan"),
    (lambda d, p: d.assign(fail_kind=d["fail_kind"].astype(object).where(~p, "contract")), "fail kind 'contract'"),
    (lambda d, p: d.assign(status=d["status"].where(~p, "banana")), "status 'banana' is not one of"),
    (lambda d, p: d.drop(columns="budget"), "no column 'budget'"),
])
def test_a_results_file_whose_passes_its_numbers_deny_is_refused_by_every_reader(capsys, tmp_path, good_run, edit,
                                                                                  needle):
    """merge, report, --resume and --baseline gate on rows read back: a pass they cannot confirm
    from the row's own numbers (NaN, a fail kind, an unknown status, no budget) is the file's error."""
    suite, df = good_run
    args = [*RUN, "--cases", suite]
    first_pass = (df["status"] == "pass") & (df.index == df.index[df["status"] == "pass"][0])
    bad = tmp_path / "bad"
    bad.mkdir()
    edit(df.copy(), first_pass).to_csv(bad / "results.csv", index=False)
    for argv in (["report", bad], ["merge", bad, "--out", tmp_path / "m"], [*args, "--out", bad, "--resume"],
                 [*args, "--out", tmp_path / "o", "--baseline", bad]):
        code, o, e = run(capsys, *argv)
        assert one_line_usage(code, e) and needle in e, (argv[0], e)


@pytest.mark.parametrize("column", ["device", "budget_metric", "out_dtype", "rounding", "max_ulp"])
def test_a_results_file_missing_a_column_its_reader_uses_is_one_line(capsys, tmp_path, good_run, column):
    """Each reader names the column it lacks (exit 2), not a KeyError (exit 3) — for --baseline,
    before the sweep."""
    suite, df = good_run
    args = [*RUN, "--cases", suite]
    bad = tmp_path / "bad"
    bad.mkdir()
    df.drop(columns=column).to_csv(bad / "results.csv", index=False)
    readers = [["merge", bad, "--out", tmp_path / "m"], [*args, "--out", bad, "--resume"],
               ["budgets", "regen", "--from", bad, "-o", tmp_path / "b.csv"]]
    if column in ("budget_metric", "max_ulp"):
        readers.append([*args, "--out", tmp_path / "o", "--baseline", bad])
    for argv in readers:
        code, o, e = run(capsys, *argv)
        if argv[0] == "budgets" and column == "device":          # regen reads no device
            assert code == 0, e
            continue
        assert one_line_usage(code, e) and repr(column) in e, (argv[:2], e)
    assert not (tmp_path / "o").exists() or not (tmp_path / "o" / "results.csv").exists()


def test_a_baseline_with_nothing_to_compare_says_so(capsys, tmp_path):
    (tmp_path / "s.toml").write_text(TWO)
    args = ["run", "--cases", tmp_path / "s.toml", "--device", "cpu", "--isolate", "inline", "--repeats", "0",
            "--no-report"]
    assert run(capsys, *args, "--impl", "torch-fused", "--out", tmp_path / "base")[0] == 0
    code, o, e = run(capsys, *args, "--impl", "torch", "--out", tmp_path / "o", "--baseline", tmp_path / "base")
    assert code == 0 and "--baseline: no check of this run has a value there to compare with" in o + e
    code, o, e = run(capsys, *args, "--impl", "torch-fused", "--out", tmp_path / "o2", "--baseline", tmp_path / "base")
    assert code == 0 and "nothing was compared" not in o + e and "ran on" not in o + e
    other = tmp_path / "other" / "results.csv"                      # the same checks, from another device
    other.parent.mkdir()
    other.write_text((tmp_path / "base" / "results.csv").read_text().replace(",cpu,", ",cuda,"))
    code, o, e = run(capsys, *args, "--impl", "torch-fused", "--out", tmp_path / "o3", "--baseline", other)
    assert code == 0 and "--baseline: its checks ran on cuda, this run's on cpu: compared all the same" in o + e
    assert read_results(tmp_path / "o3" / "results.csv")["baseline_value"].notna().any()
    # only other implementations' checks from there: nothing compared, so no word of its device
    code, o, e = run(capsys, *args, "--impl", "torch", "--out", tmp_path / "o4", "--baseline", other)
    assert code == 0 and "nothing was compared" in o + e and "ran on" not in o + e


@pytest.mark.parametrize("column,value,says", [
    ("shape", "4x-64", "shape"),                                  # a case that is not one
    ("max_ulp", "-5.0", "column max_ulp: -5.0 is negative"),      # an error below 0
    ("schema_version", "999", "schema version 999, newer than this harness's"),
    ("n_elements", "abc", "column n_elements: 'abc' is not a number"),
    ("eps", "0.5", "its parameters hash to"),                    # a second row of a case, edited alone
    ("row", "twice", "is in it twice: not one run's results.csv"),
])
def test_every_reader_refuses_an_edited_results_csv_alike(capsys, tmp_path, column, value, says):
    """report, a baseline, merge and --resume read a results.csv through one set of checks
    (harness.reports.trust): what one refuses, none takes at its word — one line, exit 2."""
    (tmp_path / "s.toml").write_text(TWO)
    src = tmp_path / "src"
    base = ["--impl", "torch", "--cases", tmp_path / "s.toml", "--device", "cpu", "--no-report"]
    assert run(capsys, "run", *base, "--out", src)[0] == 0
    df = read_csv(src / "results.csv")
    if column == "row":                                           # a row written twice
        df = pd.concat([df, df.iloc[:1]], ignore_index=True)
    else:
        df[column] = df[column].astype(str)
        df.loc[1 if column == "eps" else 0, column] = value
    df.to_csv(src / "results.csv", index=False)
    readers = [["report", src], ["run", *base, "--out", tmp_path / "b", "--baseline", src],
               ["merge", src, "--out", tmp_path / "m"]]
    if column != "row":          # --resume keeps a key's last row: a sweep killed and resumed may have written it twice
        readers.append(["run", *base, "--out", src, "--resume"])
    for argv in readers:
        code, _, e = run(capsys, *argv)
        assert one_line_usage(code, e) and says in e, (argv, e)


def test_an_exhaustive_runs_directory_reports(capsys, tmp_path):
    """Its rows name ranges of bit patterns, not Cases: `harness report` takes them as they are."""
    assert run(capsys, "exhaustive", "--dtype", "bf16", "--device", "cpu", "--x-range", "0x3f80:0x3f82",
               "--gate-range", "0x3f80:0x3f88", "--out", tmp_path)[0] in (0, 1)
    code, _, e = run(capsys, "report", tmp_path)
    assert code == 0 and (tmp_path / "report.html").is_file(), e
