"""The TransformerEngine adapter (harness.impls.te_adapter) against a stand-in of te.ops with TE's
call conventions (the activation dtype follows the weight), without SiLUGate, and unavailable here."""
from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness.impls import registry, te_adapter
from tests.conftest import checked, make_case


class _RMSNorm(nn.Module):
    def __init__(self, hidden, *, eps, zero_centered_gamma, device, dtype):
        super().__init__()
        init = torch.zeros if zero_centered_gamma else torch.ones
        self.weight = nn.Parameter(init(hidden, dtype=dtype, device=device))
        self.eps, self.zc = eps, zero_centered_gamma

    def forward(self, x):             # TE computes in (and returns) the weight's dtype
        xf = x.float()
        g = self.weight.float() + (1 if self.zc else 0)
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * g).to(self.weight.dtype)


class _SiLUGate(nn.Module):
    num_extra_inputs = 1

    def forward(self, n, gate):
        return (n.float() * F.silu(gate.float())).to(n.dtype)


class _Sequential(nn.Module):
    def __init__(self, *ops):
        super().__init__()
        self.ops = nn.ModuleList(ops)

    def forward(self, x, *extra):
        extra = list(extra)
        for op in self.ops:
            k = getattr(op, "num_extra_inputs", 0)
            args, extra = extra[:k], extra[k:]
            x = op(x, *args)
        assert not extra
        return x


STANDIN = types.SimpleNamespace(RMSNorm=_RMSNorm, SiLUGate=_SiLUGate, Sequential=_Sequential)


def test_te_adapter_declarations():
    impl, = te_adapter.implementations(te_ops=STANDIN)
    assert impl.name == "te" and impl.act_follows == "weight" and impl.rounding.name == "chain"
    assert impl.devices == ("cuda",) and impl.unavailable is None
    assert "cuda" in impl.skip_reason("cpu")


@pytest.mark.parametrize("case", [
    make_case(),
    make_case(zero_centered_gamma=True, gamma_dist="zero", gate_dist="negative"),
    make_case(weight_dtype="fp32", gate_dtype="fp32"),        # activation dtype follows the fp32 weight
])
def test_te_adapter_against_standin_passes(case):
    impl, = te_adapter.implementations(te_ops=STANDIN)
    module = impl.factory(case.hidden, eps=case.eps, zero_centered_gamma=case.zero_centered_gamma,
                          dtype=getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[case.weight_dtype]),
                          device="cpu")
    assert isinstance(module.weight, nn.Parameter) and module.weight.shape == (case.hidden,)
    rec, rows = checked(impl, case)
    assert rec.status == "ran" and rec.problems == {}
    assert rec.outputs["y"].dtype == module.weight.dtype
    assert len(rows) == 10
    assert {r["reference"] for r in rows} == {"exact", "model:chain"}
    assert all(r["act_dtype"] == case.weight_dtype for r in rows)
    bad = [(r["output"], r["reference"], r["reason"]) for r in rows if r["status"] != "pass"]
    assert bad == []


def test_te_adapter_without_silugate():
    ns = types.SimpleNamespace(RMSNorm=_RMSNorm, Sequential=_Sequential)
    impl, = te_adapter.implementations(te_ops=ns)
    assert impl.unavailable == "transformer_engine has no SiLUGate"
    assert impl.skip_reason("cuda") == "unavailable: transformer_engine has no SiLUGate"


def test_te_unavailable_here():
    try:
        import transformer_engine.pytorch.ops  # noqa: F401
        pytest.skip("transformer_engine is installed here")
    except Exception:
        pass
    impl = registry.resolve("te")
    assert impl.unavailable.startswith("transformer_engine not importable")
    assert impl.skip_reason("cuda").startswith("unavailable: transformer_engine not importable")
