"""The accelerated passes (references/accel/) against the eager closed forms: Inductor's compiled
graph of the very same closed forms, the compiled undecided mask (bit for bit), the hand-written
Triton kernel (within float64_error_bound * gauge, NaN where eager's is NaN; on CUDA compiled, on a
CPU with Triton in its interpreter, else skipped), the dispatch and its fallbacks; and where a
case's references are built (harness.pipeline.settings.analysis_device) — the rows do not depend on it."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import harness.pipeline.judge as judge
import harness.pipeline.settings as settings
from harness.impls.registry import resolve
from harness.references import accel
from harness.references.accel import triton_regs
from harness.references.exact import Inputs, exact_outputs, float64_error_bound
from harness.references.formats import fmt_of, round_to, undecided
from tests.conftest import make_case, make_inputs, pair_rows

REPO = Path(__file__).resolve().parents[1]


def within_bound(got: tuple, inp: Inputs, factor: float = 2.0) -> float:
    """The worst |got - eager| / (bound * gauge) over the four outputs (NaN and inf where eager's)."""
    v, g = exact_outputs(inp.to("cpu"))
    b = float64_error_bound(inp)
    worst = 0.0
    for k in ("y", "dx", "dgate", "dweight"):
        a = got[0][k].cpu()
        assert torch.equal(a.isnan(), v[k].isnan()), k
        fin = torch.isfinite(v[k])
        assert torch.equal(a[~fin & ~v[k].isnan()], v[k][~fin & ~v[k].isnan()]), k
        r = (a[fin] - v[k][fin]).abs() / (b[k] * g[k][fin] + 1e-300)
        worst = max([worst] + ([float(r.max())] if r.numel() else []))
        if k in got[1]:                                          # the Triton pass leaves |y| to its caller
            assert torch.allclose(got[1][k].cpu()[fin], g[k][fin], rtol=1e-12, atol=1e-300), k
    assert worst <= factor
    return worst


@pytest.mark.parametrize("group,nbg,activation", [(None, True, "silu"), (8, False, "silu"), (8, False, "sigmoid")])
def test_inductor_pass_compiles_the_closed_forms(group, nbg, activation):
    base = make_inputs((3, 32), torch.bfloat16, True, seed=7)
    inp = Inputs(base.x, base.gate, base.weight, base.dy, 1e-5, True, group, nbg, activation)
    from harness.references.accel.inductor import exact_outputs_compiled
    within_bound(exact_outputs_compiled(inp), inp)


@pytest.mark.parametrize("nbg", [True, False])
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_certification_of_a_case_on_the_gpu_is_the_cpu_one(nbg):
    """A big case is certified where it is analysed: its exact-sum pass (double-double sums) runs on
    the GPU, and every golden value is the CPU's (which elements float64 flags may differ: the GPU
    sums in another order), none left uncertified."""
    from harness.references.certify import certify
    base = make_inputs((8, 4096), torch.float32, seed=7, gate_scale=4.0)
    inp = Inputs(base.x, base.gate, base.weight, base.dy, base.eps, False, None, nbg)
    for out in ("y", "dx", "dgate", "dweight"):
        cpu, gpu = certify(inp, out, fmt_of("fp32")), certify(inp.to("cuda"), out, fmt_of("fp32"))
        assert gpu.golden.is_cuda and torch.equal(gpu.golden.cpu(), cpu.golden), out
        assert gpu.uncertified == cpu.uncertified == 0, out


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
def test_compiled_undecided_mask_is_the_eager_one_bit_for_bit(device):
    """round_to's float64 add-and-subtract of a power of two must survive compilation (no
    reassociation, no contraction): the compiled mask, on the CPU (C++) and CUDA (Triton), is the
    eager CPU one."""
    fmt = fmt_of("bf16")
    g = torch.Generator().manual_seed(3)
    v = torch.randn(4096, generator=g, dtype=torch.float64)
    k = torch.randint(128, 256, (1024,), generator=g)
    v[:1024] = (k.double() + 0.5) * 2.0 ** -7          # exact bf16 midpoints in [1, 2)
    b = torch.full_like(v, 1e-9)
    fn = torch.compile(lambda v, b: undecided(v, b, fmt), dynamic=False, fullgraph=True)
    assert torch.equal(fn(v.to(device), b.to(device)).cpu(), undecided(v, b, fmt))
    assert int(undecided(v, b, fmt)[:1024].sum()) == 1024


def test_dispatch_and_fallbacks(monkeypatch):
    inp = make_inputs((2, 16), torch.bfloat16, seed=1)
    assert accel.pass_for(inp) == "eager"                       # the CPU, or a small case
    monkeypatch.setattr(accel, "worth_fusing", lambda t: True)
    monkeypatch.setattr(triton_regs, "fits", lambda i: True)
    assert accel.pass_for(inp, "auto") == "triton" and accel.pass_for(inp, "inductor") == "inductor"
    assert accel.pass_for(inp, "eager") == "eager"
    with pytest.raises(ValueError):
        accel.pass_for(inp, "cuda-magic")

    def broken(*a, **k):
        raise RuntimeError("no compiler for this GPU")
    monkeypatch.setattr(triton_regs, "exact_outputs", broken)
    import harness.references.accel.inductor as ind
    monkeypatch.setattr(ind, "exact_outputs_compiled", broken)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = accel.exact_outputs(inp)                         # Triton fails, then Inductor: eager
    assert any("Triton" in str(x.message) for x in w) and any("Inductor" in str(x.message) for x in w)
    within_bound(got, inp, factor=0.0)
    assert accel.pass_for(inp) == "eager"                      # both remembered as failed for this key


def test_sigmoid_table_holds_every_bit_pattern():
    for dtype in (torch.bfloat16, torch.float16):
        tab = triton_regs.sigmoid_table(dtype, "cpu")
        bits = torch.arange(1 << 16, dtype=torch.int32)
        t = torch.where(bits >= 1 << 15, bits - (1 << 16), bits).to(torch.int16).view(dtype).double()
        fin = torch.isfinite(t)
        assert torch.equal(tab[fin, 0], torch.sigmoid(t[fin])) and torch.equal(tab[fin, 1], torch.sigmoid(-t[fin]))


def test_triton_kernel_fits_only_what_it_was_measured_on(monkeypatch):
    inp = make_inputs((4, 2048), torch.bfloat16, seed=1)
    assert not triton_regs.fits(inp)                           # not on CUDA
    grouped = Inputs(inp.x, inp.gate, inp.weight, inp.dy, 1e-5, False, 256)
    assert not triton_regs.fits(grouped)
    monkeypatch.setattr(triton_regs, "available", lambda: True)
    on_cuda = SimpleNamespace(is_cuda=True, shape=inp.x.shape)           # what fits reads of x
    assert triton_regs.fits(replace(inp, x=on_cuda))             # silu, one group, norm first: the kernel
    assert not triton_regs.fits(replace(inp, x=on_cuda, activation="sigmoid"))


TRITON_CASES = [((5, 1024), torch.bfloat16, False, 1e-5, 0.0), ((3, 4, 1536), torch.float16, True, 1e-6, -3.0),
                ((7, 2048), torch.float32, False, 1e-5, 2.0), ((2, 4096), torch.bfloat16, False, 1e-5, -40.0)]


def check_triton(device: str) -> None:
    for shape, dt, zc, eps, shift in TRITON_CASES:
        inp = make_inputs(shape, dt, zc, gate_shift=shift, eps=eps, gate_dtype=torch.float32 if shift == 2.0 else None,
                          seed=len(shape)).to(device)
        within_bound(triton_regs.exact_outputs(inp, poison=True), inp)
    nan_x = make_inputs((4, 1024), torch.bfloat16, seed=6).to(device)
    nan_x.x[0, 3] = float("nan")                               # row 0 and every dweight NaN, as eager's
    within_bound(triton_regs.exact_outputs(nan_x, poison=True), nan_x)


def test_triton_kernel_matches_the_closed_forms():
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        check_triton("cuda")
        return
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", "from tests.test_accel import check_triton; check_triton('cpu')"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_auto_backend_runs_the_triton_kernel_where_it_fits(monkeypatch):
    monkeypatch.setattr(accel, "FUSED_MIN_ELEMENTS", 1)
    inp = make_inputs((64, 1024), torch.bfloat16, seed=2).to("cuda")
    assert accel.pass_for(inp) == "triton"
    within_bound(accel.exact_outputs(inp), inp)
    grouped = Inputs(inp.x, inp.gate, inp.weight, inp.dy, 1e-5, False, 128, False)
    assert accel.pass_for(grouped) == "inductor"
    within_bound(accel.exact_outputs(grouped), grouped)
    sigmoid = Inputs(inp.x, inp.gate, inp.weight, inp.dy, 1e-5, False, activation="sigmoid")
    assert accel.pass_for(sigmoid) == "inductor"               # the Triton kernel is silu's only
    within_bound(accel.exact_outputs(sigmoid), sigmoid)


# ------------------------------------------------------------------ where the analysis runs

@pytest.mark.parametrize("shape,device,want", [
    ((4, 19), "cuda", "cpu"), ((512, 511), "cuda", "cpu"), ((512, 512), "cuda", "cuda"),
    ((8192, 4096), "cuda", "cuda"), ((4, 19), "cpu", "cpu"), ((8192, 4096), "cpu", "cpu")])
def test_analysis_device_small_cuda_cases_on_the_cpu(shape, device, want):
    assert settings.analysis_device(make_case(shape=tuple(shape)), device) == want


@pytest.mark.parametrize("golden", [False, True])
def test_the_judge_puts_references_where_analysis_runs(monkeypatch, tmp_path, golden):
    case = make_case(shape=(4, 19))
    seen = []
    monkeypatch.setattr(judge, "analysis_device", lambda c, d: seen.append((c.case_id, d)) or "cpu")
    refs = judge.Judge(settings.Settings("meta", golden_dir=tmp_path if golden else None)).references(
        case, resolve("torch"))
    assert seen == [(case.case_id, "meta")]
    assert refs.values["y"].device.type == "cpu"
    assert bool(list(tmp_path.glob("*.npz"))) == golden


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("impl_name", ["torch", "torch-fused"])
def test_rows_same_whether_analysed_on_cpu_or_cuda(monkeypatch, impl_name):
    impl = resolve(impl_name)
    case = make_case(shape=(16, 96), dtype="bf16")
    results = {}
    for below in (1 << 30, 0):                        # all on the CPU; all on the GPU
        monkeypatch.setattr(settings, "ANALYSIS_ON_CPU_BELOW", below)
        results[below] = pair_rows(case, impl, settings.Settings("cuda", repeats=0))
    a, b = results[1 << 30], results[0]
    assert [r["status"] for r in a] == [r["status"] for r in b] and len(a) == 10
    for ra, rb in zip(a, b):
        assert ra["max_ulp"] == pytest.approx(rb["max_ulp"], rel=1e-9, abs=1e-9), (ra["output"], ra["reference"])


def test_round_to_is_what_the_mask_decides():
    fmt = fmt_of("fp16")
    v = torch.tensor([1.0, 1 + 2.0 ** -11, 1 + 2.0 ** -11 + 1e-12], dtype=torch.float64)
    m = undecided(v, torch.full_like(v, 1e-10), fmt)
    assert m.tolist() == [False, True, True]
    assert round_to(v, fmt).tolist()[0] == 1.0
