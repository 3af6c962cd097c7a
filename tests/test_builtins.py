"""The built-in implementations on the CPU: each passes its model on a few cases (torch.compile's
emulation and torch.compile itself, Inductor on the CPU, on two), and every built-in name resolves."""
from __future__ import annotations

import pytest

from harness.impls import registry
from harness.reports.schema import CHECKED_OUTPUTS
from tests.conftest import make_case, pair_rows

CPU_CASES = [
    make_case(),
    make_case(dtype="fp16", gate_dtype="fp32", weight_dtype="fp16", zero_centered_gamma=True, gamma_dist="zero",
          gate_dist="negative", shape=(2, 3, 16)),
    make_case(dtype="fp32", gate_dtype="fp32", weight_dtype="fp32", shape=(8, 24)),
    make_case(gate_dist="underflow", x_dist="zero_row", shape=(4, 16)),
]


@pytest.mark.parametrize("name", ["torch", "torch-fused", "torch-compile-emulate"])
def test_cpu_builtins_pass(name):
    impl = registry.resolve(name)
    assert impl.skip_reason("cpu") is None
    cases = CPU_CASES if name != "torch-compile-emulate" else CPU_CASES[:2]
    for case in cases:
        rows = pair_rows(case, impl)
        assert len(rows) == 10
        bad = [(r["output"], r["reference"], r["reason"]) for r in rows if r["status"] != "pass"]
        assert bad == [], (case.label, bad)
        assert {r["output"] for r in rows} == set(CHECKED_OUTPUTS)
        assert all(r["replay"].startswith(f"harness replay {case.case_id} --impl {name}") for r in rows)


def test_torch_compile_realises_the_fused_model():
    """Inductor (defaults) elides the n -> x.dtype round trip: the fused model, every output
    (bench/RESULTS.md, run 6 on CUDA; the CPU likewise). Each variant, shape and eps is a graph of
    its own (static shapes), three each (training, no_grad, inference_mode), all of one code object,
    so the impl raises Dynamo's recompile limit past what one process of `full` compiles: at the
    default 8, later shapes silently ran eager."""
    import torch._dynamo.config as dcfg

    from harness.cases.suite import load_suite
    graphs = {(c.dtype, c.gate_dtype, c.weight_dtype, c.group_size, c.norm_before_gate, c.zero_centered_gamma,
               c.activation, tuple(c.shape), c.eps) for c in load_suite("full").cases}
    impl = registry.resolve("torch-compile")
    assert impl.rounding.name == "fused"
    for case in CPU_CASES[:2]:
        rows = pair_rows(case, impl)
        bad = [(r["output"], r["reference"], r["reason"]) for r in rows if r["status"] != "pass"]
        assert len(rows) == 10 and bad == [], (case.label, bad)
    assert dcfg.recompile_limit >= 3 * len(graphs)
    assert dcfg.accumulated_recompile_limit >= 3 * len(graphs)


def test_builtin_names_resolve():
    found = registry.builtins()
    assert {"torch", "torch-fused", "torch-xhat", "torch-compile", "torch-compile-emulate", "fla", "te"} <= set(found)
    for name in found:
        assert registry.resolve(name).name == name and registry.resolve(name).spec == name
    for name in ("torch", "torch-fused", "torch-xhat", "torch-compile", "torch-compile-emulate"):
        assert registry.resolve(name).unavailable is None


def test_the_recompile_limit_grows_with_the_compiled_modules_made():
    """However many pairs a process runs (hypothesis, a long pytest session), the limit stays above
    the graphs their modules can have compiled: past it Dynamo would run the rest eager, silently."""
    import torch
    import torch._dynamo.config as dcfg

    from harness.impls.torch_ref import GRAPHS_PER_INSTANCE, Compiled, _compiled
    make = _compiled(False)
    mods = [make(4, eps=1e-5, zero_centered_gamma=False, dtype=torch.float32, device="cpu") for _ in range(1100)]
    assert len(mods) == 1100 and Compiled.instances >= 1100
    need = GRAPHS_PER_INSTANCE * Compiled.instances
    assert need > 4096 and dcfg.recompile_limit >= need and dcfg.accumulated_recompile_limit >= need


def test_torch_compile_skips_only_the_guard_latency_profile(monkeypatch):
    """The built-in's compiles skip Dynamo's guard-latency profile (a cache flush a graph), and
    nothing else: the function is back after each call, another token count still fails the
    guards and compiles a graph of its own, and the output has the bits of the same graph compiled
    with the profile (a plain torch.compile of the same module and options, Dynamo reset between:
    torch 2.11's CPU code differs from the eager chain, so that is not the measure)."""
    import torch
    import torch._dynamo.guards as guards
    from torch._dynamo.utils import counters

    from harness.impls.torch_ref import _compiled
    calls = []
    monkeypatch.setattr(guards, "profile_guard_manager", lambda *a: calls.append(a) or 1.0)
    spy = guards.profile_guard_manager
    m = _compiled(True)(24, eps=1e-5, zero_centered_gamma=False, dtype=torch.bfloat16, device="cpu")
    plain = torch.compile(m.inner, dynamic=False, options={"emulate_precision_casts": True})
    x, g = torch.randn(3, 24).bfloat16(), torch.randn(3, 24).bfloat16()
    with torch.no_grad():
        torch._dynamo.reset()
        want = plain(x, g)
        assert len(calls) == 1                                     # profiled: the control
        torch._dynamo.reset()
        graphs = counters["stats"]["unique_graphs"]
        got = m(x, g)
        m(torch.cat([x, x]), torch.cat([g, g]))
    assert counters["stats"]["unique_graphs"] == graphs + 2 and len(calls) == 1
    assert guards.profile_guard_manager is spy
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
