"""Forward-only implementations (`factory.backward = False`) and the inference path (y_infer): what
SPEC §3 says — a forward-only kernel's y is checked and its backward outputs skipped; every
implementation's forward is run again under torch.inference_mode() and torch.no_grad(), and a kernel
wrong only there is caught."""
from __future__ import annotations

import textwrap

import pandas as pd
import pytest
import torch

from harness.analysis import check
from harness.analysis.check import FORWARD_ONLY
from harness.cli import main
from harness.impls import registry
from harness.mutants import MUTANTS
from harness.references.errors import UsageError
from harness.reports.realised import model_fits, verdict_line
from tests.conftest import make_case, pair_rows

# A forward-only kernel as the serving stacks ship them: an autograd Function with no backward,
# which asserts that the harness never asks it for a gradient.
FORWARD_ONLY_BODY = """
import torch
import torch.nn.functional as F
from torch import nn


class _NoBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gate, w, eps):
        xf = x.float()
        n = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()
        return (n * ACT(gate.float())).to(x.dtype)


class Fwd(nn.Module):
    def __init__(self, hidden_size, eps, dtype, device):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype, device=device))
        self.eps = eps

    def forward(self, x, gate):
        assert not (x.requires_grad or gate.requires_grad), "a forward-only kernel got inputs that require grad"
        return _NoBackward.apply(x, gate, self.weight, self.eps)


def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return Fwd(hidden_size, eps, dtype, device)


make.rounding = "fused"
make.backward = False
make.supports = lambda case: "no zero-centred gamma" if case.zero_centered_gamma else None
"""
GOOD = "ACT = F.silu\n"
BAD = "ACT = lambda t: F.silu(t.to(torch.bfloat16)).float()    # SiLU in bf16\n"

SUITE = """
name = "fwd"
[[group]]
dtype = ["bf16"]
shape = [[4, 32]]
gate_dist = ["normal", "negative"]
"""


def plugin(tmp_path, monkeypatch, act: str, extra: str = "") -> str:
    name = f"fwd_{tmp_path.name.replace('-', '_')}"
    head = "import torch\nimport torch.nn.functional as F\n"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(head + act + FORWARD_ONLY_BODY + extra))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def sweep(capsys, tmp_path, spec: str, *more) -> tuple[int, pd.DataFrame, str]:
    """`harness run` inline (both pipelines: test_forward_only_through_both_pipelines)."""
    (tmp_path / "s.toml").write_text(SUITE)
    code = main(["run", "--impl", spec, "--cases", str(tmp_path / "s.toml"), "--device", "cpu",
                 "--out", str(tmp_path / "out"), "--no-report", "--isolate", "inline", *more])
    err = capsys.readouterr().err
    return code, pd.read_csv(tmp_path / "out" / "results.csv", dtype=str), err


def test_forward_only_plugin_passes_with_its_backward_skipped(capsys, tmp_path, monkeypatch):
    mod = plugin(tmp_path, monkeypatch, GOOD)
    assert registry.resolve(f"fwd={mod}:make").backward is False
    code, df, err = sweep(capsys, tmp_path, f"fwd={mod}:make")
    assert code == 0, err
    fwd = df[df["output"].isin(["y", "y_infer"])]
    assert len(fwd) == 2 * 2 * 2 and (fwd["status"] == "pass").all()
    back = df[df["output"].isin(["dx", "dgate", "dweight"])]
    assert len(back) == 2 * 3 * 2 and (back["status"] == "skip").all() and (back["fail_kind"] == "skip").all()
    assert (back["reason"].str.contains(FORWARD_ONLY, regex=False)).all()


def test_forward_only_plugin_with_a_wrong_y_is_caught(capsys, tmp_path, monkeypatch):
    mod = plugin(tmp_path, monkeypatch, BAD)
    code, df, _ = sweep(capsys, tmp_path, f"fwd={mod}:make")
    assert code == 1
    bad = df[df["status"] == "fail"]
    assert set(bad["output"]) == {"y", "y_infer"} and set(bad["fail_kind"]) == {"over_budget"}


def test_backward_must_be_a_bool(tmp_path, monkeypatch):
    mod = plugin(tmp_path, monkeypatch, GOOD, "make.backward = 'no'\n")
    with pytest.raises(UsageError, match="backward is 'no'; expected True or False"):
        registry.resolve(f"fwd={mod}:make")


def test_identify_names_the_model_from_y_alone(capsys, tmp_path, monkeypatch):
    mod = plugin(tmp_path, monkeypatch, GOOD)
    code, df, _ = sweep(capsys, tmp_path, f"fwd={mod}:make")
    fit = model_fits(df)
    line = verdict_line("fwd", fit[fit["impl"] == "fwd"])
    assert line == "fwd realises fused, accurate math (from y alone: no backward output was measured)"


def test_budgets_regen_folds_y_infer_into_y():
    """One budget for one value, whichever path computed it: y_infer's maximum raises y's line."""
    from harness.budgets import regen
    rows = pd.DataFrame({"impl": "k", "rounding": "fused", "out_dtype": "bf16", "output": ["y", "y_infer"],
                         "reference_kind": "model", "regime": "normal", "budget_metric": "ulp", "status": "pass",
                         "max_ulp": [0.3, 0.9], "budget": 0.5})
    lines, grown, _ = regen(rows)
    assert [(ln["output"], ln["budget"]) for ln in lines] == [("y", 0.9)] and len(grown) == 1


def _rows(impl_name: str, case=None):
    impl = registry.resolve(f"{impl_name}=harness.mutants:{impl_name.replace('-', '_')}") \
        if impl_name in MUTANTS else registry.resolve(impl_name)
    return pair_rows(case or make_case(), impl)


def test_wrong_only_without_grad_is_caught_on_y_infer():
    got = {r["output"]: r for r in _rows("inference-path-silu-in-bf16") if r["reference"] != "exact"}
    assert got["y"]["status"] == "pass"
    assert got["y_infer"]["status"] == "fail" and got["y_infer"]["fail_kind"] == "over_budget"


def test_y_infer_reuses_y_measurement_where_the_bits_are_the_same(monkeypatch):
    """torch's inference path is its training path: y_infer's rows are y's, and y is compared once
    per reference; the mutant's differ, and y_infer is compared on its own."""
    calls = []
    real = check.compare
    monkeypatch.setattr(check, "compare", lambda got, *a, **k: calls.append(got) or real(got, *a, **k))
    rows = _rows("torch")
    assert len(calls) == 4 * 2                                   # y, dx, dgate, dweight x (exact, model)
    y = {r["reference"]: r for r in rows if r["output"] == "y"}
    for r in (r for r in rows if r["output"] == "y_infer"):
        same = {k: v for k, v in r.items() if k != "output"}
        assert same == {k: v for k, v in y[r["reference"]].items() if k != "output"}
    calls.clear()
    _rows("inference-path-silu-in-bf16")
    assert len(calls) == 5 * 2


NO_GRAD_DIFFERS = """
import torch
from harness.impls.torch_ref import chain


class Flip(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.weight = inner, inner.weight

    def forward(self, x, gate):
        y = self.inner(x, gate)
        if not torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            y = y.clone()
            y.view(-1)[5] = torch.nextafter(y.view(-1)[5], torch.tensor(float("inf"), dtype=y.dtype))
        return y


def make(hidden_size, **kw):
    return Flip(chain(hidden_size, **kw))
"""


def test_no_grad_must_give_the_inference_mode_bits(tmp_path, monkeypatch):
    (tmp_path / "flipmod.py").write_text(NO_GRAD_DIFFERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    impl = registry.resolve("flip=flipmod:make")
    rows = {(r["output"], r["reference"]): r for r in pair_rows(make_case(), impl)}
    r = rows[("y_infer", "model:chain")]
    assert r["status"] == "fail" and r["fail_kind"] == "not_repeatable"
    assert r["differing_elements"] == 1 and r["differing_index"] == "0,5"
    assert rows[("y", "model:chain")]["status"] == "pass"


def test_no_grad_y_on_another_device_fails_y_infer_and_keeps_the_pair(tmp_path, monkeypatch):
    """A y the no_grad call returns on another device is a difference of every element (y_infer
    not_repeatable), never an exception that would turn the pair's computed rows into errors."""
    (tmp_path / "metamod.py").write_text(NO_GRAD_DIFFERS.replace(
        "            y = y.clone()\n            y.view(-1)[5] = torch.nextafter(y.view(-1)[5], torch.tensor(float(\"inf\"), "
        "dtype=y.dtype))\n", "            y = y.to('meta')\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = {(r["output"], r["reference"]): r for r in pair_rows(make_case(), registry.resolve("m=metamod:make"))}
    r = rows[("y_infer", "model:chain")]
    assert r["status"] == "fail" and r["fail_kind"] == "not_repeatable" and r["differing_elements"] == 4 * 32
    assert all(rows[(o, "model:chain")]["status"] == "pass" for o in ("y", "dx", "dgate", "dweight"))


def test_inference_path_that_raises_is_an_error_of_y_infer(tmp_path, monkeypatch):
    (tmp_path / "raisemod.py").write_text(NO_GRAD_DIFFERS.replace(
        "        y = self.inner(x, gate)\n",
        "        if torch.is_inference_mode_enabled():\n            raise RuntimeError('no inference')\n"
        "        y = self.inner(x, gate)\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = pair_rows(make_case(), registry.resolve("r=raisemod:make"))
    bad = [r for r in rows if r["status"] != "pass"]
    assert {r["output"] for r in bad} == {"y_infer"} and {r["fail_kind"] for r in bad} == {"error"}
    assert all("the inference path raised RuntimeError: no inference" in r["reason"] for r in bad)


@pytest.mark.parametrize("isolate", ["inline", "process"])
def test_forward_only_through_both_pipelines(tmp_path, monkeypatch, isolate):
    mod = plugin(tmp_path, monkeypatch, GOOD)
    monkeypatch.chdir(tmp_path)
    rows = pair_rows(make_case(), registry.resolve(f"fwd={mod}:make"), isolate=isolate)
    assert {r["output"]: r["status"] for r in rows} == {"y": "pass", "y_infer": "pass", "dx": "skip",
                                                         "dgate": "skip", "dweight": "skip"}
    assert torch.is_grad_enabled()
