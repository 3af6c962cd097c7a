"""Plug-ins (SPEC §3): loading NAME=MODULE:ATTR (its declarations, every way it can fail to load),
entry points, op-variant keyword arguments and skips, and a sigmoid-gated plug-in of any model."""
from __future__ import annotations

import importlib

import pytest

import harness
from harness.impls import registry
from harness.impls.base import from_factory
from harness.references.errors import UsageError
from tests.conftest import make_case, pair_rows, write_module

GOOD_BODY = """
import torch
from harness.impls.torch_ref import chain
def make(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return chain(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
make.rounding = "chain"
"""


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
    rows = pair_rows(make_case(), impl)
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
    (GOOD_BODY + "make.devices = 5\n", "make", "devices is 5; expected 'cpu' and/or 'cuda'"),
    (GOOD_BODY + "make.devices = None\n", "make", "devices is None;"),
    (GOOD_BODY + "make.devices = ['cpu', 'tpu']\n", "make", "devices is ('cpu', 'tpu');"),
    (GOOD_BODY + "make.backward = 1\n", "make", "backward is 1; expected True or False"),
    ("class Make:\n    def __call__(self, *a, **k):\n        pass\n\n    @property\n    def rounding(self):\n"
     "        raise ValueError('no model here')\n\n\nmake = Make()\n", "make",
     "reading {mod}:make.rounding raised ValueError: no model here"),
    ("class Make:\n    def __call__(self, *a, **k):\n        pass\n\n    def __getattr__(self, name):\n"
     "        raise RuntimeError('no ' + name)\n\n\nmake = Make()\n", "make", "raised RuntimeError: no rounding"),
])
def test_plugin_errors(tmp_path, monkeypatch, body, attr, needle):
    mod = write_module(tmp_path, monkeypatch, body) if body is not None else "no_such_module_xyz"
    with pytest.raises(UsageError) as ei:
        registry.resolve(f"bad={mod}:{attr}")
    msg = str(ei.value)
    assert msg.startswith("--impl bad: ") and needle.format(mod=mod) in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize("spec", ["nonsense", "a=b", "a=:x", "=m:a"])
def test_unknown_or_malformed_spec(spec):
    with pytest.raises(UsageError, match="--impl"):
        registry.resolve(spec)


def test_duplicate_names():
    with pytest.raises(UsageError, match="given twice"):
        registry.resolve_all(["torch", "torch"])


# ---------------------------------------------------------------- entry points

def test_entry_point_discovery(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, GOOD_BODY + "make.rounding = 'fused'\n")
    di = tmp_path / "myplug-1.0.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 1.0\n")
    (tmp_path / "other_plug.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    (di / "entry_points.txt").write_text(f"[harness.impls]\nmine = {mod}:make\nbroken = {mod}:missing\n"
                                         f"other = other_plug:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = registry.resolve("mine")
    assert mine.name == "mine" and mine.rounding.name == "fused" and mine.source == f"entry point {mod}:make"
    assert mine.spec == "mine"                             # a worker process resolves it by name
    assert mine.unavailable is None and callable(mine.factory)
    assert not (tmp_path / "imported").exists()            # only the entry point named is loaded
    assert "failed to load" in registry.resolve("broken").unavailable
    with pytest.raises(UsageError, match="installed: (.*, )?mine, broken, other"):
        registry.resolve("nobody")


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
    assert {r["status"] for r in pair_rows(base, plain)} == {"pass"}               # no variant kwargs passed
    skipped = pair_rows(g8, plain)
    assert {r["status"] for r in skipped} == {"skip"} and "group_size" in skipped[0]["reason"]
    assert {r["status"] for r in pair_rows(g8, grouped)} == {"pass"}
    assert "norm_before_gate" in pair_rows(first, grouped)[0]["reason"]
    assert {r["status"] for r in pair_rows(first, picky)} == {"pass"}
    zc = pair_rows(make_case(shape=(4, 32), zero_centered_gamma=True), picky)
    assert {r["status"] for r in zc} == {"skip"} and zc[0]["reason"] == "no zero-centred gamma"
    dec = pair_rows(base, declines)
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


SPARSE_BODY = GOOD_BODY + """
class Sparse(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.weight = inner, inner.weight
    def forward(self, x, gate):
        y = self.inner(x, gate)
        return y.to_sparse() if not torch.is_grad_enabled() else y     # the serving path's y is sparse
def sparse(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return Sparse(make(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device))
"""


def test_a_sparse_output_is_a_contract_failure_in_a_worker_too(tmp_path, monkeypatch, capsys):
    """Not a crash of the harness's own wire (it sent only dense tensors): y_infer's row says why."""
    from harness.cli import main
    from harness.reports.rundir import read_results
    mod = write_module(tmp_path, monkeypatch, SPARSE_BODY)
    rows = pair_rows(make_case(shape=(4, 32)), registry.resolve(f"s={mod}:sparse"))
    infer = [r for r in rows if r["output"] == "y_infer"]
    assert infer and all(r["fail_kind"] == "contract" and "layout sparse_coo" in r["reason"] for r in infer)
    assert all(r["status"] == "pass" for r in rows if r["output"] != "y_infer")
    (tmp_path / "s.toml").write_text('[[group]]\ndtype = ["bf16"]\nshape = [[4, 32]]\n')
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--impl", f"s={mod}:sparse", "--cases", "s.toml", "--device", "cpu", "--isolate", "process",
                 "--out", "o", "--no-report", "--repeats", "0"])
    df = read_results(tmp_path / "o" / "results.csv")
    assert code == 1 and set(df.loc[df["output"] == "y_infer", "fail_kind"]) == {"contract"}
    assert "exited with status" not in capsys.readouterr().out


def test_an_exception_whose_message_cannot_be_read_is_still_named(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, GOOD_BODY + """
class Unreadable(RuntimeError):
    def __str__(self):
        raise ValueError("no")
def raises(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    raise Unreadable()
import harness
class Declines(harness.Unsupported):
    def __str__(self):
        raise ValueError("no")
def declines(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    raise Declines()
""")
    rows = pair_rows(make_case(shape=(4, 32)), registry.resolve(f"u={mod}:raises"))
    assert {r["status"] for r in rows} == {"error"}
    assert all("Unreadable: (its message could not be read" in r["reason"] for r in rows)
    rows = pair_rows(make_case(shape=(4, 32)), registry.resolve(f"d={mod}:declines"))
    assert {r["status"] for r in rows} == {"skip"}                     # still its skip, not our error
    assert all("could not be read" in r["reason"] for r in rows)
