"""The hand-written Triton reference (references/triton_reference.py) against the eager closed
forms: within float64_error_bound * gauge, NaN where they are NaN. On CUDA it runs the compiled
kernel; on a CPU with Triton installed, Triton's interpreter (TRITON_INTERPRET=1, in a subprocess,
since the variable is read at import); without Triton (the CI machine) it skips. (Triton 3.6's
interpreter needs numpy < 2.3 for the kernel's runtime loop bounds; compiled, any numpy.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.references.exact import exact_outputs, float64_error_bound
from tests.conftest import make_inputs

REPO = Path(__file__).resolve().parents[1]
CASES = [((5, 19), torch.bfloat16, False, 1e-5, 0.0), ((3, 4, 64), torch.float16, True, 1e-6, -3.0),
         ((7, 33), torch.float32, False, 0.0, 2.0), ((2, 130), torch.bfloat16, False, 1e-5, -40.0),
         ((9, 1), torch.bfloat16, True, 0.3, 0.0),
         ((2, 2100), torch.bfloat16, False, 1e-5, 0.5),     # row sums over two 2048-column chunks
         ((40, 130), torch.float16, True, 1e-5, -1.0),      # strips of 8-row steps, 5 of them real
         ((3, 8192), torch.float32, False, 1e-5, 1.0)]      # many column steps


def check_all(device: str) -> None:
    from harness.references.triton_reference import exact_outputs_triton
    runs = [(c, {}) for c in CASES] + \
           [(c, {"rows_per_block": 4, "chunk": 16}) for c in CASES] + \
           [(c, {"rows_per_block": 4, "chunk": 16, "reverse": False}) for c in CASES] + \
           [(c, {"table": True}) for c in CASES if c[1] != torch.float32] + \
           [(c, {"layout": "strips", "table": True}) for c in CASES] + \
           [(c, {"layout": "strips", "rows": 3, "strip": 16}) for c in CASES] + \
           [(c, {"layout": "rows", "programs": 3, "table": True}) for c in CASES] + \
           [(c, {"layout": "stream", "rows_per_block": 4, "chunk": 16, "warps": 1, "table": (True, False)})
            for c in CASES] + \
           [(c, {"layout": "stream", "rows_per_block": 3, "table": (False, True)}) for c in CASES] + \
           [(c, {"layout": "pair", "rows_per_block": 4, "chunk": 16, "warps": 1, "table": True}) for c in CASES] + \
           [(c, {"layout": "pair", "rows_per_block": 2}) for c in CASES] + \
           [(c, {"layout": "rows", "programs": 2, "prefetch": False}) for c in CASES] + \
           [(c, {"layout": "sweep", "rows_per_block": 4, "chunk": 16, "warps": 1, "table": (True, False)})
            for c in CASES] + \
           [(c, {"layout": "sweep", "rows_per_block": 3, "table": (False, True), "evict": "evict_first"})
            for c in CASES] + \
           [(c, {"layout": "rows", "programs": 4, "reconvert": True, "table": True}) for c in CASES
            if device == "cuda"] + \
           [(c, {"layout": "regs", "programs": 3, "table": (True, False)}) for c in CASES] + \
           [(c, {"layout": "regs", "table": True, "evict": "evict_first"}) for c in CASES] + \
           [(c, {"layout": "regs", "programs": 2, "chunk": 16, "warps": 1, "evict": "evict_first"}) for c in CASES
            if c[0][-1] <= 130] + \
           [(c, kw) for c in CASES if device == "cuda"      # inline PTX, Gluon: not in the interpreter
            for kw in ({"layout": "smem", "chunk": 64, "warps": 1, "programs": 3, "table": (True, False)},
                       {"layout": "smem", "table": True, "evict": "evict_first"}, {"layout": "smem"})]
    for (shape, dtype, zc, eps, shift), kw in runs:
        inp = make_inputs(shape, dtype, zc, gate_shift=shift, eps=eps, seed=len(shape)).to(device)
        v, g = exact_outputs(inp)
        # blocks of 4 rows x 16-column steps: many steps, partial blocks and steps; strips of 3 rows
        # x 16 columns: many strips, partial blocks
        vt, gt = exact_outputs_triton(inp, poison=True, **kw)     # an unwritten element stays NaN
        b = float64_error_bound(inp)
        for k in v:
            assert vt[k].shape == v[k].shape and vt[k].dtype == torch.float64, (shape, k)
            assert torch.equal(vt[k].isnan(), v[k].isnan()), (shape, k)
            ok = ~v[k].isnan()
            tol = b[k] * g[k][ok] + 1e-300
            assert torch.all((vt[k][ok] - v[k][ok]).abs() <= tol), (shape, k)
            assert torch.all((gt[k][ok] - g[k][ok]).abs() <= tol), (shape, k)
    # the hybrid's column-sum kernel: dweight and its gauge from each row's rsqrt
    from harness.references.triton_reference import column_sums_triton
    for (shape, dtype, zc, eps, shift) in CASES:
        inp = make_inputs(shape, dtype, zc, gate_shift=shift, eps=eps, seed=len(shape)).to(device)
        v, g = exact_outputs(inp)
        x = inp.x.double().reshape(-1, shape[-1])
        r = torch.rsqrt((x * x).mean(-1) + inp.eps)
        b = float64_error_bound(inp)["dweight"]
        for table, rows in ((True, 8), (False, 3)):      # several strips, a partial last one
            dw, dwg = column_sums_triton(inp, r, table=table, rows=rows, rb=2, bn=16, warps=1)
            ok = ~v["dweight"].isnan()
            assert torch.equal(dw.isnan(), ~ok), shape
            tol = b * g["dweight"][ok] + 1e-300
            assert torch.all((dw[ok] - v["dweight"][ok]).abs() <= tol), shape
            assert torch.all((dwg[ok] - g["dweight"][ok]).abs() <= tol), shape


def check_regs_special(device: str) -> None:
    """The harness's layout ("regs", as references.fast runs it) on non-finite inputs, a zero row,
    more programs than rows; and the underflow that references.fast.TRITON_MIN_EPS keeps out: its
    raw row sums dy silu gam x underflow (gate -700) where the eager form's dxhat * xhat (xhat = x r)
    does not — by far more than the bound at eps 0 (x ~ 1e-20, r ~ 1e20), by less than the tests'
    absolute 1e-300 at eps 1e-20 (x ~ 1e-12: raw terms subnormal, eager's normal)."""
    from harness.references.triton_reference import exact_outputs_triton
    kw = dict(layout="regs", table=True, evict="evict_first", poison=True)

    def gap(inp, **extra):
        """max |triton - eager| / (bound * gauge + 1e-300) over the finite values and gauges of y, dx,
        dgate, dweight; the NaN and infinite ones must be the same."""
        v, g = exact_outputs(inp)
        vt, gt = exact_outputs_triton(inp, **kw, **extra)
        b = float64_error_bound(inp)
        worst = 0.0
        for k in ("y", "dx", "dgate", "dweight"):
            for got, want in ((vt[k], v[k]), (gt[k], g[k])):
                assert torch.equal(got.isnan(), want.isnan()), k
                inf = torch.isinf(want)
                assert torch.equal(got[inf], want[inf]) and not torch.isinf(got[~inf]).any(), k
                fin = torch.isfinite(want)
                ratio = (got[fin] - want[fin]).abs() / (b[k] * g[k][fin] + 1e-300)    # an inf gauge: 0
                assert not ratio.isnan().any(), k
                worst = max([worst] + ([float(ratio.max())] if ratio.numel() else []))
        return worst
    inp = make_inputs((6, 96), torch.bfloat16, True, seed=4).to(device)
    inp.gate[1, 5], inp.gate[2, 6], inp.dy[3, 7] = float("inf"), -float("inf"), float("inf")
    inp.x[4] = 0.0
    assert gap(inp) <= 1 and gap(inp, programs=64) <= 1
    nan_x = make_inputs((4, 96), torch.bfloat16, seed=6).to(device)
    nan_x.x[0, 3] = float("nan")                    # row 0 and every dweight NaN, as eager's
    assert gap(nan_x) <= 1
    zero_eps = make_inputs((3, 64), torch.bfloat16, eps=0.0, seed=5).to(device)
    zero_eps.x[1] = 0.0                              # r = inf: the row's outputs NaN, as eager's
    assert gap(zero_eps) <= 1
    for eps, scale, within in ((0.0, 1e-20, False), (1e-20, 1e-12, True)):
        inp = make_inputs((3, 1024), torch.bfloat16, eps=eps, seed=1).to(device)
        inp.x[1] = (torch.tensor([1.0, -1.0, -2.0, 3.0] * 256, dtype=torch.float64) * scale).to(inp.x.dtype)
        inp.gate[1], inp.dy[1] = -700.0, 1.0
        x, t = inp.x[1].double(), inp.gate[1].double()
        raw = t * torch.sigmoid(t) * inp.weight.double() * x                    # dy silu gam x
        xhat = x * torch.rsqrt((x * x).mean() + eps)
        assert raw.abs().max() < 2.0 ** -1022 <= (t * torch.sigmoid(t) * inp.weight.double() * xhat).abs().min()
        assert (gap(inp) <= 1) == within, eps


def test_triton_reference_matches_exact_outputs():
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        check_all("cuda")
        check_regs_special("cuda")
        return
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(REPO)] + sys.path))
    code = ("from tests.test_triton_reference import check_all, check_regs_special; check_all('cpu'); "
            "check_regs_special('cpu'); print('OK')")
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout[-2000:] + p.stderr[-4000:]


def test_triton_reference_layout_must_be_one_of_the_layouts():
    pytest.importorskip("triton")
    from harness.references.triton_reference import exact_outputs_triton
    with pytest.raises(ValueError, match="layout 'tiles'"):
        exact_outputs_triton(make_inputs((2, 8), torch.bfloat16), layout="tiles")


@pytest.mark.parametrize("kw, match", [({"layout": "rows", "table": (True, False)}, "a pair only for the stream"),
                                       ({"layout": "pair", "table": (True, True)}, "a pair only for the stream, sweep, smem and regs"),
                                       ({"layout": "blocks", "evict": "evict_first"}, "eviction policy"),
                                       ({"layout": "strips", "partials": False}, "leave dweight out"),
                                       ({"layout": "sweep", "row_major": True}, "row_major")])
def test_triton_reference_refuses_options_its_layout_ignores(kw, match):
    pytest.importorskip("triton")
    from harness.references.triton_reference import exact_outputs_triton
    with pytest.raises(ValueError, match=match):
        exact_outputs_triton(make_inputs((2, 8), torch.bfloat16), **kw)


def test_triton_reference_regs_refuses_more_column_steps_than_it_unrolls():
    pytest.importorskip("triton")
    from harness.references.triton_reference import exact_outputs_triton
    with pytest.raises(ValueError, match="at most 16 column steps, got hidden 300 / chunk 16"):
        exact_outputs_triton(make_inputs((2, 300), torch.bfloat16), layout="regs", chunk=16)


def test_column_sums_triton_refuses_a_wrong_rsqrt():
    pytest.importorskip("triton")
    from harness.references.triton_reference import column_sums_triton
    inp = make_inputs((3, 8), torch.bfloat16)
    for r in (torch.ones(3, dtype=torch.float32), torch.ones(4, dtype=torch.float64)):
        with pytest.raises(ValueError, match="one float64 rsqrt a row"):
            column_sums_triton(inp, r)

