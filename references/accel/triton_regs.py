"""The float64 reference in one hand-written Triton kernel ("regs"), for big norm-first cases on CUDA.

Persistent programs of 16 warps take one row at a time in CH-column steps: the row's three sums
(sum x^2, sum u and sum |u| with u = dy silu(t) gam x, which give rstd r, the dx projection c =
r mean u and its gauge's q = r mean |u|) in one reduction, then its outputs — the inputs read again
from L1/L2 — each thread adding the dweight terms of the columns it owns into registers (a tuple of
one accumulator a column step, the steps unrolled), one partial row a program, summed at the end in
a fixed order (deterministic on one GPU model). A 16-bit gate's sigmoids come from a 65536-entry
float64 table (`sigmoid_table`), an fp32 gate's from one shared exp. docs/performance.md has what
else was tried and why this won.

The formulas are references.closed_forms' (norm first, one group); tests compare the kernel with
references.exact within float64_error_bound * gauge, in Triton's interpreter on the CPU and on CUDA.
Where it applies (`fits`): the silu gate only (its sums and outputs are silu's closed forms written
out; a sigmoid gate's big cases go to Inductor's graph of the closed forms, references.accel), rows
of MIN_HIDDEN..MAX_HIDDEN columns (the per-thread accumulators grow
with the row: at 4096 columns, 127 registers and no spills for sm_90a with the table) and
eps >= MIN_EPS: the raw products dy silu gam x of the row sums may underflow where the eager form's
dxhat * xhat does not; at eps >= 1e-20 the effect on dx and its gauge is at most about
eps^-1 sqrt(hidden) 2^-1074 (~3e-302 at 4096 columns), far under any output's smallest subnormal."""
from __future__ import annotations

import functools

import torch

from harness.references.exact import Inputs

try:
    import triton
    import triton.language as tl
except ImportError:                    # the CPU CI has no Triton: nothing here is used there
    triton = None

MIN_HIDDEN, MAX_HIDDEN = 1024, 4096
MIN_EPS = 1e-20


def available() -> bool:
    return triton is not None


def fits(inp: Inputs) -> bool:
    return (available() and inp.x.is_cuda and inp.norm_before_gate and inp.group == inp.hidden
            and inp.activation == "silu" and MIN_HIDDEN <= inp.hidden <= MAX_HIDDEN and inp.eps >= MIN_EPS)


_TABLES: dict = {}


def sigmoid_table(dtype: torch.dtype, device) -> torch.Tensor:
    """sigmoid(t) and sigmoid(-t) in float64 for every bit pattern of a 16-bit gate dtype, as a
    (65536, 2) table indexed by the gate's bits: a 1 MiB table read from L2 is cheaper than the
    float64 exp and division per element."""
    key = (dtype, str(device))
    tab = _TABLES.get(key)
    if tab is None:
        u = torch.arange(1 << 16, dtype=torch.int32, device=device)
        t = torch.where(u >= 1 << 15, u - (1 << 16), u).to(torch.int16).view(dtype).to(torch.float64)
        tab = _TABLES[key] = torch.stack([torch.sigmoid(t), torch.sigmoid(-t)], dim=1).contiguous()
    return tab


if triton is not None:
    @triton.jit
    def _silu_parts(graw, t, tab_ptr, m, TAB: tl.constexpr):
        """sigmoid(t) and sigmoid(-t): from the table by a 16-bit gate's bits, else one shared exp."""
        if TAB:
            i = (graw.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF) * 2
            return tl.load(tab_ptr + i, mask=m, other=0.0), tl.load(tab_ptr + i + 1, mask=m, other=0.0)
        else:
            e = tl.exp(-tl.abs(t))
            d = 1.0 / (1.0 + e)
            ed = e * d
            pos = t >= 0
            return tl.where(pos, d, ed), tl.where(pos, ed, d)

    @triton.jit
    def _load_inputs(x_ptr, g_ptr, dy_ptr, off, m, EV: tl.constexpr):
        x = tl.load(x_ptr + off, mask=m, other=0, eviction_policy=EV).to(tl.float64)
        graw = tl.load(g_ptr + off, mask=m, other=0, eviction_policy=EV)
        dy = tl.load(dy_ptr + off, mask=m, other=0, eviction_policy=EV).to(tl.float64)
        return x, graw, graw.to(tl.float64), dy

    @triton.jit
    def _load_gamma(w_ptr, cols, cm, ZC: tl.constexpr):
        w = tl.load(w_ptr + cols, mask=cm, other=0).to(tl.float64)
        return w + 1.0 if ZC else w

    @triton.jit
    def _row_sum_accs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, base, H, CH: tl.constexpr, ZC: tl.constexpr,
                      TAB: tl.constexpr):
        """One row's terms of x^2, u = dy silu(t) gam x and |u|, added up over its column steps."""
        acc_xx = tl.zeros([CH], dtype=tl.float64)
        acc_u = tl.zeros([CH], dtype=tl.float64)
        acc_ua = tl.zeros([CH], dtype=tl.float64)
        for j in range(0, H, CH):
            cols = j + tl.arange(0, CH)
            cm = cols < H
            x, graw, t, dy = _load_inputs(x_ptr, g_ptr, dy_ptr, base + cols, cm, "evict_last")
            gam = _load_gamma(w_ptr, cols, cm, ZC)
            s, _ = _silu_parts(graw, t, tab_ptr, cm, TAB)
            u = dy * (t * s) * gam * x
            acc_xx += x * x
            acc_u += u
            acc_ua += tl.abs(u)
        return acc_xx, acc_u, acc_ua

    @triton.jit
    def _step_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr,
                      base, cols, H, r, c, q, ZC: tl.constexpr, TAB: tl.constexpr):
        """One column step of a row's outputs (its r, c, q known); returns its dweight terms and
        their gauge terms (0 past the row's end)."""
        m = cols < H
        off = base + cols
        x, graw, t, dy = _load_inputs(x_ptr, g_ptr, dy_ptr, off, m, "evict_first")
        gam = _load_gamma(w_ptr, cols, m, ZC)
        s, oms = _silu_parts(graw, t, tab_ptr, m, TAB)
        xhat = x * r
        n = xhat * gam
        dn = dy * (t * s)
        xa = tl.abs(xhat)
        dyn = dy * n
        tl.store(y_ptr + off, n * (t * s), mask=m, eviction_policy="evict_first")
        tl.store(dgate_ptr + off, dyn * (s * (1.0 + t * oms)), mask=m, eviction_policy="evict_first")
        tl.store(dgate_g_ptr + off, tl.abs(dyn) * (s * (1.0 + tl.abs(t) * oms)), mask=m,
                 eviction_policy="evict_first")
        tl.store(dx_ptr + off, r * (dn * gam - xhat * c), mask=m, eviction_policy="evict_first")
        tl.store(dx_g_ptr + off, r * (tl.abs(dn) * tl.abs(gam) + xa * q), mask=m, eviction_policy="evict_first")
        return tl.where(m, dn * xhat, 0.0), tl.where(m, tl.abs(dn) * xa, 0.0)

    @triton.jit
    def _add3(a0, a1, a2, b0, b1, b2):
        return a0 + b0, a1 + b1, a2 + b2

    @triton.jit
    def _set(tup, j: tl.constexpr, v):
        """tup with its element j replaced by v (tuples are immutable in Triton)."""
        return tup[:j] + (v,) + tup[j + 1:]

    @triton.jit
    def _rows_regs(x_ptr, g_ptr, dy_ptr, w_ptr, eps_ptr, tab_ptr,
                   y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                   T, H: tl.constexpr, ZC: tl.constexpr, CH: tl.constexpr, TAB: tl.constexpr, PS: tl.constexpr):
        NT: tl.constexpr = (H + CH - 1) // CH
        pid = tl.program_id(0)
        eps = tl.load(eps_ptr)
        dws = (tl.zeros([CH], dtype=tl.float64),) * NT
        dwgs = (tl.zeros([CH], dtype=tl.float64),) * NT
        step = tl.num_programs(0)
        for i in range(0, tl.cdiv(T - pid, step)):       # rows pid, pid + step, ... (a grid of <= T)
            base = (pid + i * step).to(tl.int64) * H
            acc_xx, acc_u, acc_ua = _row_sum_accs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, base, H, CH, ZC, TAB)
            sxx, su, sua = tl.reduce((acc_xx, acc_u, acc_ua), 0, _add3)     # one pass over shared memory
            r = 1.0 / tl.sqrt(sxx / H + eps)     # fp64 sqrt: sqrt.rn.f64
            c = r * (su / H)
            q = r * (sua / H)
            for k in tl.static_range(NT):
                dw_t, dwg_t = _step_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, y_ptr, dgate_ptr, dx_ptr,
                                            dgate_g_ptr, dx_g_ptr, base, k * CH + tl.arange(0, CH), H,
                                            r, c, q, ZC, TAB)
                dws = _set(dws, k, dws[k] + dw_t)
                dwgs = _set(dwgs, k, dwgs[k] + dwg_t)
        part = pid.to(tl.int64) * PS     # dw and dwg partial rows interleaved: one buffer, one sum
        for k in tl.static_range(NT):
            cols = k * CH + tl.arange(0, CH)
            tl.store(dw_part_ptr + part + cols, dws[k], mask=cols < H)
            tl.store(dwg_part_ptr + part + cols, dwgs[k], mask=cols < H)


def _sm_count(device) -> int:
    """Streaming multiprocessors (one persistent program each); 4 in Triton's interpreter."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


_CONSTANTS: dict = {}


def _eps_tensor(value: float, dev) -> torch.Tensor:
    """eps as a float64 device tensor, made once (a Python float would be a float32 scalar in Triton,
    and a fill per call would launch a kernel); the first fill is waited for."""
    key = (float(value).hex(), str(dev))
    if key not in _CONSTANTS:
        c = torch.full((1,), value, dtype=torch.float64, device=dev)
        if c.is_cuda:
            torch.cuda.synchronize(c.device)
        _CONSTANTS[key] = c
    return _CONSTANTS[key]


def _on_the_inputs_device(fn):
    """Launch on the inputs' GPU: Triton launches on the current device, which may be another."""
    @functools.wraps(fn)
    def on_device(inp: Inputs, *args, **kwargs):
        if not inp.x.is_cuda:
            return fn(inp, *args, **kwargs)
        with torch.cuda.device(inp.x.device):
            return fn(inp, *args, **kwargs)
    return on_device


@_on_the_inputs_device
def exact_outputs(inp: Inputs, poison: bool = False) -> tuple[dict, dict]:
    """Values of y, dx, dgate, dweight and gauges of dx, dgate, dweight (as references.exact; y's gauge,
    |y|, is its caller's to take: not part of the pass the bandwidth floor measures).
    poison: outputs start as NaN, so an element the kernel fails to write shows (tests)."""
    if triton is None:
        raise RuntimeError("references.accel.triton_regs: Triton is not installed")
    shape, hidden = inp.x.shape, inp.hidden
    x, g, dy = (t.contiguous().reshape(-1, hidden) for t in (inp.x, inp.gate, inp.dy))
    tokens, dev = x.shape[0], x.device
    f64 = dict(dtype=torch.float64, device=dev)
    alloc = (lambda *size: torch.full(size, float("nan"), **f64)) if poison else \
        (lambda *size: torch.empty(size, **f64))
    use_tab = g.dtype in (torch.bfloat16, torch.float16)
    tab = sigmoid_table(g.dtype, dev) if use_tab else _eps_tensor(0.0, dev)       # unread without the table
    ch = max(32, min(triton.next_power_of_2(max(hidden, 1)), 1024))
    if -(-hidden // ch) > 16:          # one register accumulator a step, the steps unrolled
        raise ValueError(f"regs: at most 16 column steps, got hidden {hidden} / chunk {ch}")
    y, dgate, dx, dgate_g, dx_g = (alloc(tokens, hidden) for _ in range(5))
    nprog = max(1, min(_sm_count(dev), tokens))
    parts = alloc(nprog, 2, hidden)
    _rows_regs[(nprog,)](x, g, dy, inp.weight.contiguous(), _eps_tensor(float(inp.eps), dev), tab,
                         y, dgate, dx, dgate_g, dx_g, parts[:, 0], parts[:, 1], tokens, hidden,
                         ZC=bool(inp.zero_centered_gamma), CH=ch, TAB=use_tab, PS=2 * hidden,
                         num_warps=max(1, min(16, ch // 64)))
    dw, dwg = parts.sum(0)
    y = y.reshape(shape)
    return ({"y": y, "dgate": dgate.reshape(shape), "dx": dx.reshape(shape), "dweight": dw},
            {"dgate": dgate_g.reshape(shape), "dx": dx_g.reshape(shape), "dweight": dwg})
