"""Issue 27's probes, each through `harness run` (its pairs in a worker: the implementation's process
apart from its judge's): a backward that rewrites dy in place, a correct kernel that writes dx into
dy's buffer, flush-to-zero turned on, torch.rsqrt patched, the verdict function wrapped, results.csv
rewritten while the sweep runs, a kernel right on its first call only, a persistent output buffer,
Tensor subclasses. Before the pipeline, each of them passed — or made a correct kernel fail."""
from __future__ import annotations

import pytest

from harness.cli import main
from harness.reports.rundir import read_results

PROBES = '''import os
import sys
import time

import torch
from torch import nn

from harness.impls.torch_ref import GatedRMSNorm


def _kw(make):
    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device):
        return make(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
    return factory


class Off(GatedRMSNorm):                       # 5 % off on every call
    def forward(self, x, gate):
        return super().forward(x, gate) * 1.05


class _AbsDy(torch.autograd.Function):         # the bug: |dy|, taken in place on the caller's dy
    @staticmethod
    def forward(ctx, y):
        return y.clone()

    @staticmethod
    def backward(ctx, dy):
        return dy.abs_()


class AbsDy(GatedRMSNorm):
    def forward(self, x, gate):
        return _AbsDy.apply(super().forward(x, gate))


class _DxIntoDy(torch.autograd.Function):      # correct; dx written into dy's storage (Liger in_place)
    @staticmethod
    def forward(ctx, x, gate, weight, inner):
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in (x, gate, weight)]
            y = torch.func.functional_call(inner, {"weight": leaves[2]}, (leaves[0], leaves[1]))
        ctx.graph = (y, leaves)
        return y.detach()

    @staticmethod
    def backward(ctx, dy):
        y, leaves = ctx.graph
        dx, dgate, dw = torch.autograd.grad(y, leaves, dy)
        dy.copy_(dx)
        return dy, dgate, dw, None


class DxIntoDy(nn.Module):
    def __init__(self, h, **kw):
        super().__init__()
        self.inner = GatedRMSNorm(h, **kw)
        self.weight = self.inner.weight

    def forward(self, x, gate):
        return _DxIntoDy.apply(x, gate, self.weight, self.inner)


class FirstOnly(GatedRMSNorm):                 # right on its first call only
    def forward(self, x, gate):
        self.n = getattr(self, "n", 0) + 1
        y = super().forward(x, gate)
        return y if self.n == 1 else y * 1.05


class _IntoBuffer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, owner, scale):
        owner.buf.copy_(y * scale)
        ctx.scale = scale
        return owner.buf

    @staticmethod
    def backward(ctx, g):
        return g, None, None


class Persistent(GatedRMSNorm):                # 5 % off on its first call, into a buffer it reuses
    def forward(self, x, gate):
        y = super().forward(x, gate)
        if not hasattr(self, "buf"):
            self.buf, self.n = torch.empty_like(y), 0
        self.n += 1
        return _IntoBuffer.apply(y, self, 1.05 if self.n == 1 else 1.0)


class DtypeLiar(torch.Tensor):                 # says bf16 over float32 data
    @property
    def dtype(self):
        return torch.bfloat16


class Liar(GatedRMSNorm):
    def forward(self, x, gate):
        return super().forward(x, gate).float().as_subclass(DtypeLiar)


class ToLiar(torch.Tensor):                    # .to() gives the right values; the data is 5 % off
    right = None

    def to(self, *a, **k):
        return torch.Tensor.to(ToLiar.right, *a, **k)


class ToLie(GatedRMSNorm):
    def forward(self, x, gate):
        y = super().forward(x, gate)
        ToLiar.right = y.detach()
        return (y + (0.05 * y).detach()).as_subclass(ToLiar)


class Flush(GatedRMSNorm):                     # a library built with -Ofast turns FTZ/DAZ on
    def forward(self, x, gate):
        torch.set_flush_denormal(True)
        return super().forward(x, gate)


off, abs_dy, dx_into_dy, first_only, persistent, liar, to_lie, flush = (
    _kw(c) for c in (Off, AbsDy, DxIntoDy, FirstOnly, Persistent, Liar, ToLie, Flush))


_RSQRT = torch.rsqrt


def _rsqrt_without_eps(t, *args, **kwargs):        # the float64 references' rsqrt, with eps taken back out
    return _RSQRT(t - 1e-5 if t.dtype == torch.float64 else t, *args, **kwargs)


def no_eps(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    """The bug: eps left out of the sqrt; and torch.rsqrt patched in its process to hide it."""
    torch.rsqrt = _rsqrt_without_eps
    return GatedRMSNorm(hidden_size, eps=0.0, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)


def _passing(verdict):
    import dataclasses

    def wrapped(*args, **kwargs):
        got = verdict(*args, **kwargs)
        if isinstance(got, tuple):                  # this pipeline's typed checks
            return tuple(dataclasses.replace(c, status="pass", finding=None) for c in got)
        return [{**r, "status": "pass", "reason": ""} for r in got]     # rows
    return wrapped


def _wrap_the_verdict():
    import importlib
    for module, name in (("harness.pair", "check"), ("harness.analysis.check", "checks"),
                         ("harness.pipeline.judge", "checks")):
        try:
            m = importlib.import_module(module)
        except ImportError:
            continue
        if hasattr(m, name) and not getattr(getattr(m, name), "wrapped", False):
            setattr(m, name, _passing(getattr(m, name)))
            getattr(m, name).wrapped = True


class Wraps(Off):
    def forward(self, x, gate):
        _wrap_the_verdict()
        return super().forward(x, gate)


class Rewrites(GatedRMSNorm):                  # 5 % off on hidden 32; on hidden 16 it edits results.csv
    def forward(self, x, gate):
        y = super().forward(x, gate)
        if x.shape[-1] == 32:
            return y * 1.05
        path = os.environ["REWRITE"]
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(text.replace(",fail,", ",pass,"))
        return y


wraps, rewrites = _kw(Wraps), _kw(Rewrites)
'''

# One sweep. fp32 with subnormal x (flush-to-zero flushes it) and with tiny x (eps decides the
# norm); bf16 hidden 32; and last a bf16 hidden-16 case, on which `rewrites` edits results.csv.
SUITE = """
[[case]]
dtype = "fp32"
shape = [4, 32]
x_dist = "subnormal"
[[case]]
dtype = "fp32"
shape = [4, 32]
x_dist = "tiny"
[[case]]
dtype = "bf16"
shape = [4, 32]
[[case]]
dtype = "bf16"
shape = [4, 16]
"""
# In this order on each case, in the one worker: a correct implementation right after each probe
# that leaves something behind in its process (a rewritten buffer, flush-to-zero, a patched rsqrt).
IMPLS = ["dx_into_dy", "torch", "flush", "after_flush", "no_eps", "after_no_eps", "wraps", "abs_dy",
         "first_only", "persistent", "liar", "to_lie", "rewrites"]
CORRECT = ("torch", "after_flush", "after_no_eps")


def spec(name: str) -> str:
    if name == "torch":
        return name
    return f"{name}=harness.impls.torch_ref:chain" if name in CORRECT else f"{name}=probes:{name}"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    d = tmp_path_factory.mktemp("probes")
    (d / "probes.py").write_text(PROBES)
    (d / "s.toml").write_text(SUITE)
    out = d / "o"
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(d))
    mp.setenv("REWRITE", str(out / "results.csv"))
    try:
        argv = ["run", "--cases", str(d / "s.toml"), "--device", "cpu", "--out", str(out), "--no-report"]
        code = main(argv + [a for n in IMPLS for a in ("--impl", spec(n))])
    finally:
        mp.undo()
    return code, read_results(out / "results.csv")


def rows(df, impl, output=None, x_dist=None):
    d = df[df["impl"] == impl]
    if output is not None:
        d = d[d["output"] == output]
    if x_dist is not None:
        d = d[d["x_dist"] == x_dist]
    return d


def test_the_results_are_what_the_judges_sent(swept):
    """`rewrites` turned every `fail` in results.csv into `pass` while the sweep ran: the file the
    command writes, and its exit code, come from the rows it holds."""
    code, df = swept
    assert code == 1
    assert len(df) == len(IMPLS) * 4 * 10 and not df.duplicated(["case_id", "impl", "output", "reference"]).any()
    bad = rows(df, "rewrites")
    assert (bad[bad["hidden"] == 32]["status"] == "fail").any() and (bad[bad["hidden"] == 16]["status"] == "pass").all()


def test_correct_implementations_are_unaffected_by_the_one_before(swept):
    _, df = swept
    for name in CORRECT:
        assert (rows(df, name)["status"] == "pass").all(), name
        assert (rows(df, name)["inputs_modified"].fillna("") == "").all()


def test_a_buffer_reusing_correct_kernel_passes_and_is_named(swept):
    """Liger-Kernel's in-place RMSNorm writes dx into dy's storage: its own copy of dy."""
    from harness.gate import verdict
    _, df = swept
    r = rows(df, "dx_into_dy")
    assert (r["status"] == "pass").all() and (r["inputs_modified"] == "dy").all()
    assert "harness: note: dx_into_dy: wrote into its own copy of dy (the inputs are each call's own: no " \
           "reference and no other implementation saw it), in 4 of 4 pairs" in verdict(df)[1]


def test_a_backward_that_rewrites_dy_fails(swept):
    _, df = swept
    r = rows(df, "abs_dy")
    assert (r["inputs_modified"] == "dy").all()
    for out in ("dx", "dgate", "dweight"):
        assert (rows(df, "abs_dy", out)["fail_kind"] == "over_budget").any(), out
    assert (rows(df, "abs_dy", "y")["status"] == "pass").all()


def test_flush_to_zero_cannot_change_a_reference(swept):
    _, df = swept
    y = rows(df, "flush", "y", "subnormal")
    model = y[y["reference_kind"] == "model"]                   # (extreme x: the exact value is reported only)
    assert len(model) == 1 and (model["fail_kind"] == "over_budget").all()
    assert rows(df, "after_flush", "y", "subnormal")["status"].eq("pass").all()
    notes = rows(df, "flush")["notes"].fillna("")
    assert notes.str.contains("left subnormals flush to zero").all()


def test_a_patched_rsqrt_cannot_change_a_reference(swept):
    """eps left out of the sqrt, hidden by a float64-only torch.rsqrt in its process: tiny x fails."""
    _, df = swept
    y = rows(df, "no_eps", "y", "tiny")
    assert (y[y["reference_kind"] == "model"]["fail_kind"] == "over_budget").all()


def test_a_wrapped_verdict_function_changes_nothing(swept):
    _, df = swept
    r = rows(df, "wraps")
    assert (r[r["reference_kind"] == "model"]["fail_kind"] == "over_budget").all()


def test_what_is_judged_is_the_first_call(swept):
    _, df = swept
    first = rows(df, "first_only")
    assert (first[first["output"] == "y"]["fail_kind"] == "not_repeatable").all()
    assert first["reason"].str.contains("elements differ between calls on the same inputs").any()
    persistent = rows(df, "persistent", "y")                        # 5 % off on its first call, right later
    assert (persistent[persistent["reference_kind"] == "model"]["fail_kind"] == "over_budget").all()


def test_a_tensor_subclass_is_a_contract_failure(swept):
    _, df = swept
    for name, cls in (("liar", "DtypeLiar"), ("to_lie", "ToLiar")):
        y = rows(df, name, "y")
        assert (y["fail_kind"] == "contract").all() and y["reason"].str.contains(f"y is {cls}, a torch.Tensor subclass").all()
        assert (rows(df, name, "y_infer")["fail_kind"] == "contract").all()          # the inference path's too
        assert (rows(df, name)[lambda d: ~d["output"].isin(["y", "y_infer"])]["status"] == "pass").all()


def test_inline_the_judging_runs_after_flush_to_zero_is_put_back(tmp_path, monkeypatch):
    """--isolate inline: one process, but the floating-point environment is checked and put back
    before the references, and the implementation that changed it is named."""
    import harness
    from harness.pipeline import fpenv
    (tmp_path / "probes.py").write_text(PROBES)
    (tmp_path / "s.toml").write_text(SUITE.split("[[case]]")[0] + "[[case]]" + SUITE.split("[[case]]")[1])
    monkeypatch.syspath_prepend(str(tmp_path))
    import probes
    try:
        r = harness.verify(probes.flush, cases=str(tmp_path / "s.toml"), device="cpu", isolate="inline", repeats=0)
    finally:
        assert not fpenv.flushes_subnormals()
    y = r.frame[(r.frame["output"] == "y") & (r.frame["reference_kind"] == "model")]
    assert (y["fail_kind"] == "over_budget").all() and not r.ok
    assert r.frame["notes"].str.contains("left subnormals flush to zero").all()


def test_a_changed_implementation_reruns_on_resume(tmp_path, monkeypatch, capsys):
    """--resume keys on what ran: the --impl text and the source's hash. The module is changed
    under the same --impl text (SiLU in bf16): its pairs run again, and fail."""
    from tests.conftest import SILU_IN_BF16
    (tmp_path / "s.toml").write_text(SUITE.split("[[case]]")[0] + "[[case]]" + SUITE.split("[[case]]")[3])
    kern = tmp_path / "kern.py"
    kern.write_text("from harness.impls.torch_ref import chain as make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["run", "--impl", "k=kern:make", "--cases", str(tmp_path / "s.toml"), "--device", "cpu",
            "--out", str(tmp_path / "o"), "--no-report", "--isolate", "inline"]   # resume's keys, not the worker
    assert main(argv) == 0
    first = read_results(tmp_path / "o" / "results.csv")
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 0 and "[1/" not in capsys.readouterr().err     # nothing changed: kept
    kern.write_text(SILU_IN_BF16 + "\nmake = silu_in_bf16\n")
    import sys
    sys.modules.pop("kern", None)
    assert main(argv + ["--resume"]) == 1
    again = read_results(tmp_path / "o" / "results.csv")
    assert (again["status"] == "fail").any() and set(again["impl_hash"]) != set(first["impl_hash"])
    assert (again["replay"].str.contains("--impl k=kern:make")).all()


def test_a_record_from_the_implementations_process_is_data_never_code():
    """The judging side decodes what the implementation's process sent without unpickling it, and
    refuses anything but a well-formed record."""
    import pickle

    import torch

    from harness.pipeline.call import CallRecord
    from harness.pipeline.wire import WireError, decode, encode
    rec = CallRecord("ran", outputs={"y": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)}, seconds=0.5)
    back = decode(encode(rec))
    assert torch.equal(back.outputs["y"], rec.outputs["y"]) and back.outputs["y"].dtype == torch.bfloat16
    from harness.analysis.result import Speed
    timed = decode(encode(CallRecord("ran", speed=Speed(2e-3, 4e-4, "graph", 1000, 0.5))))
    assert timed.speed == Speed(2e-3, 4e-4, "graph", 1000, 0.5)
    good = encode(rec)
    bad = [pickle.dumps(rec),
           encode(CallRecord("ran", speed=Speed(2e-3, 4e-4, "guess", 1000, 0.5))),     # a method not named
           b"HRC1" + good[4:12] + b"{not json" + good[21:],
           good.replace(b'"bfloat16"', b'"complex64"'), good.replace(b'"ran"', b'"pass"'), good[:-2],
           good.replace(b'"outputs": {"y"', b'"outputs": {"z"')]
    for data in bad:
        with pytest.raises(WireError):
            decode(data)

