"""`harness exhaustive`, the command: results.csv in the sweep's schema with histogram.csv and
worst.csv, rows replaced per range, a worst pair's replay command, --resume by gate block, an --out
that is a file and bad arguments refused before any computation (exit 2, one line), its own
implementation names, and bench_exhaustive.py's use of the command's defaults."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from harness import exhaustive as E
from harness.cli import build_parser, main
from harness.exhaustive import progress as EP
from harness.exhaustive.metrics import TOPK
from harness.reports.schema import columns

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path, *extra):
    return main(["exhaustive", "--device", "cpu", "--out", str(tmp_path), *extra])


def test_cli_outputs_schema_histogram_worst(tmp_path):
    # x in [1, 1.06), gates -2 .. -3.4e38 (the silu' root, the saturation and the flush)
    args = ("--dtype", "bf16", "--x-range", "0x3f80:0x3f84", "--gate-range", "0xbf80:0xff80", "--chunk", "20000")
    assert _run(tmp_path, *args) == 0
    assert set(columns()) <= set((df := pd.read_csv(tmp_path / "results.csv")).columns)
    assert set(df["output"]) == {"y", "dn", "dgate"} and set(df["regime"]) == {"normal", "extreme"}
    assert (df["reference"] == "exact").all() and set(df["status"]) <= {"pass", "fail"}
    assert df["case_id"].str.match(r"exhaustive-bf16-[0-9a-f]{8}-(normal|extreme)$").all()
    n_pairs = 4 * (0x7f80 - 0x3f80)                     # all finite: 0xff80 (-inf) is excluded
    hist = pd.read_csv(tmp_path / "histogram.csv")
    for out in ("y", "dn", "dgate"):
        for metric in ("ulp", "scaled"):
            assert hist[(hist.output == out) & (hist.metric == metric)]["count"].sum() == n_pairs
        assert df[df.output == out]["n_elements"].sum() == n_pairs
    assert (df[df.regime == "extreme"]["budget"] == math.inf).all()      # report-only
    w = pd.read_csv(tmp_path / "worst.csv")
    assert set(w["metric"]) == {"ulp", "scaled"} and (w.groupby(["output", "regime", "metric"]).size() == TOPK).all()
    # rerunning the same range replaces its rows, a new range appends
    assert _run(tmp_path, *args) == 0
    assert len(pd.read_csv(tmp_path / "results.csv")) == len(df)
    assert _run(tmp_path, "--dtype", "bf16", "--x-range", "0x3f80:0x3f81", "--gate-range", "0x0:0x10") == 0
    assert len(pd.read_csv(tmp_path / "results.csv")) == len(df) + 3


def test_worst_pair_replays(tmp_path):
    assert _run(tmp_path, "--dtype", "bf16", "--x-range", "0x3f80:0x3fa0", "--gate-range", "0xc000:0xc2c0",
                "--dy", "0.75") == 0
    df = pd.read_csv(tmp_path / "results.csv")
    r = df[(df.output == "dgate") & (df.regime == "normal")].iloc[0]
    assert (argv := r["replay"].split()[1:])[:3] == ["exhaustive", "--dtype", "bf16"]
    assert main([*argv, "--out", str(tmp_path / "replay")]) == 0
    o = pd.read_csv(tmp_path / "replay" / "results.csv").query("output == 'dgate' and regime == 'normal'").iloc[0]
    assert o["max_scaled_err"] == r["max_scaled_err"] and o["n_elements"] == 1


def test_resume_by_range(tmp_path, monkeypatch, capsys):
    args = ("--dtype", "bf16", "--x-range", "0x3f80:0x3f90", "--gate-range", "0x3ff0:0x4010", "--chunk", "100")
    assert _run(tmp_path / "whole", *args) == 0
    real_save = EP.Checkpoint.save

    def save_then_stop(self, span):
        real_save(self, span)
        raise KeyboardInterrupt
    monkeypatch.setattr(EP.Checkpoint, "save", save_then_stop)
    assert _run(tmp_path / "cut", *args) == 130
    assert "rerun with --resume" in capsys.readouterr().err
    assert not (tmp_path / "cut" / "results.csv").exists()
    assert len(list((tmp_path / "cut").glob("*.progress.json"))) == 1
    monkeypatch.setattr(EP.Checkpoint, "save", real_save)
    seen = []
    real_blocks = E.enumerate.Setup.blocks
    monkeypatch.setattr(E.enumerate.Setup, "blocks", lambda self, skip=frozenset(): (
        seen.append(b) or b for b in real_blocks(self, skip)))
    assert _run(tmp_path / "cut", *args, "--resume") == 0
    assert "resuming: 1 of 2 gate blocks done" in capsys.readouterr().err
    assert [(b.lo, b.hi) for b in seen] == [(0x4000, 0x4010)]               # the finished block skipped
    for name in ("results.csv", "histogram.csv", "worst.csv"):      # all but the timing
        pd.testing.assert_frame_equal(*(pd.read_csv(tmp_path / d / name).drop(columns=["pair_seconds"], errors="ignore")
                                        for d in ("whole", "cut")))


@pytest.mark.parametrize("edit,says", [
    (lambda d: d.update(done=[["a", "b"]]), "is not a gate block of this run"),
    (lambda d: d.update(done=[[0x3ff0, 0x10000]]), "is not a gate block of this run"),
    (lambda d: d.update(acc={}), "do not cover every output and regime"),
    (lambda d: d["acc"]["y/normal"].update(pairs=-3), "not a whole number >= 0"),
    (lambda d: d["acc"]["y/normal"].update(pairs=1.5), "not a whole number >= 0"),
    (lambda d: d["acc"]["dgate/normal"].update(pairs=d["acc"]["dgate/normal"]["pairs"] + 1), "pair counts"),
    (lambda d: d.update(done=[]), "pair counts"),
    (lambda d: d["acc"]["y/normal"].update(max_ulp="abc"), "not a number >= 0"),
    (lambda d: d["acc"]["y/normal"].update(sum_scaled=-5.0), "not a number >= 0"),
])
def test_resume_refuses_a_progress_file_that_is_not_the_runs_own(tmp_path, monkeypatch, capsys, edit, says):
    """A progress file edited, cut or of another version is one line and exit 2, never folded
    into the run's results (nor a traceback)."""
    import json
    args = ("--dtype", "bf16", "--x-range", "0x3f80:0x3f90", "--gate-range", "0x3ff0:0x4010", "--chunk", "100")
    real_save = EP.Checkpoint.save

    def save_then_stop(self, span):
        real_save(self, span)
        raise KeyboardInterrupt
    monkeypatch.setattr(EP.Checkpoint, "save", save_then_stop)
    assert _run(tmp_path, *args) == 130
    monkeypatch.setattr(EP.Checkpoint, "save", real_save)
    (f,) = tmp_path.glob("*.progress.json")
    doc = json.loads(f.read_text())
    edit(doc)
    f.write_text(json.dumps(doc))
    capsys.readouterr()
    assert _run(tmp_path, *args, "--resume") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error: --resume: cannot read ") and says in err[0], err


def test_out_file_refused_before_any_computation(tmp_path, monkeypatch, capsys):
    (f := tmp_path / "file.csv").write_text("x")
    called = []
    monkeypatch.setattr(E.enumerate, "setup", lambda *a, **k: called.append(a))
    for out in (f, f / "sub"):
        assert main(["exhaustive", "--dtype", "bf16", "--device", "cpu", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "expected a directory" in err[0]
    assert not called and f.read_text() == "x"


@pytest.mark.parametrize("extra", [
    ["--x-range", "0x10:0x5"], ["--x-range", "zz"], ["--gate-range", "0:0x10001"], ["--x-range", "-1:4"],
    ["--x-range", "0x7f81:0x7fc0"],                   # only NaN patterns: no finite value
    ["--impl", "bogus"], ["--device", "cuda"] if not torch.cuda.is_available() else ["--impl", "nope"],
    ["--dy", "abc"], ["--dy", "1e39"], ["--chunk", "0"],
])
def test_bad_arguments_exit_2(tmp_path, capsys, extra):
    argv = ["exhaustive", "--dtype", "bf16", "--out", str(tmp_path / "o"), *extra]
    if "--device" not in extra:
        argv += ["--device", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error:")
    assert not (tmp_path / "o").exists()


def test_bench_uses_the_cli_defaults(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_exhaustive", ROOT / "bench" / "bench_exhaustive.py")
    spec.loader.exec_module(bench := importlib.util.module_from_spec(spec))
    for dtype in ("bf16", "fp16"):
        argv = bench.cli_argv(dtype, "cpu", str(tmp_path))
        assert (p := bench.inner_params(argv)) == E.run_params(build_parser().parse_args(argv))
        assert p.chunk == E.default_chunk("cpu") and (p.x_range, p.gate_range) == ((0, 1 << 16), (0, 1 << 16))
    assert E.default_chunk("cuda") == 1 << 26 and E.default_chunk("cpu") < E.default_chunk("cuda")
    args = build_parser().parse_args(["exhaustive", "--dtype", "bf16", "--out", str(tmp_path)])
    assert args.chunk is None and args.device == "auto" and args.impl == E.DEFAULT


def test_implementation_names_are_its_own(capsys, tmp_path):
    """The exhaustive mode runs SiLUGate alone: none of its names is one of the sweep's built-ins
    (`--impl torch` there is not the sweep's torch), and asking for a built-in says so."""
    from harness.impls.registry import builtins
    assert E.DEFAULT in E.IMPLS and not set(E.IMPLS) & set(builtins())
    assert _run(tmp_path, "--dtype", "bf16", "--impl", "torch") == 2
    assert "SiLUGate alone, as silugate-eager, silugate-silu-lowp" in capsys.readouterr().err
