"""Implementations: plug-in loading, entry points, execution checks, the TE adapter, built-ins."""
from __future__ import annotations

import importlib
import itertools
import textwrap
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import harness
from torch import nn

from harness.cases.case import Case
from tests.conftest import make_case, pair_rows
from harness.analysis.check import rows
from harness.references.errors import UsageError
from harness.impls import registry, te_adapter
from harness.impls.base import Implementation, from_factory
from harness.pipeline.settings import Settings
from harness.reports.schema import CHECKED_OUTPUTS

_n = itertools.count()

GOOD_BODY = """
import torch
from harness.impls.torch_ref import chain
def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
make.rounding = "chain"
"""


def write_module(tmp_path, monkeypatch, body: str) -> str:
    name = f"plug_{tmp_path.name.replace('-', '_')}_{next(_n)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def rows_for(impl: Implementation, case: Case, tmp_path=Path("/tmp")) -> list[dict]:
    return pair_rows(case, impl)


def checked(impl: Implementation, case: Case):
    """(the implementation side's record, the pair's rows)."""
    from harness.pipeline.call import run_calls
    from harness.pipeline.judge import Judge
    s = Settings("cpu", repeats=0)
    rec = run_calls(case, impl, s)
    return rec, rows(Judge(s).judge(case, impl, rec))


def problems(rec) -> dict:
    return {k: f.text for k, f in rec.problems.items()}


# ---------------------------------------------------------------- plug-in loading

def test_good_plugin(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, GOOD_BODY + "make.rounding = 'fused'\nmake.act_follows = 'weight'\n"
                       "make.devices = ('cpu',)\n")
    impl = registry.resolve(f"mine={mod}:make")
    assert impl.name == "mine" and impl.rounding.name == "fused" and impl.act_follows == "weight"
    assert impl.devices == ("cpu",) and impl.source == f"{mod}:make" and impl.unavailable is None
    assert impl.skip_reason("cpu") is None and "cpu" in impl.skip_reason("cuda")


def test_plugin_defaults_to_chain(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, GOOD_BODY.replace('make.rounding = "chain"', ""))
    impl = registry.load_plugin(f"p={mod}:make")
    assert impl.rounding.name == "chain" and impl.act_follows == "x" and impl.devices == ("cpu", "cuda")
    rows = rows_for(impl, make_case(), tmp_path)
    assert len(rows) == 10 and {r["status"] for r in rows} == {"pass"}


def test_plugin_nested_attr(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, GOOD_BODY + "class NS:\n    make = staticmethod(make)\n")
    impl = registry.load_plugin(f"p={mod}:NS.make")
    assert callable(impl.factory)


@pytest.mark.parametrize("body,attr,needle", [
    (None, "make", "cannot import module"),
    (GOOD_BODY, "nope", "has no attribute 'nope'"),
    (GOOD_BODY + "VALUE = 3\n", "VALUE", "is not callable"),
    (GOOD_BODY + "make.rounding = 'fused-ish'\n", "make", "rounding 'fused-ish': not a built-in model"),
    (GOOD_BODY + "make.rounding = ('mid', 'nope')\n", "make", "unknown point 'nope'"),
    ("import sys\nsys.exit(0)\n", "make", "raised SystemExit"),
    (GOOD_BODY + "make.act_follows = 'gate'\n", "make", "act_follows is 'gate'"),
    ("raise RuntimeError('boom at import')\n", "make", "raised RuntimeError: boom at import"),
    ("import no_such_dependency_xyz\n", "make", "no_such_dependency_xyz"),
])
def test_plugin_errors(tmp_path, monkeypatch, body, attr, needle):
    mod = write_module(tmp_path, monkeypatch, body) if body is not None else "no_such_module_xyz"
    with pytest.raises(UsageError) as ei:
        registry.resolve(f"bad={mod}:{attr}")
    msg = str(ei.value)
    assert msg.startswith("--impl bad: ") and needle in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize("spec", ["nonsense", "a=b", "a=:x", "=m:a"])
def test_unknown_or_malformed_spec(spec):
    with pytest.raises(UsageError, match="--impl"):
        registry.resolve(spec)


def test_duplicate_names():
    with pytest.raises(UsageError, match="given twice"):
        registry.resolve_all(["torch", "torch"])


# ---------------------------------------------------------------- execution problems

def test_factory_raises(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, "def make(h, **kw):\n    raise ValueError('no such size')\n")
    impl = registry.load_plugin(f"p={mod}:make")
    rec, rows = checked(impl, make_case())
    assert rec.status == "error" and rec.text == "factory raised ValueError: no such size"
    assert len(rows) == 10 and {r["status"] for r in rows} == {"error"}
    assert {r["reason"] for r in rows} == {"factory raised ValueError: no such size"}


def test_module_without_weight(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        class M(torch.nn.Module):
            def forward(self, x, gate):
                return x * gate
        def make(h, **kw):
            return M()
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert rec.status == "error" and rec.text == "module has no `weight` parameter"
    assert {r["status"] for r in rows} == {"error"}


def test_weight_wrong_shape(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        class M(torch.nn.Module):
            def __init__(self, h, dtype):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(h + 1, dtype=dtype))
            def forward(self, x, gate):
                return x * gate
        def make(h, *, dtype, **kw):
            return M(h, dtype)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert rec.status == "error" and rec.text == "weight shape (33,), expected (32,)"


def test_raises_in_forward(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        from harness.impls.torch_ref import GatedRMSNorm
        class M(GatedRMSNorm):
            def forward(self, x, gate):
                raise RuntimeError("kernel launch failed")
        def make(h, *, eps, zero_centered_gamma, dtype, device):
            return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert rec.status == "error" and rec.text == "forward/backward raised RuntimeError: kernel launch failed"
    assert {r["status"] for r in rows} == {"error"}


GATE_CAST = """
import torch
from harness.impls.torch_ref import GatedRMSNorm
class M(GatedRMSNorm):
    def forward(self, x, gate):
        gate.data = gate.data.to(x.dtype)       # casts the gate (leaf) to x's dtype before use
        return super().forward(x, gate)
def make(h, *, eps, zero_centered_gamma, dtype, device):
    return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
"""


def test_wrong_dgate_dtype_is_a_fail_row(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, GATE_CAST)
    case = make_case(gate_dtype="fp32")
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), case)
    assert rec.status == "ran"
    assert problems(rec) == {"dgate": "dgate dtype bfloat16, expected float32"}
    dg = [r for r in rows if r["output"] == "dgate"]
    assert len(dg) == 2 and all(r["status"] == "fail" for r in dg)
    assert {r["reason"] for r in dg} == {"dgate dtype bfloat16, expected float32"}
    others = [r for r in rows if r["output"] != "dgate"]
    assert len(others) == 8 and all(r["status"] in ("pass", "fail") for r in others)


def test_wrong_y_dtype_is_a_fail_row(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        from harness.impls.torch_ref import GatedRMSNorm
        class M(GatedRMSNorm):
            def forward(self, x, gate):
                return super().forward(x, gate).float()
        def make(h, *, eps, zero_centered_gamma, dtype, device):
            return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert problems(rec) == {"y": "y dtype float32, expected bfloat16",
                             "y_infer": "under torch.inference_mode(): y dtype float32, expected bfloat16"}
    y = [r for r in rows if r["output"] == "y"]
    assert {r["status"] for r in y} == {"fail"} and {r["reason"] for r in y} == {problems(rec)["y"]}


def test_missing_gradient_is_a_fail_row(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        import torch.nn.functional as F
        class M(torch.nn.Module):
            def __init__(self, h, dtype):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(h, dtype=dtype))
            def forward(self, x, gate):           # ignores the weight: no dweight
                return (x.float() * F.silu(gate.float())).to(x.dtype)
        def make(h, *, dtype, **kw):
            return M(h, dtype)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert problems(rec)["dweight"] == "gradient missing (None)"
    dw = [r for r in rows if r["output"] == "dweight"]
    assert {r["status"] for r in dw} == {"fail"}


WRONG_SHAPE = """
import torch
from harness.impls.torch_ref import GatedRMSNorm
class M(GatedRMSNorm):
    def forward(self, x, gate):
        return super().forward(x, gate).reshape(-1)
def make(h, *, eps, zero_centered_gamma, dtype, device):
    return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
"""


def test_wrong_y_shape_outcome(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, WRONG_SHAPE)
    impl = registry.load_plugin(f"p={mod}:make")
    rec, _ = checked(impl, make_case())
    assert rec.status == "ran"
    assert set(problems(rec).values()) == {"y shape (128,), expected (4, 32)"} and len(rec.problems) == 5


def test_wrong_y_shape_gives_fail_rows(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, WRONG_SHAPE)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert len(rows) == 10 and {r["status"] for r in rows} == {"fail"}
    assert {r["reason"] for r in rows} == {"y shape (128,), expected (4, 32)"}


def test_nan_output_where_reference_finite_fails(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        from harness.impls.torch_ref import GatedRMSNorm
        class M(GatedRMSNorm):
            def forward(self, x, gate):
                y = super().forward(x, gate)
                mask = torch.zeros_like(y, dtype=torch.bool)
                mask.view(-1)[5] = True
                return torch.where(mask, torch.full_like(y, float("nan")), y)
        def make(h, *, eps, zero_centered_gamma, dtype, device):
            return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    y = [r for r in rows if r["output"] == "y"]
    assert len(y) == 2
    for r in y:
        assert r["status"] == "fail" and "non-finite" in r["reason"] and "nan" in r["reason"]
        assert r["worst_index"] == "0,5" and r["count_over"] >= 1


# ---------------------------------------------------------------- entry points

def test_entry_point_discovery(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, GOOD_BODY + "make.rounding = 'fused'\n")
    di = tmp_path / "myplug-1.0.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 1.0\n")
    (di / "entry_points.txt").write_text(f"[harness.impls]\nmine = {mod}:make\nbroken = {mod}:missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = registry.entry_points()
    assert "mine" in eps
    assert eps["mine"].rounding.name == "fused" and eps["mine"].source == f"entry point {mod}:make"
    assert eps["mine"].spec == "mine"                      # a worker process resolves it by name
    assert eps["mine"].unavailable is None and callable(eps["mine"].factory)
    assert "failed to load" in eps["broken"].unavailable
    assert registry.resolve("mine").name == "mine"


# ---------------------------------------------------------------- TransformerEngine adapter

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


# ---------------------------------------------------------------- built-ins on the CPU

CPU_CASES = [
    make_case(),
    make_case(dtype="fp16", gate_dtype="fp32", weight_dtype="fp16", zero_centered_gamma=True, gamma_dist="zero",
          gate_dist="negative", shape=(2, 3, 16)),
    make_case(dtype="fp32", gate_dtype="fp32", weight_dtype="fp32", shape=(8, 24)),
    make_case(gate_dist="underflow", x_dist="zero_row", shape=(4, 16)),
]


@pytest.mark.parametrize("name", ["torch", "torch-fused", "torch-compile-emulate"])
def test_cpu_builtins_pass(name, tmp_path):
    impl = registry.resolve(name)
    assert impl.skip_reason("cpu") is None
    cases = CPU_CASES if name != "torch-compile-emulate" else CPU_CASES[:2]
    for case in cases:
        rows = rows_for(impl, case, tmp_path)
        assert len(rows) == 10
        bad = [(r["output"], r["reference"], r["reason"]) for r in rows if r["status"] != "pass"]
        assert bad == [], (case.label, bad)
        assert {r["output"] for r in rows} == set(CHECKED_OUTPUTS)
        assert all(r["replay"].startswith(f"harness replay {case.case_id} --impl {name}") for r in rows)


def test_torch_compile_realises_the_fused_model(tmp_path):
    """Inductor (defaults) elides the n -> x.dtype round trip: the fused model, every output
    (bench/RESULTS.md, run 6 on CUDA; the CPU likewise). Each hidden size is a new graph, so the
    impl raises Dynamo's recompile limit: at the default 8, later shapes silently ran eager."""
    import torch._dynamo.config as dcfg
    impl = registry.resolve("torch-compile")
    assert impl.rounding.name == "fused"
    for case in CPU_CASES[:2]:
        rows = rows_for(impl, case, tmp_path)
        bad = [(r["output"], r["reference"], r["reason"]) for r in rows if r["status"] != "pass"]
        assert len(rows) == 10 and bad == [], (case.label, bad)
    assert dcfg.recompile_limit >= 1024


def test_builtin_names_resolve():
    found = registry.builtins()
    assert {"torch", "torch-fused", "torch-xhat", "torch-compile", "torch-compile-emulate", "fla", "te"} <= set(found)
    for name in found:
        assert registry.resolve(name).name == name and registry.resolve(name).spec == name
    for name in ("torch", "torch-fused", "torch-xhat", "torch-compile", "torch-compile-emulate"):
        assert registry.resolve(name).unavailable is None


# ---------------------------------------------------------------- op variants and skips

VARIANT_BODY = """
from harness.impls.torch_ref import chain
def plain(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
def grouped(hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device,
                 group_size=group_size)
def picky(hidden_size, *, eps, zero_centered_gamma, dtype, device, **variants):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device,
                 **variants)
picky.supports = lambda case: "no zero-centred gamma" if case.zero_centered_gamma else None
def declines(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    import harness
    raise harness.Unsupported("hidden sizes above 16 only")
"""


def test_variant_kwargs_only_where_needed_and_skips(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, VARIANT_BODY)
    plain, grouped, picky, declines = (registry.resolve(f"{n}={mod}:{n}") for n in ("plain", "grouped", "picky", "declines"))
    assert plain.variants == frozenset() and grouped.variants == {"group_size"}
    assert picky.variants == {"group_size", "norm_before_gate", "activation"}
    base, g8, first = make_case(shape=(4, 32)), make_case(shape=(4, 32), group_size=8), \
        make_case(shape=(4, 32), norm_before_gate=False)
    assert {r["status"] for r in rows_for(plain, base)} == {"pass"}                 # no variant kwargs passed
    skipped = rows_for(plain, g8)
    assert {r["status"] for r in skipped} == {"skip"} and "group_size" in skipped[0]["reason"]
    assert {r["status"] for r in rows_for(grouped, g8)} == {"pass"}
    assert "norm_before_gate" in rows_for(grouped, first)[0]["reason"]
    assert {r["status"] for r in rows_for(picky, first)} == {"pass"}
    zc = rows_for(picky, make_case(shape=(4, 32), zero_centered_gamma=True))
    assert {r["status"] for r in zc} == {"skip"} and zc[0]["reason"] == "no zero-centred gamma"
    dec = rows_for(declines, base)
    assert {r["status"] for r in dec} == {"skip"} and dec[0]["reason"] == "hidden sizes above 16 only"
    assert len(dec) == 10 and all(r["replay"] for r in dec)


# ---------------------------------------------------------------- a sigmoid-gated plug-in

SIGMOID_BODY = """
import torch
from torch import nn


class SigmoidGatedNorm(nn.Module):
    '''A third party's sigmoid-gated RMSNorm (norm first, one group), rounding where `points` say.'''
    def __init__(self, hidden_size, eps, dtype, device, points):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype, device=device))
        self.eps, self.points = eps, points

    def forward(self, x, gate):
        act = x.dtype
        xf = x.float()
        xhat = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        n = self.weight * xhat.to(act) if "xhat" in self.points else xhat * self.weight.float()
        if "mid" in self.points:
            n = n.to(act)
        return (n.float() * torch.sigmoid(gate.float())).to(act)


def _make(points, rounding):
    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device, activation="silu"):
        return SigmoidGatedNorm(hidden_size, eps, dtype, device, points)
    factory.rounding = rounding
    factory.supports = lambda case: (None if case.activation == "sigmoid" and not case.zero_centered_gamma
                                     else "sigmoid gate, no zero-centred gamma")
    return factory


chain = _make({"mid"}, "chain")
fused = _make(set(), "fused")
xhat = _make({"xhat"}, "xhat")
mid_and_xhat = _make({"mid", "xhat"}, ("mid", "xhat"))
"""

SIGMOID_SUITE = """
name = "sigmoid-plugin"
[[group]]
dtype = ["bf16", "fp16", "fp32"]
shape = [[8, 64], [2, 3, 40]]
activation = ["sigmoid"]
gate_dist = ["normal", "large_positive", "saturating"]
[[group]]
dtype = ["bf16"]
gate_dtype = ["fp32"]
weight_dtype = ["fp32"]
shape = [[16, 64]]
activation = ["sigmoid", "silu"]
"""


@pytest.mark.parametrize("name", ["chain", "fused", "xhat", "mid_and_xhat"])
def test_a_sigmoid_plugin_of_any_model_needs_no_other_code(tmp_path, monkeypatch, name):
    """A plug-in whose factory takes `activation` gets the sigmoid cases as activation="sigmoid" and
    passes its declared model (a built-in one or a set of points) with no code but its own; the silu
    case it declines through `supports` is a skip; declared as another model, it fails."""
    mod = write_module(tmp_path, monkeypatch, SIGMOID_BODY)
    suite = tmp_path / "sigmoid.toml"
    suite.write_text(SIGMOID_SUITE)
    rows = harness.verify(f"{name}={mod}:{name}", cases=str(suite), device="cpu", isolate="inline").frame
    sig = rows[rows["activation"] == "sigmoid"]
    assert len(sig) and (sig["status"] == "pass").all(), sig[sig["status"] != "pass"][["case_id", "output", "reason"]]
    silu = rows[rows["activation"] == "silu"]
    assert len(silu) and (silu["status"] == "skip").all()
    other = "fused" if name != "fused" else "chain"
    wrong = from_factory("wrong", getattr(importlib.import_module(mod), name), "tests", rounding=other)
    bad = harness.verify(wrong, cases=str(suite), device="cpu", isolate="inline").frame
    assert (bad[bad["reference"] == f"model:{other}"]["status"] == "fail").any()
