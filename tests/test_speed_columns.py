"""Speed beside accuracy and determinism (results.csv columns): the median warm forward + backward
time, the bitwise comparison of later calls (a difference fails unless --allow-nondeterministic),
--repeats 0 — on the CPU, where the bandwidth floor is omitted. The run whose phases are checked
has a worker (its start is a phase); the others run inline, as what they prove is the columns."""
from __future__ import annotations

import textwrap

import pandas as pd
import pytest

from harness.cli import main

SUITE = """
[[group]]
dtype = ["bf16"]
weight_dtype = ["fp32"]         # a float32 dweight shows the last bits a summation order changes
shape = [[64, 32], [8, 16]]
"""
INLINE = ["--isolate", "inline"]

SHUFFLED = '''
import torch
from harness.mutant_base import DweightSummedBy, PerTokenWeight

class _ShuffledSum(PerTokenWeight):
    """dweight's token sum in a random order each call: accurate, not repeatable bit for bit."""
    @staticmethod
    def backward(ctx, grad):
        order = torch.randperm(grad.shape[0])
        acc = torch.zeros(grad.shape[1], dtype=torch.float32)
        for i in order.tolist():
            acc = acc + grad[i]
        return acc.to(ctx.dtype), None

class Shuffled(DweightSummedBy):
    reduction = _ShuffledSum

def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return Shuffled(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
make.supports = lambda case: "no zero-centred gamma" if case.zero_centered_gamma else None
'''


@pytest.fixture
def env(tmp_path, monkeypatch):
    (tmp_path / "s.toml").write_text(SUITE)
    (tmp_path / "shuffled_mod.py").write_text(textwrap.dedent(SHUFFLED))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def results(d):
    return pd.read_csv(d / "results.csv", dtype={"case_id": str})


def test_timing_and_determinism_columns(env):
    assert main(["run", "--impl", "torch", "--cases", "s.toml", "--device", "cpu", "--out", "o", "--no-report"]) == 0
    df = results(env / "o")
    assert (df["impl_seconds"] > 0).all() and df["repeatable"].all() and (df["differing_elements"] == 0).all()
    assert df["bytes_moved"].isna().all() and df["floor_fraction"].isna().all()       # no floor on the CPU
    assert (df.groupby("case_id")["impl_seconds"].nunique() == 1).all()                  # one figure a pair
    assert df["gpu_seconds"].isna().all() and df["gpu_method"].isna().all()             # no GPU time on the CPU
    t = dict(pd.read_csv(env / "o" / "timing.csv").itertuples(index=False))
    phases = {k.removeprefix("phase:"): v for k, v in t.items() if k.startswith("phase:")}
    assert set(phases) == {"startup", "worker_start", "sweep", "write", "report", "other", "total"}
    assert phases["report"] == 0 and min(phases.values()) >= -0.01 and phases["sweep"] > 0
    assert phases["total"] >= phases["startup"] + phases["sweep"] + phases["write"]
    assert phases["worker_start"] + phases["sweep"] == pytest.approx(t["wall"])
    assert t["share:implementations"] == pytest.approx(t["impl:torch"] + t["timing"])
    assert t["share:harness"] == pytest.approx(t["references"] + t["analysis"])
    assert main(["report", "o"]) == 0                         # the report's environment carries the split
    assert f"first calls {t['share:first_calls']:.1f}" in (env / "o" / "report.html").read_text()
    assert main(["run", "--impl", "torch", "--cases", "s.toml", "--device", "cpu", "--out", "o0", "--repeats", "0",
                 "--no-report", *INLINE]) == 0
    assert results(env / "o0")["impl_seconds"].isna().all()


def test_non_repeatable_outputs_fail_unless_allowed(env, capsys):
    spec = "shuffled=shuffled_mod:make"
    assert main(["run", "--impl", spec, "--cases", "s.toml", "--device", "cpu", "--out", "b", "--no-report",
                 *INLINE]) == 1
    df = results(env / "b")
    bad = df[df["status"] == "fail"]
    assert set(bad["output"]) == {"dweight"} and (bad["fail_kind"] == "not_repeatable").all()
    assert bad["reason"].str.contains("not repeatable: ").all() and bad["reason"].str.contains(r" then ").all()
    assert main(["run", "--impl", spec, "--cases", "s.toml", "--device", "cpu", "--out", "b", "--no-report",
                 "--require-repeatable", *INLINE]) == 1                                         # the default, said
    assert main(["run", "--impl", spec, "--cases", "s.toml", "--device", "cpu", "--out", "a", "--no-report",
                 "--allow-nondeterministic", *INLINE]) == 0
    df = results(env / "a")
    dw = df[df["output"] == "dweight"]
    big = dw[dw["tokens"] == 64]
    assert (~big["repeatable"].astype(bool)).all() and (big["differing_elements"] > 0).all()
    assert df[df["output"] == "y"]["repeatable"].all()                                  # only dweight differs
    capsys.readouterr()
    assert main(["run", "--impl", spec, "--cases", "s.toml", "--device", "cpu", "--out", "c", "--no-report",
                 "--allow-nondeterministic", "--require-repeatable", *INLINE]) == 2
    assert "contradict" in capsys.readouterr().err
