"""The exact (float64) reference as one hand-written Triton pass: experimental, opt-in.

Why: the Inductor version (references/fast.py) emits the per-row work as a looped reduction that
reads the inputs more than once, plus a separate kernel for the dweight column sums, and reaches
~35 % of the memory-bandwidth floor on an H200 (bench/RESULTS.md, run 7). Here each program takes
ROWS whole rows, one after the other, in column chunks: a first pass over the row forms its three
sums (of x^2, of u = dy silu gam x and of |u|: the rsqrt, the dx projection and its gauge), a
second pass over the same row — still in cache — writes the values of y, dx, dgate and the gauges
of dx, dgate once (float64) and adds the row's dweight terms to the program's own partial row.
So x, gate, dy are read from memory once, and the (programs x H) float64 partials, summed in a
fixed order at the end (deterministic, no atomics), stay small enough for L2.

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
    def _silu_parts(t):
        """sigmoid(t) and sigmoid(-t) from one exp (as references/fast.py)."""
        e = tl.exp(-tl.abs(t))
        d = 1.0 / (1.0 + e)
        ed = e * d
        pos = t >= 0
        return tl.where(pos, d, ed), tl.where(pos, ed, d)

    @triton.jit
    def _golden_rows(x_ptr, g_ptr, dy_ptr, w_ptr, eps_ptr,
                     y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                     T, H, ROWS, ZC: tl.constexpr, CHUNK: tl.constexpr):
        pid = tl.program_id(0)
        eps = tl.load(eps_ptr)
        part = pid.to(tl.int64) * H
        for j in range(0, H, CHUNK):                      # this program's dweight partial sums
            cols = j + tl.arange(0, CHUNK)
            zero = tl.zeros([CHUNK], dtype=tl.float64)
            tl.store(dw_part_ptr + part + cols, zero, mask=cols < H)
            tl.store(dwg_part_ptr + part + cols, zero, mask=cols < H)
        for i in range(ROWS):
            row = pid * ROWS + i
            live = row < T                                  # the last program may have fewer rows
            base = row.to(tl.int64) * H
            # pass 1: the row sums. With xhat = x r, dn = dy silu, a = |dn| |gam|:
            #   sum(dn gam xhat) = r sum(u), sum(a |xhat|) = r sum(|u|), u = dy silu gam x
            acc_xx = tl.zeros([CHUNK], dtype=tl.float64)
            acc_u = tl.zeros([CHUNK], dtype=tl.float64)
            acc_ua = tl.zeros([CHUNK], dtype=tl.float64)
            for j in range(0, H, CHUNK):
                cols = j + tl.arange(0, CHUNK)
                cm = (cols < H) & live
                x = tl.load(x_ptr + base + cols, mask=cm, other=0).to(tl.float64)
                t = tl.load(g_ptr + base + cols, mask=cm, other=0).to(tl.float64)
                dy = tl.load(dy_ptr + base + cols, mask=cm, other=0).to(tl.float64)
                w = tl.load(w_ptr + cols, mask=cm, other=0).to(tl.float64)
                gam = w + 1.0 if ZC else w
                s, oms = _silu_parts(t)
                u = dy * (t * s) * gam * x
                acc_xx += x * x
                acc_u += u
                acc_ua += tl.abs(u)
            r = 1.0 / tl.sqrt(tl.sum(acc_xx, axis=0) / H + eps)     # fp64 sqrt: sqrt.rn.f64 in PTX
            c = r * (tl.sum(acc_u, axis=0) / H)
            q = r * (tl.sum(acc_ua, axis=0) / H)
            # pass 2: the row again (from cache: it was just read), every output written once
            for j in range(0, H, CHUNK):
                cols = j + tl.arange(0, CHUNK)
                cm = (cols < H) & live
                x = tl.load(x_ptr + base + cols, mask=cm, other=0).to(tl.float64)
                t = tl.load(g_ptr + base + cols, mask=cm, other=0).to(tl.float64)
                dy = tl.load(dy_ptr + base + cols, mask=cm, other=0).to(tl.float64)
                w = tl.load(w_ptr + cols, mask=cm, other=0).to(tl.float64)
                gam = w + 1.0 if ZC else w
                s, oms = _silu_parts(t)
                xhat = x * r
                n = xhat * gam
                dn = dy * (t * s)
                xa = tl.abs(xhat)
                dyn = dy * n
                tl.store(y_ptr + base + cols, n * (t * s), mask=cm)
                tl.store(dgate_ptr + base + cols, dyn * (s * (1.0 + t * oms)), mask=cm)
                tl.store(dgate_g_ptr + base + cols, tl.abs(dyn) * (s * (1.0 + tl.abs(t) * oms)), mask=cm)
                tl.store(dx_ptr + base + cols, r * (dn * gam - xhat * c), mask=cm)
                tl.store(dx_g_ptr + base + cols, r * (tl.abs(dn) * tl.abs(gam) + xa * q), mask=cm)
                # the same thread reads back what it wrote for these columns: no barrier needed
                dw = tl.load(dw_part_ptr + part + cols, mask=cm, other=0)
                tl.store(dw_part_ptr + part + cols, dw + dn * xhat, mask=cm)
                dwg = tl.load(dwg_part_ptr + part + cols, mask=cm, other=0)
                tl.store(dwg_part_ptr + part + cols, dwg + tl.abs(dn) * xa, mask=cm)


def launch_shape(tokens: int, hidden: int, device: torch.device, chunk: int | None = None,
                 warps: int | None = None) -> tuple[int, int, int, int]:
    """(CHUNK, ROWS, programs, num_warps): two programs per SM, each over whole rows in column
    chunks (8 float64 elements a thread per live array: no register spills), so the partial
    dweight rows (programs x hidden float64) stay small and in L2."""
    chunk = chunk or min(triton.next_power_of_2(max(hidden, 1)), 1024)
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2
    progs = max(1, min(tokens, 2 * sms))
    rows = -(-tokens // progs)
    progs = -(-tokens // rows)
    return chunk, rows, progs, warps or max(1, min(8, chunk // 256))


def exact_outputs_triton(inp: Inputs, chunk: int | None = None,
                         warps: int | None = None) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Values of y, dx, dgate, dweight and gauges of dx, dgate, dweight in one Triton pass (plus the
    dweight partial sums); n, dn and the |value| gauges on first use, as exact_outputs_fused."""
    if triton is None:
        raise RuntimeError("references.triton_reference: Triton is not installed")
    shape, hidden = inp.x.shape, inp.hidden
    x, g, dy = (t.contiguous().reshape(-1, hidden) for t in (inp.x, inp.gate, inp.dy))
    tokens = x.shape[0]
    dev = x.device
    chunk, rows, progs, warps = launch_shape(tokens, hidden, dev, chunk, warps)
    f64 = dict(dtype=torch.float64, device=dev)
    y, dgate, dx, dgate_g, dx_g = (torch.empty((tokens, hidden), **f64) for _ in range(5))
    dw_part, dwg_part = torch.empty((progs, hidden), **f64), torch.empty((progs, hidden), **f64)
    eps = torch.tensor([inp.eps], **f64)
    _golden_rows[(progs,)](x, g, dy, inp.weight.contiguous(), eps, y, dgate, dx, dgate_g, dx_g, dw_part, dwg_part,
                           tokens, hidden, rows, ZC=bool(inp.zero_centered_gamma), CHUNK=chunk, num_warps=warps)
    return completed_on_use(inp, {"y": y.reshape(shape), "dgate": dgate.reshape(shape), "dx": dx.reshape(shape),
                                  "dweight": dw_part.sum(0)},
                            {"dgate": dgate_g.reshape(shape), "dx": dx_g.reshape(shape), "dweight": dwg_part.sum(0)})
