"""The mamba_ssm adapter (harness/impls/mamba_adapter.py) on the CPU: without the package (or Triton)
it is `unavailable`, saying why; its wiring — the module loaded from its file, never through the
package's __init__, every constructor argument passed, zero-centred gamma declined, fused and fast
declared — is checked against a stand-in file with mamba_ssm's signature and defaults. The kernel
itself runs on CUDA only (bench/gpu.sh's mamba stage)."""
from __future__ import annotations

import dataclasses
import importlib.util

import harness
from harness.cases.case import Case
from harness.impls import mamba_adapter
from harness.impls.registry import builtins
from harness.references.mathclass import FAST

# mamba_ssm's RMSNorm signature and defaults (eps=1e-5, norm_before_gate=True, weight = ones), fused
# float32 arithmetic: an adapter that leaves an argument to its default fails some case.
STANDIN = '''
import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True, device=None, dtype=None):
        super().__init__()
        self.eps, self.group_size, self.norm_before_gate = eps, group_size, norm_before_gate
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))

    def forward(self, x, z=None):
        u = x.float() if self.norm_before_gate else x.float() * F.silu(z.float())
        g = self.group_size or x.shape[-1]
        v = u.reshape(*u.shape[:-1], -1, g)
        h = (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)).reshape(u.shape) * self.weight.float()
        return (h * F.silu(z.float()) if self.norm_before_gate else h).to(x.dtype)
'''


def test_unavailable_without_the_package_says_why(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mamba_ssm" else real(name, *a))
    [impl] = mamba_adapter.implementations()
    assert impl.name == "mamba" and impl.factory is None and "mamba_ssm not installed" in impl.unavailable
    assert builtins()["mamba"].devices == ("cuda",)


def test_wiring_on_a_standin_file(tmp_path):
    path = tmp_path / "layernorm_gated.py"
    path.write_text(STANDIN)
    impl = mamba_adapter.adapter(path)
    assert (impl.name, impl.rounding.name, impl.math, impl.devices) == ("mamba", "fused", FAST, ("cuda",))
    assert mamba_adapter.load_rmsnorm(str(path)).__module__ == "harness_file.mamba_ssm_layernorm_gated"
    cases = [Case(dt, g, dt, (8, 64), zc, 1e-5, "standard", "normal", "one", 0, group, nbg)
             for dt, g in (("bf16", "bf16"), ("bf16", "fp32"), ("fp32", "fp32"))
             for zc in (False, True) for group, nbg in ((None, True), (16, False))]
    rows = harness.verify(dataclasses.replace(impl, devices=("cpu",), spec=""), cases=cases, device="cpu",
                          isolate="inline").frame
    skipped = rows[rows["status"] == "skip"]
    assert set(skipped["zero_centered_gamma"]) == {True} and skipped["reason"].str.contains("zero-centred").all()
    ran = rows[rows["status"] != "skip"]
    assert len(ran) and (ran["status"] == "pass").all(), ran[ran["status"] != "pass"][["case_id", "output", "reason"]]
    assert set(ran["norm_before_gate"]) == {True, False} and set(ran["math"]) == {"fast"}
