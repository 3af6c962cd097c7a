"""Where a case's references and analysis run (harness.runner.analysis_device): on the CPU for
small cases of a CUDA sweep, on the device otherwise — and the rows do not depend on it."""
from __future__ import annotations

import pytest
import torch

import harness.runner as runner
from harness.analysis.check import check
from harness.execute import run_impl
from harness.impls.registry import resolve
from tests.conftest import make_case


@pytest.mark.parametrize("shape,device,want", [
    ((4, 19), "cuda", "cpu"), ((2, 3, 128), "cuda:1", "cpu"),
    ((512, 511), "cuda", "cpu"),                     # 261632 < 2^18
    ((512, 512), "cuda", "cuda"),                    # exactly 2^18: the device
    ((8192, 4096), "cuda", "cuda"),
    ((4, 19), "cpu", "cpu"), ((8192, 4096), "cpu", "cpu")])
def test_analysis_device_small_cuda_cases_on_the_cpu(shape, device, want):
    assert runner.analysis_device(make_case(shape=list(shape)), device) == want


@pytest.mark.parametrize("golden", [False, True])
def test_case_inputs_puts_references_where_analysis_runs(monkeypatch, tmp_path, golden):
    # the implementation's device is "meta" (no CUDA needed); analysis_device says "cpu": the
    # references (fresh or from the golden store) must be built there, the inputs go to "meta"
    case = make_case(shape=[4, 19])
    seen = []
    monkeypatch.setattr(runner, "analysis_device", lambda c, d: seen.append((c.case_id, d)) or "cpu")
    inp, refs = runner.case_inputs(case, "x", "meta", tmp_path if golden else None)
    assert seen == [(case.case_id, "meta")]
    assert inp.x.device.type == "meta" and inp.gate.device.type == "meta"
    assert refs.inputs.x.device.type == "cpu" and refs.values["y"].device.type == "cpu"
    assert torch.isfinite(refs.values["y"]).all()
    assert bool(list(tmp_path.glob("*.npz"))) == golden


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("impl_name", ["torch", "torch-fused"])
def test_rows_same_whether_analysed_on_cpu_or_cuda(monkeypatch, impl_name):
    impl = resolve(impl_name)
    case = make_case(shape=[16, 96], dtype="bf16")
    results = {}
    for below in (1 << 30, 0):                        # all on the CPU; all on the GPU
        monkeypatch.setattr(runner, "ANALYSIS_ON_CPU_BELOW", below)
        inp, refs = runner.case_inputs(case, impl.act_follows, "cuda")
        assert refs.inputs.x.device.type == ("cpu" if below else "cuda")
        outcome = run_impl(impl, inp, inp.x.dtype, "cuda")
        results[below] = check(case, impl, "cuda", refs, outcome)
    a, b = results[1 << 30], results[0]
    assert [r["status"] for r in a] == [r["status"] for r in b] and len(a) == 8
    for ra, rb in zip(a, b):
        # the float64 references of the two devices may differ in their last bits, not more
        assert ra["max_ulp"] == pytest.approx(rb["max_ulp"], rel=1e-9, abs=1e-9), (ra["output"], ra["reference"])
        assert ra["worst_got"] == rb["worst_got"] or ra["max_ulp"] == pytest.approx(0.0, abs=1e-9)
