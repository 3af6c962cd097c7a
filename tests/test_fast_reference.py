"""references.fast against the eager references: the fused closed forms within the float64 error
bound of exact_outputs, and undecided_fast equal, element for element, to certify.undecided."""
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from harness.references.certify import undecided
from harness.references.exact import exact_outputs, float64_error_bound
from harness.references.fast import exact_outputs_fused, undecided_fast
from harness.references.formats import fmt_of, ulp
from tests.conftest import make_inputs

REPO = Path(__file__).resolve().parents[1]
SHAPES = [(19,), (3, 19), (2, 3, 96), (2, 1, 2, 127)]
FMTS = ["bf16", "fp16", "fp32"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("zc", [False, True])
@pytest.mark.parametrize("gate", [(3.0, 0.0), (1.0, -3.0), (2.0, 4.0), (1.0, -40.0)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fused_matches_exact_outputs(shape, zc, gate, dtype):
    inp = make_inputs(shape, dtype, zc, gate_scale=gate[0], gate_shift=gate[1], seed=len(shape))
    v, g = exact_outputs(inp)
    vf, gf = exact_outputs_fused(inp)
    bound = float64_error_bound(inp)
    # the compiled pass writes y, dx, dgate, dweight and the dx, dgate, dweight gauges; the rest on use
    assert set(vf) == {"y", "dx", "dgate", "dweight"} and set(gf) == {"dx", "dgate", "dweight"}
    assert set(vf) | set(vf.pending()) == set(v) and set(gf) | set(gf.pending()) == set(g)
    for k in v:
        assert vf[k].shape == v[k].shape and vf[k].dtype == torch.float64, k
        assert torch.all((vf[k] - v[k]).abs() <= bound[k] * g[k] + 1e-300), k
        # the gauges are themselves float64 evaluations: same bound, relative to themselves
        assert torch.all((gf[k] - g[k]).abs() <= bound[k] * g[k] + 1e-300), k
    # the same per-element results where no reduction or transcendental is involved
    assert torch.equal(vf["n"], v["n"]) or torch.all((vf["n"] - v["n"]).abs() <= bound["n"] * g["n"])


def test_fused_extreme_gate_gives_zero_like_eager():
    inp = make_inputs((2, 8), torch.bfloat16, gate_scale=0.0, gate_shift=-1000.0)
    vf, _ = exact_outputs_fused(inp)
    assert torch.all(vf["y"] == 0) and torch.all(vf["dgate"] == 0)


def _near_boundaries(fmt, n, gen):
    """float64 values at, and a few float64 ulps either side of, midpoints and representable values
    of `fmt` across its whole range (subnormals, the overflow threshold, powers of two)."""
    p, emin = fmt.precision, fmt.emin
    e = torch.randint(emin - p - 2, int(math.log2(fmt.max)) + 2, (n,), generator=gen, dtype=torch.float64)
    m = torch.randint(0, 1 << min(p, 20), (n,), generator=gen, dtype=torch.float64)
    base = torch.ldexp(1 + m / (1 << min(p, 20)), e)           # some value
    q = ulp(base, fmt)
    k = torch.floor(base / q)
    mid = (k + 0.5) * q                                          # a rounding midpoint
    rep = k * q                                                  # a representable value
    pts = torch.cat([mid, rep, torch.ldexp(torch.ones(n, dtype=torch.float64), e),
                     torch.tensor([0.0, fmt.max, fmt.max + q.max().item() / 2, fmt.min_subnormal,
                                   fmt.min_subnormal / 2, 2.0 ** emin, math.inf, -math.inf, math.nan],
                                  dtype=torch.float64)])
    shifts = torch.tensor([0, 1, -1, 2, -2, 7, -7], dtype=torch.float64)
    bits = pts.view(torch.int64)
    out = [(bits + int(s)).view(torch.float64) for s in shifts]  # neighbouring float64s
    v = torch.cat(out)
    v = torch.cat([v, -v])
    return v[torch.isfinite(v) | torch.isinf(pts.repeat(2 * len(shifts))) | torch.isnan(v)]


@pytest.mark.parametrize("fmt_name", FMTS)
def test_undecided_fast_equals_undecided_near_boundaries(fmt_name):
    fmt = fmt_of(fmt_name)
    gen = torch.Generator().manual_seed(fmt.precision)
    v = _near_boundaries(fmt, 3000, gen)
    for rel in (0.0, 2.0 ** -60, 2.0 ** -53, 2.0 ** -50, 2.0 ** -40, 2.0 ** -20, 2.0 ** -8):
        b = v.abs() * rel
        b = torch.where(torch.isfinite(b), b, torch.zeros_like(b))
        # also a bound that is a float64 ulp or two (the value itself sits that close to the boundary)
        for bb in (b, torch.full_like(v, fmt.min_subnormal / 4), torch.full_like(v, 0.0)):
            want = undecided(v, bb, fmt)
            got = undecided_fast(v, bb, fmt)
            assert torch.equal(got, want), (fmt_name, rel, int((got != want).sum()))
    from harness.references.fast import _FAILED
    assert not [k for k in _FAILED if k[0] == "undecided"]      # the compiled pass ran, no eager fallback
    # exact midpoints with a zero bound are decided (ties to even), any bound that moves v +- b off them undecides them
    q = ulp(torch.tensor([1.0], dtype=torch.float64), fmt)
    mid = 1.0 + q / 2
    assert not undecided_fast(mid, torch.zeros(1, dtype=torch.float64), fmt).item()
    assert undecided_fast(mid, torch.full((1,), 2.0 ** -50), fmt).item()   # > half a float64 ulp of mid


@pytest.mark.parametrize("fmt_name", FMTS)
@pytest.mark.parametrize("scale", [1.0, 1e-6, 1e30])
def test_undecided_fast_equals_undecided_random(fmt_name, scale):
    fmt = fmt_of(fmt_name)
    gen = torch.Generator().manual_seed(7)
    v = torch.randn(4, 33, 65, generator=gen, dtype=torch.float64) * scale
    v[0, 0, :5] = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan])
    g = v.abs() * torch.rand(v.shape, generator=gen, dtype=torch.float64)
    for rel in (2.0 ** -53 * 200, 2.0 ** -30, 2.0 ** -(fmt.precision + 1)):
        b = rel * g
        assert torch.equal(undecided_fast(v, b, fmt), undecided(v, b, fmt)), rel


def test_undecided_fast_on_certify_bounds():
    inp = make_inputs((6, 257), torch.bfloat16, gate_shift=-1.2785)
    values, gauges = exact_outputs(inp)
    bound = float64_error_bound(inp)
    for out in ("y", "dx", "dgate", "dweight"):
        for f in FMTS:
            b = bound[out] * gauges[out]
            assert torch.equal(undecided_fast(values[out], b, fmt_of(f)), undecided(values[out], b, fmt_of(f)))




@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sigmoid_table_holds_sigmoid_of_every_bit_pattern(dtype):
    from harness.references.fast import sigmoid_table
    tab = sigmoid_table(dtype, "cpu")
    bits = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16)
    t = bits.view(dtype).to(torch.float64)
    rows = tab[bits.to(torch.int32) & 0xFFFF]                  # how the fused pass indexes it
    for col, want in ((0, torch.sigmoid(t)), (1, torch.sigmoid(-t))):
        got = rows[:, col]
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan) and int(nan.sum()) > 0
        # torch's float64 sigmoid is itself a few ulps; rows differ from it only that much
        assert torch.all((got - want)[~nan].abs() <= 4 * 2.0 ** -53 * want[~nan].abs()), col
    assert rows[:, 0][t == float("inf")].item() == 1.0 and rows[:, 1][t == float("inf")].item() == 0.0


@pytest.mark.parametrize("mode", ["all", "columns"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_pass_with_the_table_matches_exact_outputs(monkeypatch, dtype, mode):
    from harness.references import fast
    monkeypatch.setattr(fast, "FUSED_SIGMOID_TABLE", mode)
    asked, table_of = [], fast.sigmoid_table
    monkeypatch.setattr(fast, "sigmoid_table", lambda d, dev: asked.append(d) or table_of(d, dev))
    inp = make_inputs((3, 96), dtype, True, gate_scale=6.0, gate_shift=-2.0, seed=5)
    v, g = exact_outputs(inp)
    vf, gf = fast.exact_outputs_fused(inp)
    assert asked == [dtype] and fast._key(inp) not in fast._FAILED     # compiled, with the table
    bound = float64_error_bound(inp)
    for k in ("y", "dx", "dgate", "dweight"):
        assert torch.all((vf[k] - v[k]).abs() <= bound[k] * g[k] + 1e-300), k
        assert torch.all((gf[k] - g[k]).abs() <= bound[k] * g[k] + 1e-300), k
    assert fast.has_sigmoid_table(torch.bfloat16) and not fast.has_sigmoid_table(torch.float32)


@pytest.mark.parametrize("mode", ["all", "columns"])
def test_fused_pass_reads_its_sigmoids_from_the_table(monkeypatch, mode):
    """A table holding 2*sigmoid(t) (and sigmoid(-t) as it is) doubles y = n * t * s and dweight
    (a sum of dn * xhat, dn = dy * t * s) where the pass reads it: everywhere ("all"), or in the
    column sums only ("columns": y keeps the exp)."""
    from harness.references import fast
    monkeypatch.setattr(fast, "FUSED_SIGMOID_TABLE", mode)
    table_of = fast.sigmoid_table
    monkeypatch.setattr(fast, "sigmoid_table",
                        lambda d, dev: table_of(d, dev) * torch.tensor([2.0, 1.0], dtype=torch.float64))
    inp = make_inputs((2, 64), torch.bfloat16, False, gate_scale=3.0, seed=9)
    v, g = exact_outputs(inp)
    vf, _ = fast.exact_outputs_fused(inp)
    bound = float64_error_bound(inp)
    assert fast._key(inp) not in fast._FAILED
    y_factor = 2 if mode == "all" else 1
    assert torch.all((vf["y"] - y_factor * v["y"]).abs() <= 2 * bound["y"] * g["y"] + 1e-300)
    assert torch.all((vf["dweight"] - 2 * v["dweight"]).abs() <= 2 * bound["dweight"] * g["dweight"] + 1e-300)
    assert torch.any(v["y"] != 0) and torch.any(v["dweight"] != 0)


def test_fused_table_setting_must_be_a_mode(monkeypatch):
    from harness.references import fast
    monkeypatch.setattr(fast, "FUSED_SIGMOID_TABLE", True)
    with pytest.raises(ValueError, match="FUSED_SIGMOID_TABLE"):
        fast.exact_outputs_fused(make_inputs((2, 8), torch.bfloat16))


@pytest.mark.parametrize("columns", [True, False])
@pytest.mark.parametrize("row_sums", ["xhat", "raw"])
@pytest.mark.parametrize("case", [((3, 19), torch.bfloat16, False, (3.0, 0.0)), ((2, 3, 96), torch.float16, True, (1.0, -3.0)),
                                  ((4, 127), torch.float32, False, (2.0, 4.0)), ((2, 40), torch.bfloat16, True, (1.0, -40.0))])
def test_fused_body_row_sum_forms_match_exact_outputs(case, row_sums, columns):
    """Both ways of writing dx's row sums (mean(dxhat xhat), or r mean(dn g x) — one loop for
    Inductor), with and without the dweight column sums in the graph, eagerly: within the bound."""
    from harness.references.fast import _outputs_body
    shape, dtype, zc, (scale, shift) = case
    inp = make_inputs(shape, dtype, zc, gate_scale=scale, gate_shift=shift, seed=3)
    v, g = exact_outputs(inp)
    bound = float64_error_bound(inp)
    out = _outputs_body(inp.x, inp.gate, inp.weight, inp.dy, None, inp.eps, zc, "off", columns, row_sums)
    got = dict(zip(("y", "dgate", "dx"), out[:3]))
    # with the column sums: y, dgate, dx, dweight, dgate_g, dx_g, dw_g; without: y, dgate, dx, dgate_g, dx_g, r
    gauges = {"dgate": out[4], "dx": out[5]} if columns else {"dgate": out[3], "dx": out[4]}
    if columns:
        got["dweight"], gauges["dweight"] = out[3], out[6]
    else:
        x = inp.x.double()
        assert torch.equal(out[5], torch.rsqrt((x * x).mean(-1, keepdim=True) + inp.eps))
    for k, val in got.items():
        assert torch.all((val - v[k]).abs() <= bound[k] * g[k] + 1e-300), k
    for k, gauge in gauges.items():
        assert torch.all((gauge - g[k]).abs() <= bound[k] * g[k] + 1e-300), k
    if dtype == torch.float32 and not zc:         # the two forms are different evaluations, not one
        other = _outputs_body(inp.x, inp.gate, inp.weight, inp.dy, None, inp.eps, zc, "off", columns,
                              "xhat" if row_sums == "raw" else "raw")
        assert not torch.equal(out[2], other[2])


def test_fused_pass_with_raw_row_sums_matches_exact_outputs(monkeypatch):
    from harness.references import fast
    monkeypatch.setattr(fast, "FUSED_ROW_SUMS", "raw")
    inp = make_inputs((3, 96), torch.bfloat16, True, gate_scale=6.0, gate_shift=-2.0, seed=5)
    v, g = exact_outputs(inp)
    vf, gf = fast.exact_outputs_fused(inp)
    mode = fast.FUSED_SIGMOID_TABLE
    assert fast._key(inp) not in fast._FAILED and ("outputs", mode, True, "raw") + fast._key(inp) in fast._COMPILED
    bound = float64_error_bound(inp)
    for k in ("y", "dx", "dgate", "dweight"):
        assert torch.all((vf[k] - v[k]).abs() <= bound[k] * g[k] + 1e-300), k
        assert torch.all((gf[k] - g[k]).abs() <= bound[k] * g[k] + 1e-300), k


def test_fused_row_sums_setting_must_be_a_mode(monkeypatch):
    from harness.references import fast
    monkeypatch.setattr(fast, "FUSED_ROW_SUMS", "RAW")
    with pytest.raises(ValueError, match="FUSED_ROW_SUMS 'RAW'"):
        fast.exact_outputs_fused(make_inputs((2, 8), torch.bfloat16))


def test_fused_backend_setting_must_be_a_backend(monkeypatch):
    from harness.references import fast
    monkeypatch.setattr(fast, "FUSED_BACKEND", "cuda")
    with pytest.raises(ValueError, match="FUSED_BACKEND 'cuda'"):
        fast.exact_outputs_fused(make_inputs((2, 8), torch.bfloat16))


def test_triton_pass_fits_measured_rows_on_cuda_with_triton(monkeypatch):
    from types import SimpleNamespace
    from harness.references import fast, triton_reference
    monkeypatch.setattr(triton_reference, "available", lambda: True)

    def inp(hidden=4096, eps=1e-5, cuda=True):
        return SimpleNamespace(x=SimpleNamespace(is_cuda=cuda), hidden=hidden, eps=eps)
    assert fast.triton_pass_fits(inp()) and fast.triton_pass_fits(inp(1024)) and fast.triton_pass_fits(inp(eps=1e-20))
    assert not fast.triton_pass_fits(inp(cuda=False))                          # CPU: Inductor's pass
    assert not fast.triton_pass_fits(inp(4097)) and not fast.triton_pass_fits(inp(1023))
    assert not fast.triton_pass_fits(inp(eps=0.0)) and not fast.triton_pass_fits(inp(eps=1e-21))
    monkeypatch.setattr(triton_reference, "available", lambda: False)
    assert not fast.triton_pass_fits(inp())                                     # no Triton installed
    assert not fast.triton_pass_fits(make_inputs((2, 4096), torch.bfloat16))    # a real CPU case


def _stand_in_triton_pass(monkeypatch, behaviour):
    """exact_outputs_triton replaced by behaviour(inp) (recording its calls), every input "fitting"."""
    from harness.references import fast, triton_reference
    calls = []
    monkeypatch.setattr(triton_reference, "exact_outputs_triton",
                        lambda inp, **kw: calls.append((tuple(inp.x.shape), kw)) or behaviour(inp))
    monkeypatch.setattr(fast, "triton_pass_fits", lambda inp: True)
    monkeypatch.setattr(fast, "_FAILED", set())
    monkeypatch.setattr(fast, "_WARNED", set())
    monkeypatch.setattr(fast, "FUSED_BACKEND", "triton")
    return calls


def test_fused_pass_hands_fitting_cases_to_the_triton_pass(monkeypatch):
    from harness.references import fast
    result = (object(), object())
    calls = _stand_in_triton_pass(monkeypatch, lambda inp: result)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fast.exact_outputs_fused(make_inputs((3, 64), torch.bfloat16, seed=2)) is result
        assert fast.exact_outputs_fused(make_inputs((2, 32), torch.float32, seed=2)) is result
    assert calls == [((3, 64), {"layout": "regs", "table": True, "evict": "evict_first"}),    # a 16-bit gate: the table
                     ((2, 32), {"layout": "regs", "table": False, "evict": "evict_first"})]   # fp32: the exp
    monkeypatch.setattr(fast, "FUSED_BACKEND", "inductor")
    inp = make_inputs((3, 64), torch.bfloat16, seed=2)
    vf, gf = fast.exact_outputs_fused(inp)
    assert len(calls) == 2                                    # Inductor's pass, not the stand-in
    _agrees_with_eager(inp, vf, gf)


@pytest.mark.parametrize("where", ["kernel", "fits"])
def test_fused_pass_falls_back_to_inductor_when_the_triton_pass_fails(monkeypatch, where):
    """A failing kernel (no compiler for this GPU, out of resources) or a broken Triton install
    (triton_pass_fits raising): one warning naming the key, Inductor's pass, and no second try."""
    from harness.references import fast

    def broken(inp):
        raise RuntimeError("out of resources")
    calls = _stand_in_triton_pass(monkeypatch, broken)
    if where == "fits":
        monkeypatch.setattr(fast, "triton_pass_fits", lambda inp: broken(inp))
    inp = make_inputs((4, 96), torch.bfloat16, seed=11)
    with pytest.warns(RuntimeWarning, match=r"the Triton reference pass for \(\(4, 96\).*out of resources.*Inductor's pass"):
        vf, gf = fast.exact_outputs_fused(inp)
    assert ("triton",) + fast._key(inp) in fast._FAILED and fast._key(inp) not in fast._FAILED
    _agrees_with_eager(inp, vf, gf)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fast.exact_outputs_fused(inp)                         # the key remembered: no retry, no warning
    assert len(calls) == (1 if where == "kernel" else 0)


def test_fused_backend_comes_from_the_environment():
    code = "import references.fast as f; print(f.FUSED_BACKEND)"
    for value, want in (("inductor", "inductor"), (None, "triton")):
        env = {k: v for k, v in os.environ.items() if k != "HARNESS_FUSED_BACKEND"}
        if value:
            env["HARNESS_FUSED_BACKEND"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == want, out.stderr[-2000:]


def _agrees_with_eager(inp, vf, gf):
    v, g = exact_outputs(inp)
    bound = float64_error_bound(inp)
    for k in ("y", "dx", "dgate", "dweight"):
        assert vf[k].shape == v[k].shape and vf[k].dtype == torch.float64, k
        assert torch.equal(vf[k].isnan(), v[k].isnan()), k
        ok = ~v[k].isnan()
        assert torch.all((vf[k][ok] - v[k][ok]).abs() <= bound[k] * g[k][ok] + 1e-300), k
        assert torch.all((gf[k][ok] - g[k][ok]).abs() <= bound[k] * g[k][ok] + 1e-300), k


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")
def test_fused_pass_on_cuda_runs_the_triton_kernel_where_it_fits(monkeypatch):
    pytest.importorskip("triton")
    from harness.references import fast, triton_reference
    monkeypatch.setattr(fast, "FUSED_BACKEND", "triton")
    monkeypatch.setattr(fast, "_FAILED", set())
    calls, real = [], triton_reference.exact_outputs_triton
    monkeypatch.setattr(triton_reference, "exact_outputs_triton",
                        lambda inp, **kw: calls.append((inp.hidden, kw)) or real(inp, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)      # a fallback to Inductor fails the test
        for shape, dtype, eps in (((24, 4096), torch.bfloat16, 1e-5), ((5, 1024), torch.float32, 1e-6),
                                  ((3, 4100), torch.bfloat16, 1e-5), ((4, 2048), torch.bfloat16, 0.0)):
            inp = make_inputs(shape, dtype, True, gate_scale=4.0, gate_shift=-1.0, eps=eps, seed=3).to("cuda")
            vf, gf = fast.exact_outputs_fused(inp)
            assert ("triton",) + fast._key(inp) not in fast._FAILED
            _agrees_with_eager(inp, vf, gf)
    assert calls == [(4096, {"layout": "regs", "table": True, "evict": "evict_first"}),
                     (1024, {"layout": "regs", "table": False, "evict": "evict_first"})]   # 4100, eps 0: Inductor


def test_the_run_environment_names_the_reference_pass(monkeypatch):
    """A CUDA run records which pass builds its big cases' references (report's environment)."""
    from harness.environment import environment
    from harness.references import fast, triton_reference
    assert "reference_pass" not in environment("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a GPU")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    for backend, has_triton, want in (("triton", True, "Triton for 1024-4096 columns and eps >= 1e-20, else Inductor"),
                                      ("triton", False, "elements: Inductor"), ("inductor", True, "elements: Inductor")):
        monkeypatch.setattr(fast, "FUSED_BACKEND", backend)
        monkeypatch.setattr(triton_reference, "available", lambda: has_triton)
        assert want in environment("cuda")["reference_pass"], (backend, has_triton)
