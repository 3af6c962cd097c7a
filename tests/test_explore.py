"""Hypothesis exploration (`harness run --cases hypothesis`, harness/explore.py): a bug that shows
only on wide rows is found and shrunk to a small suite entry that still fails; a correct
implementation passes."""
from __future__ import annotations

import re

import pandas as pd
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from harness.cases.case import Case
from harness.cases.strategies import MAX_HIDDEN, MAX_TOKENS, cases, inputs
from harness.cases.suite import parse_suite
from harness.explore import explore, format_exploration
from harness.impls.base import from_factory
from harness.impls.registry import resolve
from harness.impls.torch_ref import GatedRMSNorm
from harness.pipeline.settings import Settings
from tests.conftest import pair_rows


def print_exploration(e) -> int:
    print(format_exploration(e))
    return 1 if e.falsified else 0


class _WideSiluBf16(GatedRMSNorm):
    """SiLU in bf16, but only when hidden > 40: a bug fixed-shape tests can miss."""

    def forward(self, x, gate):
        if x.shape[-1] <= 40:
            return super().forward(x, gate)
        xf = x.float()
        g = self.weight.float() + (1 if self.zero_centered_gamma else 0)
        n = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * g).to(x.dtype)
        return (n.float() * F.silu(gate.to(torch.bfloat16)).float()).to(x.dtype)


def wide_silu_bf16(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return _WideSiluBf16(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype,
                         device=device)


wide_silu_bf16.rounding = "chain"


def _toml(text: str) -> str:
    m = re.search(r"^\[\[case\]\]\n(?:[a-z_]+ = .*\n?)+", text, re.M)
    assert m, text
    return m.group(0)


def test_explore_finds_and_shrinks(tmp_path, capsys):
    impl = from_factory("wide-bug", wide_silu_bf16, "test")          # sent to the worker pickled
    code = print_exploration(explore([impl], Settings("cpu", repeats=0), 40, 3, tmp_path))
    out = capsys.readouterr().out
    assert code == 1, out
    suite = parse_suite(_toml(out), "shrunk.toml")
    assert len(suite.cases) == 1
    case = suite.cases[0]
    assert 40 < case.hidden <= 64 and case.tokens <= 4, case      # shrunk towards hidden 41, 1 token
    df = pd.read_csv(tmp_path / "results.csv", dtype={"case_id": str})
    assert set(df["case_id"]) == {case.case_id} and (df["status"] == "fail").any()
    # the pasted entry still fails, and a narrow row of the same case does not
    assert any(r["status"] != "pass" for r in pair_rows(case, impl))
    narrow = Case(**{**case.params(), "shape": (*case.shape[:-1], 40)})
    assert all(r["status"] in ("pass", "skip") for r in pair_rows(narrow, impl))
    assert "# replay: harness replay " + case.case_id in out


def test_explore_correct_impl_passes(tmp_path, capsys):
    # No fp16 x: there chain's rounded intermediates (mid, dmid) can overflow fp16 where the exact
    # value is finite (gamma outliers, hidden 1) — a finding about the chain model, flagged against
    # the exact reference, not what this test is about.
    code = print_exploration(explore([resolve("torch")], Settings("cpu", repeats=0), 8, 0, tmp_path,
                                     strategy=cases(dtypes=("bf16", "fp32"))))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "no failure" in out
    assert pd.read_csv(tmp_path / "results.csv")["status"].isin(["pass", "skip"]).all()


@settings(max_examples=25, deadline=None, database=None)
@given(cases())
def test_cases_strategy_in_bounds(case):
    assert 1 <= len(case.shape) <= 4
    assert 1 <= case.hidden <= MAX_HIDDEN and 1 <= case.tokens <= MAX_TOKENS
    assert case.eps in (1e-5, 1e-6, 0.3)


@settings(max_examples=5, deadline=None, database=None)
@given(inputs())
def test_inputs_strategy(inp):
    assert inp.x.shape == inp.gate.shape == inp.dy.shape and inp.weight.shape == (inp.hidden,)
