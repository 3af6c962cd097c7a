"""The adapters of other projects' gated norms (harness/impls/hf.py, fla_adapter.py), on the CPU.

Each HF class passes the rounding model it declares and fails every other built-in model (so the
suite tells the models apart on these classes); its contract breaks (Mamba's y in the promoted dtype)
are fail rows naming the dtype; what a class lacks is a skip row with its reason; an adapter whose
package is missing is `unavailable`, with the reason. `fla-gated` runs on CUDA only: its wiring
(every constructor argument passed, zero-centred gamma as 1 + w) is checked against a stand-in with
fla's signature and defaults. A small suite keeps this file fast; the quick suite is the CI gate."""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import harness
from harness.cases.case import Case
from harness.impls import fla_adapter, hf
from harness.impls.base import from_factory
from harness.impls.registry import builtins
from harness.references.errors import Unsupported, UsageError
from harness.references.models import builtin_models

OUTPUTS = {"y", "y_infer", "dx", "dgate", "dweight"}
HF_NAMES = [c.name for c in hf.CLASSES]
BY_NAME = {c.name: c for c in hf.CLASSES}
GATE_FIRST_ONLY = {c.name for c in hf.CLASSES if c.order == "gate"}

# Every dtype, ranks 1 to 4 (FalconH1 takes only 2-D/3-D), gamma outliers, zero-centred gamma,
# groups in both orders, a float32 weight and gate with a bf16 x in both orders, a large eps.
SMALL = """
name = "adapters-small"
description = "the adapter tests' cases"

[[group]]
dtype = ["bf16", "fp16"]
shape = [[4, 64], [256], [2, 2, 2, 32]]
zero_centered_gamma = [false, true]
gamma_dist = ["outlier"]

[[group]]
dtype = ["bf16", "fp16"]
shape = [[8, 64]]
group_size = [16]
norm_before_gate = [true, false]

[[group]]
dtype = ["bf16"]
gate_dtype = ["fp32"]
weight_dtype = ["fp32"]
shape = [[16, 96]]
norm_before_gate = [true, false]

[[group]]
dtype = ["fp32"]
shape = [[4, 64]]
norm_before_gate = [true, false]

[[group]]   # a large eps: an adapter that leaves eps to its class's default fails here
dtype = ["bf16"]
shape = [[4, 64]]
eps = [0.3]
norm_before_gate = [true, false]

[[group]]   # the sigmoid gate: ranks, gamma outliers, zero-centred gamma
dtype = ["bf16", "fp16"]
shape = [[4, 64], [2, 2, 2, 32]]
zero_centered_gamma = [false, true]
gamma_dist = ["outlier"]
activation = ["sigmoid"]

[[group]]   # the sigmoid gate: groups in both orders
dtype = ["bf16"]
shape = [[8, 64]]
group_size = [16, "hidden"]
norm_before_gate = [true, false]
activation = ["sigmoid"]

[[group]]   # the sigmoid gate with a float32 gate and weight, and in float32
dtype = ["bf16", "fp32"]
gate_dtype = ["fp32"]
weight_dtype = ["fp32"]
shape = [[16, 96]]
activation = ["sigmoid"]
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("suite") / "small.toml"
    path.write_text(SMALL)
    return str(path)


def require_transformers() -> None:
    why = [hf.missing(c) for c in hf.CLASSES if hf.missing(c)]
    assert not why, f"{why[0]}: the hf extra is part of the test install (make test)"


def dtype_contract_fail(rows) -> "pd.Series":  # noqa: F821 (pandas, through the frame)
    # y's words, and y_infer's (the same finding on the inference path)
    return rows["reason"].fillna("").str.contains(r"^(?:under torch.inference_mode\(\): )?y dtype float32, "
                                                  r"expected bfloat16", regex=True)


@pytest.fixture(scope="module")
def declared(small):
    """The HF adapters as registered, through the worker processes (the built-in names are
    resolved again there)."""
    require_transformers()
    return harness.verify(HF_NAMES, cases=small, device="cpu").frame


@pytest.mark.parametrize("name", HF_NAMES)
def test_hf_adapter_passes_its_declared_model(declared, name):
    rows = declared[declared["impl"] == name]
    assert len(rows) and (rows["status"] == "pass").any(), f"{name}: nothing ran"
    assert set(rows["status"]) <= {"pass", "skip", "fail"}, rows[rows["status"] == "error"]["reason"].tolist()
    assert (rows["rounding"] == BY_NAME[name].rounding).all()
    fails = rows[rows["status"] == "fail"]
    # The only failures are the finding below: Mamba-style classes return y in promote(weight, x).
    assert dtype_contract_fail(fails).all(), fails[["case_id", "output", "reference", "reason"]].to_string()
    if name in GATE_FIRST_ONLY:
        assert set(fails["output"]) == {"y", "y_infer"}
        assert ((fails["weight_dtype"] == "fp32") & (fails["dtype"] == "bf16")).all()
        assert len(fails), f"{name}: the float32-weight case should fail on y's dtype"
    else:
        assert fails.empty


@pytest.mark.parametrize("name", HF_NAMES)
def test_hf_adapter_skips_what_the_class_lacks(declared, name):
    rows, c = declared[declared["impl"] == name], BY_NAME[name]
    zc = rows[rows["zero_centered_gamma"] & (rows["activation"] == "silu")]
    assert len(zc) and (zc["status"] == "skip").all()
    assert zc["reason"].str.contains("no zero-centred gamma").all()
    if c.order == "gate":
        first = rows[rows["norm_before_gate"] & ~rows["zero_centered_gamma"] & (rows["activation"] == "silu")]
        assert len(first) and (first["status"] == "skip").all()
        assert first["reason"].str.contains("gates first only").all()
    ran = rows[rows["status"] != "skip"]
    assert set(ran["norm_before_gate"]) == {"norm": {True}, "gate": {False}, "both": {True, False}}[c.order]
    assert set(ran["activation"]) == set(c.activations)           # every activation it has, and no other
    other = rows[~rows["activation"].isin(c.activations) & ~rows["zero_centered_gamma"]]
    assert (other["status"] == "skip").all() and other.empty == (len(c.activations) == 2)
    plain = other[other["norm_before_gate"] & (other["group_size"] == other["hidden"])]     # no other variant
    why = "takes no activation argument" if c.order != "norm" else f"gates with {' / '.join(c.activations)} only"
    assert plain["reason"].str.contains(why).all() and plain.empty == other.empty, plain["reason"].tolist()


OTHER_MODELS = [(c.name, m) for c in hf.CLASSES for m in builtin_models() if m != c.rounding]


@pytest.mark.parametrize("name,model", OTHER_MODELS)
def test_hf_adapter_fails_every_other_model(small, name, model):
    """The same module declared as another built-in model: each output is over that model's budget
    somewhere (the suite tells the models apart; the dtype finding aside)."""
    require_transformers()
    c = BY_NAME[name]
    impl = from_factory(f"{name}-as-{model}", hf.factory_for(c), "tests", rounding=model,
                        supports=hf.supports_for(c))
    rows = harness.verify(impl, cases=small, device="cpu", isolate="inline").frame
    fails = rows[(rows["status"] == "fail") & (rows["reference"] == f"model:{model}") & ~dtype_contract_fail(rows)]
    assert set(fails["output"]) == OUTPUTS, (name, model, sorted(set(fails["output"])))
    assert (fails["max_ulp"] > fails["budget"]).all()


def test_mamba_style_y_comes_back_in_the_weights_dtype():
    """The finding in one case: a float32 weight with a bf16 x gives a float32 y (no final cast);
    the harness names the dtype in a fail row and still checks the gradients."""
    require_transformers()
    case = Case(dtype="bf16", gate_dtype="bf16", weight_dtype="fp32", shape=(4, 32), zero_centered_gamma=False,
                eps=1e-5, x_dist="standard", gate_dist="normal", gamma_dist="one", seed=0, norm_before_gate=False)
    names = sorted(GATE_FIRST_ONLY)
    rows = harness.verify(names, cases=[case], device="cpu", isolate="inline").frame
    for name in names:
        mine = rows[rows["impl"] == name]
        y = mine[mine["output"] == "y"]
        assert (y["status"] == "fail").all() and len(y) == 2
        assert (y["reason"] == "y dtype float32, expected bfloat16").all()
        assert (mine[mine["output"] == "y_infer"]["reason"] == "under torch.inference_mode(): y dtype float32, "
                                                              "expected bfloat16").all()
        assert (mine[~mine["output"].isin(["y", "y_infer"])]["status"] == "pass").all()
    module = hf.factory_for(BY_NAME["hf-mamba2"])(32, eps=1e-5, zero_centered_gamma=False, dtype=torch.float32,
                                                  device="cpu", norm_before_gate=False)
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    assert module(x, x).dtype == torch.float32


def test_factories_decline_what_the_class_lacks(monkeypatch):
    require_transformers()
    kw = dict(eps=1e-5, dtype=torch.bfloat16, device="cpu")
    for c in hf.CLASSES:
        extra = {"norm_before_gate": False} if c.order == "gate" else {}
        with pytest.raises(Unsupported, match="zero-centred"):
            hf.factory_for(c)(64, zero_centered_gamma=True, **kw, **extra)
    with pytest.raises(Unsupported, match="gates first only"):
        hf.factory_for(BY_NAME["hf-mamba2"])(64, zero_centered_gamma=False, **kw)
    # transformers < 5.24 (5.17.0 included): MambaRMSNormGated(hidden_size, eps) has one group only.

    class OneGroup(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps
    monkeypatch.setattr(hf, "load", lambda c: OneGroup)
    make = hf.factory_for(BY_NAME["hf-mamba2"])
    with pytest.raises(Unsupported, match="no group_size"):
        make(64, zero_centered_gamma=False, group_size=16, norm_before_gate=False, **kw)
    m = make(64, zero_centered_gamma=False, norm_before_gate=False, eps=0.25, dtype=torch.bfloat16, device="cpu")
    assert m.variance_epsilon == 0.25 and m.weight.dtype == torch.bfloat16


def test_missing_packages_and_classes_are_unavailable(monkeypatch):
    c = dataclasses.replace(hf.CLASSES[0], cls="NoSuchRMSNormGated")
    if hf.missing(hf.CLASSES[0]) is None:
        impl = hf.implementation(c)
        assert impl.factory is None and "has no NoSuchRMSNormGated" in impl.unavailable
    monkeypatch.setattr(hf.importlib.util, "find_spec", lambda name, *a: None)
    for impl in hf.implementations():
        assert impl.factory is None and impl.unavailable.startswith("transformers not installed")
        assert impl.skip_reason("cpu").startswith("unavailable: transformers not installed")
        with pytest.raises(UsageError, match="transformers not installed"):
            harness.verify(impl, cases="quick", device="cpu")


def test_fla_adapters_are_listed_without_importing_fla(monkeypatch):
    imported = []
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: imported.append(name) or real(name, *a))
    found = {i.name: i for i in fla_adapter.implementations()}
    assert set(found) == {"fla", "fla-gated"} and not [m for m in imported if m.startswith("fla")]
    assert all(builtins()[n].name == n for n in [*found, *HF_NAMES])
    installed = importlib.util.find_spec("fla") is not None and importlib.util.find_spec("triton") is not None
    for impl in found.values():
        assert impl.devices == ("cuda",)
        if installed:
            assert impl.unavailable is None and impl.rounding.name == "fused"
        else:
            assert impl.factory is None and impl.unavailable.startswith("fla")


def test_fla_not_importable_is_the_factory_s_error_remembered(monkeypatch, tmp_path):
    """A kernel file that does not load (here: its own import fails) is the factory's ImportError,
    with the file's error, loaded once a process."""
    broken = tmp_path / "fused_norm_gate.py"
    broken.write_text("import no_such_module_of_fla\n")
    monkeypatch.setattr(fla_adapter, "_LOADED", {})
    monkeypatch.setattr(fla_adapter, "_FOUND", {"fla": ("fla.modules.norm.fused_norm_gate", broken)})
    loads = []
    real = fla_adapter.load_file
    monkeypatch.setattr(fla_adapter, "load_file", lambda path, name: loads.append(path) or real(path, name))
    impl = fla_adapter.fused_implementation(lambda: fla_adapter.load("fla"))
    for _ in range(2):
        with pytest.raises(ImportError, match="fla not importable .ModuleNotFoundError.*no_such_module_of_fla"):
            impl.factory(8, eps=1e-5, zero_centered_gamma=False, dtype=torch.float32, device="cpu")
    assert loads == [broken]                           # the file found, once a process


# A stand-in for fla's RMSNormGated with its signature and defaults (eps=1e-5, norm_before_gate=False)
# and fused arithmetic: an adapter that leaves an argument to the default fails the norm-first cases.
def standin_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    assert bias is None
    u = x.float() if norm_before_gate else x.float() * F.silu(z.float())
    g = group_size or x.shape[-1]
    v = u.reshape(*u.shape[:-1], -1, g)
    h = (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)).reshape(u.shape) * weight.float()
    return (h * F.silu(z.float()) if norm_before_gate else h).to(x.dtype)


class StandIn(nn.Module):
    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=False, device=None, dtype=None):
        super().__init__()
        self.eps, self.group_size, self.norm_before_gate = eps, group_size, norm_before_gate
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))

    def forward(self, x, z=None):
        return standin_fn(x, self.weight, None, z=z, eps=self.eps, group_size=self.group_size,
                          norm_before_gate=self.norm_before_gate)


def test_fla_gated_wiring_on_a_standin(small):
    impl = fla_adapter.gated_implementation(lambda: (StandIn, standin_fn))
    assert impl.name == "fla-gated" and impl.devices == ("cuda",) and impl.rounding.name == "fused"
    impl = dataclasses.replace(impl, devices=("cpu",), spec="")
    rows = harness.verify(impl, cases=small, device="cpu", isolate="inline").frame
    sigmoid = rows["activation"] == "sigmoid"          # its kernels hard-code silu: no activation argument
    assert (rows[sigmoid]["status"] == "skip").all() and rows[sigmoid]["reason"].str.contains("activation").all()
    rows = rows[~sigmoid]
    assert (rows["status"] == "pass").all(), rows[rows["status"] != "pass"][["case_id", "output", "reason"]]
    assert set(rows["norm_before_gate"]) == {True, False} and rows["zero_centered_gamma"].any()


def standin_rms_norm_gated(x, g, weight, bias, activation="swish", eps=1e-6):
    """fla's rms_norm_gated with its activation names ("swish", "silu", "sigmoid"), fused, in float32."""
    assert bias is None
    act = {"swish": F.silu, "silu": F.silu, "sigmoid": torch.sigmoid}[activation]
    xf = x.float()
    h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return (h * act(g.float())).to(x.dtype)


def test_fla_fused_passes_the_case_activation(small):
    """`fla` hands the case's activation to rms_norm_gated in fla's names: a stand-in with fla's
    signature passes silu and sigmoid cases alike (groups and gate first skip by signature)."""
    impl = fla_adapter.fused_implementation(lambda: (standin_rms_norm_gated,))
    impl = dataclasses.replace(impl, devices=("cpu",), spec="")
    assert "activation" in impl.variants
    rows = harness.verify(impl, cases=small, device="cpu", isolate="inline").frame
    ran = rows[rows["status"] != "skip"]
    assert (ran["status"] == "pass").all(), ran[ran["status"] != "pass"][["case_id", "output", "reason"]]
    assert set(ran["activation"]) == {"silu", "sigmoid"} and set(ran["norm_before_gate"]) == {True}


def test_fla_factories_keep_their_own_kernels(monkeypatch):
    """Both fla entries come from one implementations() call: each factory must load its own kernel
    (a closure over a rebound name once handed fla's RMSNormGated class to the `fla` factory)."""
    import sys
    import types

    def rms_norm_gated(x, g, weight, bias, activation="swish", eps=1e-6):
        return x
    files = {"fused_norm_gate.py": types.SimpleNamespace(rms_norm_gated=rms_norm_gated),
             "layernorm_gated.py": types.SimpleNamespace(RMSNormGated=StandIn, rmsnorm_fn=standin_fn)}
    monkeypatch.setattr(fla_adapter, "load_file", lambda path, name: files[Path(path).name])
    monkeypatch.setattr(fla_adapter, "package_file", lambda top, files, needs: (Path("/site/fla", files[0]), ""))
    monkeypatch.setattr(fla_adapter, "_LOADED", {})          # the stand-ins must not outlive the test
    monkeypatch.setattr(fla_adapter, "_FOUND", {})
    found = {i.name: i for i in fla_adapter.implementations()}
    assert found["fla"].unavailable is None and found["fla-gated"].unavailable is None
    assert {k: m for k, (m, _) in fla_adapter._FOUND.items()} == {"fla": "fla.modules.norm.fused_norm_gate",
                                                                 "fla-gated": "fla.modules.norm.layernorm_gated"}
    m = found["fla"].factory(8, eps=1e-5, zero_centered_gamma=False, dtype=torch.float32, device="cpu")
    assert m.fn is rms_norm_gated
    g = found["fla-gated"].factory(8, eps=1e-5, zero_centered_gamma=False, dtype=torch.float32, device="cpu")
    assert isinstance(g.inner, StandIn)


def test_fla_kernels_load_from_their_file_not_through_fla_modules(tmp_path, monkeypatch):
    """An fla laid out as 0.6.0 is: the kernel's file loads with its own `fla.utils` import, and
    `fla.modules`' __init__ (which imports every module of fla.modules) never runs."""
    import sys
    root = tmp_path / "site"
    (root / "fla/modules/norm").mkdir(parents=True)
    (root / "fla/__init__.py").write_text("")
    (root / "fla/utils.py").write_text("SCALE = 1\n")
    (root / "fla/modules/__init__.py").write_text("raise RuntimeError('fla.modules imported')\n")
    (root / "fla/modules/norm/__init__.py").write_text("raise RuntimeError('fla.modules.norm imported')\n")
    (root / "fla/modules/norm/fused_norm_gate.py").write_text(
        "from fla.utils import SCALE\n\ndef rms_norm_gated(x, g, weight, bias, activation='swish', eps=1e-6):\n"
        "    return x * SCALE\n")
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "fla" or m.startswith("fla.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(fla_adapter, "NEEDS", ())
    monkeypatch.setattr(fla_adapter, "_LOADED", {})
    monkeypatch.setattr(fla_adapter, "_FOUND", {})
    try:
        found = {i.name: i for i in fla_adapter.implementations()}
        assert found["fla"].unavailable is None and found["fla-gated"].unavailable.startswith("fla")
        m = found["fla"].factory(8, eps=1e-5, zero_centered_gamma=False, dtype=torch.float32, device="cpu")
        assert m.fn.__name__ == "rms_norm_gated" and "fla.utils" in sys.modules
        assert "fla.modules" not in sys.modules and "fla.modules.norm" not in sys.modules
    finally:
        for name in [m for m in sys.modules if m == "fla" or m.startswith("fla.")]:
            del sys.modules[name]              # the fake fla must not outlive the test


def _fla_importable() -> bool:
    try:
        import fla.modules.norm.fused_norm_gate  # noqa: F401
        return True
    except Exception:
        return False


@pytest.mark.skipif(not (torch.cuda.is_available() and _fla_importable()), reason="needs CUDA and fla-core")
def test_fla_sigmoid_gate_on_cuda(small):
    """fla's FusedRMSNormGated with activation="sigmoid" (its KDA / GDN2 / Comba layers) passes its
    declared model on the sigmoid cases where the gate has x's dtype (with a float32 gate its dgate
    comes back in x's dtype: fla's known finding, reported as fail rows)."""
    rows = harness.verify("fla", cases=small, device="cuda").frame
    sig = rows[(rows["activation"] == "sigmoid") & (rows["status"] != "skip")]
    same = sig[sig["gate_dtype"] == sig["dtype"]]
    assert len(same) and (same["status"] == "pass").all(), same[same["status"] != "pass"][["case_id", "output", "reason"]]
