"""Speed beside accuracy and determinism (results.csv columns): the median warm forward + backward
time, the bitwise comparison of later calls (a difference fails unless --allow-nondeterministic),
--repeats 0 — on the CPU, where the bandwidth floor is omitted — and the floor's bytes, each tensor
counted in the dtype it has (y in the activation dtype, which may be the weight's). The run whose
phases are checked has a worker (its start is a phase); the others run inline, as what they prove
is the columns."""
from __future__ import annotations

import textwrap

import pandas as pd
import pytest
import torch

from harness.cli import main
from harness.pipeline import call, gputime, speed
from tests.conftest import make_case, make_inputs, needs_cuda

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


def test_bytes_moved_counts_each_tensor_in_its_own_dtype():
    """Hand-counted, 3x8 (24 elements, hidden 8): bf16 x, gate and dy, a float32 weight. Per element
    x, gate, dy in (2 + 2 + 2 bytes), y (4 with a float32 activation, as act_follows="weight" gives
    HF Mamba2-style; 2 as x), dx, dgate out (2 + 2); per weight element 4 in and dweight's 4 out.
    The forward alone: x, gate, weight in, y out."""
    inp = make_inputs((3, 8), weight_dtype=torch.float32)
    assert call.bytes_moved(inp, torch.float32) == 24 * (2 + 2 + 2 + 4 + 2 + 2) + 8 * (4 + 4) == 400
    assert call.bytes_moved(inp, torch.float32, backward=False) == 24 * (2 + 2 + 4) + 8 * 4 == 224
    assert call.bytes_moved(inp, torch.bfloat16) == 24 * (2 + 2 + 2 + 2 + 2 + 2) + 8 * (4 + 4) == 352
    assert call.bytes_moved(inp, torch.bfloat16, backward=False) == 24 * (2 + 2 + 2) + 8 * 4 == 176


def test_the_floor_counts_y_in_the_activation_dtype(monkeypatch):
    """_gpu_speed's bytes and floor for a float32 activation, GPU time and bandwidth stood in for:
    4x32 bf16 x and gate, float32 weight, and dy (the activation dtype, generate's): 128 elements
    of 2 + 2 + 4 in and 4 + 2 + 2 out, 32 weight elements of 4 in and 4 out."""
    from harness.cases.generate import generate
    from harness.impls.torch_ref import chain
    base = generate(make_case(weight_dtype="fp32"), act_follows="weight")
    m = chain(32, eps=base.eps, zero_centered_gamma=False, dtype=base.weight.dtype, device="cpu")
    monkeypatch.setattr(gputime, "gpu_time", lambda *a, **k: (1e-6, "graph"))
    monkeypatch.setattr(speed, "copy_bandwidth", lambda device: 4e12)
    got = call._gpu_speed(m, m.weight, base, torch.float32, {}, 3, True, 2e-3, "cuda")
    assert got.bytes_moved == 128 * 16 + 32 * 8 == 2304
    assert got.floor_fraction == pytest.approx(2304 / 4e12 / 1e-6)


class _InWeightDtype(torch.nn.Module):
    """A module whose y follows the weight's dtype (HF Mamba2's `weight * xhat` promotes): x's
    chain, then y cast to the weight's dtype."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.weight = inner, inner.weight

    def forward(self, x, gate):
        return self.inner(x, gate).to(self.weight.dtype)


@needs_cuda
def test_on_cuda_the_floor_counts_y_in_the_weight_dtype():
    """A pair run on CUDA by an implementation whose y follows the weight (float32 beside bf16 x):
    its bytes_moved counts y (and dy) at 4 bytes, as the hand count above."""
    from harness.impls.base import from_factory
    from harness.impls.torch_ref import chain
    from harness.pipeline.settings import Settings

    def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
        inner = chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
        return _InWeightDtype(inner)
    impl = from_factory("fp32-y", make, "test", act_follows="weight")
    rec = call.run_calls(make_case(weight_dtype="fp32"), impl, Settings("cuda"))
    assert rec.status == "ran" and rec.speed is not None and rec.speed.gpu_method, rec.text
    assert rec.speed.bytes_moved == 128 * 16 + 32 * 8
