"""The exact (float64) reference as one hand-written Triton pass: experimental, opt-in.

Why: the Inductor version (references/fast.py) emits the per-row work as a looped reduction that
reads the inputs more than once, plus a separate kernel for the dweight column sums, and reaches
~35 % of the memory-bandwidth floor on an H200 (bench/RESULTS.md, run 7). Here one program takes
ROWS whole rows (the row lives in registers): it reads x, gate, dy once, writes the values of y,
dx, dgate and the gauges of dx, dgate once (float64), and keeps its rows' dweight and gauge partial
sums in registers; a (programs x H) float64 partial array is then summed in a fixed order
(deterministic, no atomics).

The closed forms are references.exact's, with fast.py's shared exp for sigmoid(t) and sigmoid(-t),
so the values agree with the eager ones within float64_error_bound * gauge (tests check it, in
Triton's interpreter on the CPU and on CUDA). eps travels as a float64 tensor: a Python float
argument would be a float32 scalar in Triton.

Status: correctness tested; speed not yet measured on the GPU — `exact_outputs_triton` is used
only by bench/bench_reference.py --triton, not by the harness."""
from __future__ import annotations

import torch

from references.exact import Inputs, completed_on_use

try:
    import triton
    import triton.language as tl
except ImportError:                    # the CPU CI has no Triton: nothing here is used there
    triton = None


def available() -> bool:
    return triton is not None


if triton is not None:
    @triton.jit
    def _golden_rows(x_ptr, g_ptr, dy_ptr, w_ptr, eps_ptr,
                     y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                     T, H, ZC: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr):
        pid = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        cm = cols < H
        w = tl.load(w_ptr + cols, mask=cm, other=0).to(tl.float64)
        gam = w + 1.0 if ZC else w
        gam_abs = tl.abs(gam)
        eps = tl.load(eps_ptr)
        dw = tl.zeros([BLOCK], dtype=tl.float64)
        dwg = tl.zeros([BLOCK], dtype=tl.float64)
        for i in range(ROWS):
            row = pid * ROWS + i
            m = cm & (row < T)
            off = row.to(tl.int64) * H + cols
            x = tl.load(x_ptr + off, mask=m, other=0).to(tl.float64)
            t = tl.load(g_ptr + off, mask=m, other=0).to(tl.float64)
            dy = tl.load(dy_ptr + off, mask=m, other=0).to(tl.float64)
            r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)     # fp64 sqrt: sqrt.rn.f64 in PTX
            xhat = x * r
            e = tl.exp(-tl.abs(t))
            d = 1.0 / (1.0 + e)
            ed = e * d
            pos = t >= 0
            s = tl.where(pos, d, ed)
            oms = tl.where(pos, ed, d)
            silu = t * s
            n = xhat * gam
            dn = dy * silu
            dxhat = dn * gam
            c = tl.sum(dxhat * xhat, axis=0) / H
            dx = r * (dxhat - xhat * c)
            a = tl.abs(dn) * gam_abs
            xa = tl.abs(xhat)
            dx_g = r * (a + xa * (tl.sum(a * xa, axis=0) / H))
            dyn = dy * n
            tl.store(y_ptr + off, n * silu, mask=m)
            tl.store(dgate_ptr + off, dyn * (s * (1.0 + t * oms)), mask=m)
            tl.store(dgate_g_ptr + off, tl.abs(dyn) * (s * (1.0 + tl.abs(t) * oms)), mask=m)
            tl.store(dx_ptr + off, dx, mask=m)
            tl.store(dx_g_ptr + off, dx_g, mask=m)
            # rows past T: r may be inf (eps = 0), so mask their contributions explicitly
            dw += tl.where(m, dn * xhat, 0.0)
            dwg += tl.where(m, tl.abs(dn) * xa, 0.0)
        tl.store(dw_part_ptr + pid * H + cols, dw, mask=cm)
        tl.store(dwg_part_ptr + pid * H + cols, dwg, mask=cm)


def _launch_shape(tokens: int, hidden: int, device: torch.device) -> tuple[int, int, int, int]:
    """(BLOCK, ROWS, programs, num_warps): a few programs per SM, each over whole rows."""
    block = triton.next_power_of_2(max(hidden, 1))
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    rows = max(1, -(-tokens // (4 * sms)))
    progs = -(-tokens // rows)
    warps = min(32, max(4, block // 256))     # ~8 float64 elements a thread per live array (registers)
    return block, rows, progs, warps


def exact_outputs_triton(inp: Inputs) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Values of y, dx, dgate, dweight and gauges of dx, dgate, dweight in one Triton pass (plus the
    dweight partial sums); n, dn and the |value| gauges on first use, as exact_outputs_fused."""
    if triton is None:
        raise RuntimeError("references.triton_reference: Triton is not installed")
    shape, hidden = inp.x.shape, inp.hidden
    x, g, dy = (t.contiguous().reshape(-1, hidden) for t in (inp.x, inp.gate, inp.dy))
    tokens = x.shape[0]
    dev = x.device
    block, rows, progs, warps = _launch_shape(tokens, hidden, dev)
    f64 = dict(dtype=torch.float64, device=dev)
    y, dgate, dx, dgate_g, dx_g = (torch.empty((tokens, hidden), **f64) for _ in range(5))
    dw_part, dwg_part = torch.empty((progs, hidden), **f64), torch.empty((progs, hidden), **f64)
    eps = torch.tensor([inp.eps], **f64)
    _golden_rows[(progs,)](x, g, dy, inp.weight.contiguous(), eps, y, dgate, dx, dgate_g, dx_g, dw_part, dwg_part,
                           tokens, hidden, ZC=bool(inp.zero_centered_gamma), BLOCK=block, ROWS=rows,
                           num_warps=warps)
    return completed_on_use(inp, {"y": y.reshape(shape), "dgate": dgate.reshape(shape), "dx": dx.reshape(shape),
                                  "dweight": dw_part.sum(0)},
                            {"dgate": dgate_g.reshape(shape), "dx": dx_g.reshape(shape), "dweight": dwg_part.sum(0)})
