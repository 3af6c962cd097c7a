"""The serving stacks' forward-only adapters (harness/impls/serve_adapters.py) and the file loader
they share with mamba's (harness/impls/modfile.py), on the CPU: the file found in a bare folder laid
out as the package (no __init__ executed: there is none), the stand-ins present while it executes
and gone afterwards, its relative import resolved to one; the wiring checked end to end against
stand-in files that make the real files' imports and have their classes' signatures and defaults,
in plain torch. The Triton kernels themselves run on CUDA only (bench/gpu.sh's `serve` stage)."""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.machinery
import sys
import types

import pytest
import torch

import harness
from harness.cases.case import Case
from harness.impls import serve_adapters
from harness.impls.modfile import load_file, package_file
from harness.references.mathclass import FAST
from tests.conftest import needs_cuda

KERNEL = '''
import torch


def _gated(x, w, z, eps, group_size, norm_before_gate, activation):
    assert activation in ("swish", "sigmoid"), activation          # the kernels' names
    xf, zf = x.float(), z.float()
    a = zf * torch.sigmoid(zf) if activation == "swish" else torch.sigmoid(zf)
    if not norm_before_gate:
        xf = xf * a
    g = group_size or x.shape[-1]
    v = xf.reshape(*xf.shape[:-1], -1, g)
    y = (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)).reshape(xf.shape) * w.float()
    return (y * a if norm_before_gate else y).to(x.dtype)
'''
VLLM = '''
from vllm.triton_utils import tl, triton
from vllm.utils.math_utils import cdiv, next_power_of_2
from vllm.utils.platform_utils import num_compute_units
from .utils import input_guard
''' + KERNEL + '''

@input_guard
def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True, activation="swish"):
    return _gated(x, weight, z, eps, group_size, norm_before_gate, activation)


class RMSNormGated(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=False, device=None, dtype=None,
                 activation="swish"):
        super().__init__()
        self.eps, self.activation, self.group_size, self.norm_before_gate = eps, activation, group_size, norm_before_gate
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))

    def forward(self, x, z=None):
        return rmsnorm_fn(x, self.weight, None, z=z, eps=self.eps, group_size=self.group_size,
                          norm_before_gate=self.norm_before_gate, activation=self.activation)
'''
SGLANG_GATED = '''
import triton
from sglang.kernels.jit.utils import is_arch_support_pdl
from sglang.srt.batch_invariant_ops import is_batch_invariant_mode_enabled
from sglang.srt.model_executor.cuda_graph_config import Backend, Phase, check_cuda_graph_backend
from sglang.srt.utils import cdiv, cpu_has_amx_support, device_context, is_cpu, is_npu, next_power_of_2
assert not (is_npu() or is_cpu() or is_arch_support_pdl() or is_batch_invariant_mode_enabled())
assert not check_cuda_graph_backend(Phase.PREFILL, Backend.TC_PIECEWISE) and (cdiv(5, 2), next_power_of_2(5)) == (3, 8)
''' + KERNEL + '''

class RMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True, device=None, dtype=None,
                 activation="swish"):
        super().__init__()
        self.eps, self.activation, self.group_size, self.norm_before_gate = eps, activation, group_size, norm_before_gate
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))

    def forward(self, x, z=None):
        return _gated(x, self.weight, z, self.eps, self.group_size, self.norm_before_gate, self.activation)
'''
SGLANG_FUSED = '''
from sglang.kernels.jit.utils import get_jit_cuda_arch, is_arch_support_pdl
from sglang.srt.utils import cdiv, cpu_has_amx_support, is_cpu, is_npu, next_power_of_2
''' + KERNEL + '''

class FusedRMSNormGated(torch.nn.Module):
    def __init__(self, hidden_size, elementwise_affine=True, eps=1e-5, activation="swish", device=None, dtype=None):
        super().__init__()
        self.eps, self.activation = eps, activation
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))

    def forward(self, x, g):
        return x.copy_(_gated(x, self.weight, g, self.eps, None, True, self.activation))     # y = x, as sglang's
'''


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Folders laid out as vllm 0.26.0 and sglang 0.5.23 (only the adapters' files, and empty top-level
    __init__.py files, never executed), ahead of an installed vllm and sglang on sys.path (as on the
    device, where sglang is installed)."""
    files = {"vllm/third_party/flash_linear_attention/ops/layernorm_guard.py": VLLM,
             "sglang/kernels/ops/attention/fla/layernorm_gated.py": SGLANG_GATED,
             "sglang/kernels/ops/attention/fla/fused_norm_gate.py": SGLANG_FUSED}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    installed = tmp_path / "site-packages"        # as if both were installed: behind, never loaded
    for rel in files:
        (installed / rel).parent.mkdir(parents=True, exist_ok=True)
        (installed / rel).write_text("raise RuntimeError('the installed file ran, not the stand-in')\n")
    for top in ("vllm", "sglang"):   # regular packages: found before an installed one (a folder
        (tmp_path / top / "__init__.py").write_text("")     # without __init__ would lose to it)
        (installed / top / "__init__.py").write_text("raise RuntimeError('the package ran')\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path, str(installed)])
    return tmp_path


@contextlib.contextmanager
def empty_triton_and_einops():
    """Triton and einops as empty modules while the files are found and loaded (the CPU has neither;
    the stand-in files touch nothing of them), gone before anything else runs."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("triton", "triton.language", "einops"):
            if name not in sys.modules:
                m = types.ModuleType(name)
                m.__spec__ = importlib.machinery.ModuleSpec(name, None)
                mp.setitem(sys.modules, name, m)
        yield


def test_package_file_finds_a_file_without_executing_the_package(tmp_path, monkeypatch):
    (tmp_path / "pkg_fwd_only" / "a").mkdir(parents=True)
    (tmp_path / "pkg_fwd_only" / "__init__.py").write_text("raise RuntimeError('the package ran')\n")
    (tmp_path / "pkg_fwd_only" / "a" / "m.py").write_text("from .h import VALUE\nX = VALUE + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path, why = package_file("pkg_fwd_only", ("old/m.py", "a/m.py"))
    assert path == tmp_path / "pkg_fwd_only" / "a" / "m.py" and why == ""
    assert "has no b.py" in package_file("pkg_fwd_only", ("b.py",))[1]
    assert package_file("no_such_pkg_fwd_only", ("m.py",)) == (None, "no_such_pkg_fwd_only not installed")
    assert package_file("pkg_fwd_only", ("a/m.py",), needs=("torch", "no_such_module_fwd_only")) == \
        (None, "pkg_fwd_only's a/m.py needs no_such_module_fwd_only, not installed")     # found, never imported
    h = types.ModuleType("harness_file.pkg_fwd_only.a.h")
    h.VALUE = 41
    module = load_file(path, "pkg_fwd_only.a.m", {"harness_file.pkg_fwd_only.a.h": h})
    assert module.X == 42 and "pkg_fwd_only" not in sys.modules
    assert not any(k.startswith("harness_file") for k in sys.modules)           # neither it nor its stand-ins


def test_unavailable_without_the_packages_says_why(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("vllm", "sglang") else real(name, *a))
    impls = {i.name: i for i in serve_adapters.implementations()}
    assert set(impls) == {"sglang-gated", "sglang-fused", "vllm-gated"}
    for i in impls.values():
        assert i.factory is None and "not installed" in i.unavailable and i.backward is False


CASES = [Case(dt, g, dt, (4, 64), zc, 1e-5, "standard", "normal", "one", 0, group, nbg, activation=act)
         for dt, g in (("bf16", "bf16"), ("fp16", "fp32")) for zc in (False, True)
         for group, nbg in ((None, True), (16, False)) for act in ("silu", "sigmoid")]


@pytest.mark.parametrize("name", ["vllm-gated", "sglang-gated", "sglang-fused"])
def test_wiring_on_standin_files(packages, name):
    with empty_triton_and_einops():
        impl = {i.name: i for i in serve_adapters.implementations()}[name]
        assert impl.unavailable is None, impl.unavailable
        impl.factory(64, eps=1e-5, zero_centered_gamma=False, dtype=torch.float32, device="cpu")   # loads the file
    assert (impl.rounding.name, impl.math, impl.devices, impl.backward) == ("fused", FAST, ("cuda",), False)
    rows = harness.verify(dataclasses.replace(impl, devices=("cpu",), spec=""), cases=CASES, device="cpu",
                          isolate="inline").frame
    assert "vllm.triton_utils" not in sys.modules and "sglang.srt.utils" not in sys.modules
    declined = rows[(rows["status"] == "skip") & (rows["output"] == "y")]
    grouped = (declined["group_size"].astype(int) == 16) & (name == "sglang-fused")   # norm first, one group
    assert declined[grouped]["reason"].str.contains("takes no group_size / norm_before_gate").all()
    assert declined[~grouped]["zero_centered_gamma"].astype(bool).all()
    assert declined[~grouped]["reason"].str.contains("zero-centred").all()
    assert len(declined) == (24 if name == "sglang-fused" else 16)
    ran = rows[~rows["case_id"].isin(declined["case_id"])]
    back = ran[ran["output"].isin(["dx", "dgate", "dweight"])]
    forward = ran[ran["output"].isin(["y", "y_infer"])]
    if name == "sglang-fused":                       # it writes y into x's storage: its own copy
        assert (forward["inputs_modified"] == "x").all()
    assert len(forward) and (forward["status"] == "pass").all(), forward[forward["status"] != "pass"]["reason"]
    assert set(forward["activation"]) == {"silu", "sigmoid"}
    assert (back["status"] == "skip").all() and back["reason"].str.contains("forward-only").all()


def test_a_group_wider_than_64k_is_declined():
    supports = serve_adapters.supports_for(serve_adapters.KERNELS[0])
    assert supports(Case("fp32", "fp32", "fp32", (1, 32768), False, 1e-5, "standard", "normal", "one", 0))
    assert supports(Case("bf16", "bf16", "bf16", (1, 32768), False, 1e-5, "standard", "normal", "one", 0)) is None


@needs_cuda
@pytest.mark.parametrize("name", ["vllm-gated", "sglang-gated", "sglang-fused"])
def test_the_kernels_on_cuda(name):
    """The real kernels (bench/gpu.sh `serve`: sglang installed, vLLM's file on PYTHONPATH): y and
    y_infer within their declared model on the cases each takes; nothing else measured."""
    from harness.impls.registry import builtins
    impl = builtins()[name]
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    rows = harness.verify(name, cases=CASES, device="cuda").frame
    ran = rows[rows["status"] != "skip"]
    assert len(ran) and set(ran["output"]) == {"y", "y_infer"}
    assert (ran["status"] == "pass").all(), ran[ran["status"] != "pass"][["case_id", "output", "reason"]]
