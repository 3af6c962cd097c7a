"""The exact (float64) reference in hand-written Triton kernels. The "regs" layout is the harness's
pass on CUDA where it fits (references.fast.exact_outputs_fused, FUSED_BACKEND, triton_pass_fits:
rows of 1024-4096 columns, eps >= 1e-20); the others are kept for bench/bench_reference.py --triton, as the record of what
was tried.

Layouts of `exact_outputs_triton` (each writes the values of y, dx, dgate and the gauges of dx,
dgate in float64, and sums dweight into partial rows added up in a fixed order — deterministic, no
atomics; for "regs" and "rows" the order follows the number of programs, by default the GPU's SM
count, so the last bits of dweight are the same from run to run on one GPU model, not across models):
* "regs": persistent programs of 16 warps, one row at a time in CH-column steps: its three sums
  (one reduction), then its outputs (the inputs again, from L1/L2), each thread adding the dweight
  terms of the columns it owns into registers (a tuple of one accumulator a step, the steps
  unrolled); one partial row a program;
* "blocks": RB whole rows a program, CH columns a step, two passes (the row sums of x^2, of
  u = dy silu gam x and of |u|, which give the rsqrt, the dx projection and its gauge; then the
  outputs), the dweight terms summed over the block's rows into one partial row a block;
* "strips": a row-sums kernel, then column strips of 256 rows summing dweight down the strip;
* "rows": persistent programs holding a whole row (only its raw 16-bit inputs kept over the sums,
  the next row's prefetched, dweight accumulated in registers);
* "stream": RB rows a program one at a time in 1-D tiles, dweight added into the program's
  partial row by the thread owning each element;
* "pair": Inductor's own way of writing the row kernel (two loops, [XB, RBLK] tiles), as a
  check that hand-written code is not what is slow;
* "sweep": RB rows a program, their sums row by row, then their outputs column step by column
  step down the rows (dweight in registers for one step; the inputs re-read RB rows later);
* "smem" (Gluon): stream's order in persistent programs, the partial row in shared memory.
`column_sums_triton` is dweight alone, from each row's rsqrt (with Inductor's row graph without
its column sums, fast._compiled_outputs(columns=False): the "hybrid" of the bench).

On the H200, 8192x4096 bf16 (bench/RESULTS.md, runs 10-12; floor 0.25 ms; kernel times from
torch.profiler where taken, else wall): regs 0.46-0.48 ms of kernels (0.47-0.50 wall); Inductor's
pass 0.61-0.62 (0.63-0.66 wall); the hybrid 0.59-0.60; sweep 0.57-0.66; stream 0.64-1.06, rows 0.69-1.95, smem
0.71-0.98, pair with dweight 0.94-2.65; blocks 0.94-2.55 and strips 0.90-1.01 (wall, run 10).
What the runs showed: without dweight the five float64 outputs take ~0.43 ms written in stream's
order (each row's second read from L1), more the further back the re-read (sweep); dweight costs
little only where each thread sums its own columns in registers — through memory (stream's
partial rows, sweep's per-block partials), shared memory behind barriers (smem) or cross-warp
tile sums (pair, blocks) it costs 0.05-2 ms.

The closed forms are references.exact's, with fast.py's sigmoid table of a 16-bit gate (or its
shared exp for sigmoid(t) and sigmoid(-t)), so the values agree with the eager ones within
float64_error_bound * gauge (tests check it, in Triton's interpreter on the CPU and on CUDA). eps
travels as a float64 tensor (or a float64 constant): a Python float argument would be a float32
scalar in Triton."""
from __future__ import annotations

import functools

import torch

from harness.references.exact import Inputs, completed_on_use
from harness.references.fast import has_sigmoid_table, sigmoid_table

try:
    import triton
    import triton.language as tl
except ImportError:                    # the CPU CI has no Triton: nothing here is used there
    triton = None


try:                                   # Gluon (explicit layouts and shared memory): Triton >= 3.5
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
except Exception:
    gluon = None


def available() -> bool:
    return triton is not None


if triton is not None:
    @triton.jit
    def _silu_parts(graw, t, tab_ptr, m, TAB: tl.constexpr):
        """sigmoid(t) and sigmoid(-t) of the gate (graw as loaded, t in float64): with TAB, looked up
        in references.fast.sigmoid_table by the 16-bit gate's bits; else from one exp (as fast.py)."""
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
        """x and dy in float64, the gate as loaded (its bits index the table) and in float64; EV:
        the loads' eviction policy ("" for the default)."""
        x = tl.load(x_ptr + off, mask=m, other=0, eviction_policy=EV).to(tl.float64)
        graw = tl.load(g_ptr + off, mask=m, other=0, eviction_policy=EV)
        dy = tl.load(dy_ptr + off, mask=m, other=0, eviction_policy=EV).to(tl.float64)
        return x, graw, graw.to(tl.float64), dy

    @triton.jit
    def _load_gamma(w_ptr, cols, cm, ZC: tl.constexpr):
        """The norm's scale in float64: the weight, or 1 + weight for a zero-centred one."""
        w = tl.load(w_ptr + cols, mask=cm, other=0).to(tl.float64)
        return w + 1.0 if ZC else w

    @triton.jit
    def _row_sum_terms(x, t, dy, gam, s):
        """The terms of a row's three sums: x^2, u = dy silu(t) gam x and |u|."""
        u = dy * (t * s) * gam * x
        return x * x, u, tl.abs(u)

    @triton.jit
    def _row_sum_accs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, base, live, H, CH: tl.constexpr, ZC: tl.constexpr,
                      TAB: tl.constexpr, EV: tl.constexpr):
        """One row's terms of its three sums (_row_sum_terms) added up over its CH-column steps, as
        three [CH] vectors (each caller reduces them its own way); the loads' eviction policy EV;
        live False: a row past the end, nothing loaded. Used by the row-sums, stream, sweep and regs
        kernels (compiled offline for sm_90a: the same SASS as their own loops had,
        bench/gpu/run12/offline-refactor-sass.txt)."""
        acc_xx = tl.zeros([CH], dtype=tl.float64)
        acc_u = tl.zeros([CH], dtype=tl.float64)
        acc_ua = tl.zeros([CH], dtype=tl.float64)
        for j in range(0, H, CH):
            cols = j + tl.arange(0, CH)
            cm = cols < H
            m = cm & live
            x, graw, t, dy = _load_inputs(x_ptr, g_ptr, dy_ptr, base + cols, m, EV)
            gam = _load_gamma(w_ptr, cols, cm, ZC)
            s, _ = _silu_parts(graw, t, tab_ptr, m, TAB)
            xx, u, ua = _row_sum_terms(x, t, dy, gam, s)
            acc_xx += xx
            acc_u += u
            acc_ua += ua
        return acc_xx, acc_u, acc_ua

    @triton.jit
    def _write_outputs(y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, off, m, x, t, dy, gam, s, oms, r, c, q,
                       EV: tl.constexpr):
        """Write y, dgate, dx and the gauges of dgate, dx where m holds; return the dweight terms
        and their gauge terms, 0 where m does not (rows past T: r may be inf there, eps = 0)."""
        xhat = x * r
        n = xhat * gam
        dn = dy * (t * s)
        xa = tl.abs(xhat)
        dyn = dy * n
        tl.store(y_ptr + off, n * (t * s), mask=m, eviction_policy=EV)
        tl.store(dgate_ptr + off, dyn * (s * (1.0 + t * oms)), mask=m, eviction_policy=EV)
        tl.store(dgate_g_ptr + off, tl.abs(dyn) * (s * (1.0 + tl.abs(t) * oms)), mask=m, eviction_policy=EV)
        tl.store(dx_ptr + off, r * (dn * gam - xhat * c), mask=m, eviction_policy=EV)
        tl.store(dx_g_ptr + off, r * (tl.abs(dn) * tl.abs(gam) + xa * q), mask=m, eviction_policy=EV)
        return tl.where(m, dn * xhat, 0.0), tl.where(m, tl.abs(dn) * xa, 0.0)

    @triton.jit
    def _step_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr,
                      base, cols, live, H, r, c, q, ZC: tl.constexpr, TAB: tl.constexpr, EV: tl.constexpr):
        """One row's outputs over the columns cols (the row at base, its r, c, q known): the inputs
        read again (evict_first: their last use), written by _write_outputs; its dweight terms.
        Creates no tensor, so the Gluon kernel uses it too."""
        cm = cols < H
        m = cm & live
        off = base + cols
        x, graw, t, dy = _load_inputs(x_ptr, g_ptr, dy_ptr, off, m, "evict_first")
        gam = _load_gamma(w_ptr, cols, cm, ZC)
        s, oms = _silu_parts(graw, t, tab_ptr, m, TAB)
        return _write_outputs(y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, off, m,
                              x, t, dy, gam, s, oms, r, c, q, EV)

    @triton.jit
    def _row_sums(x_ptr, g_ptr, dy_ptr, w_ptr, eps_ptr, tab_ptr, stats_ptr, H, ZC: tl.constexpr,
                  CHUNK: tl.constexpr, TAB: tl.constexpr):
        """Per row: r = rsqrt(mean x^2 + eps), c = mean(dxhat xhat), q = mean(a |xhat|) — with
        xhat = x r, dxhat = dn gam, a = |dn| |gam|, all three from the sums of x^2, u and |u|,
        u = dy silu(t) gam x (c = r mean u, q = r mean |u|)."""
        row = tl.program_id(0)
        base = row.to(tl.int64) * H
        acc_xx, acc_u, acc_ua = _row_sum_accs(x_ptr + base, g_ptr + base, dy_ptr + base, w_ptr, tab_ptr, 0, True,
                                              H, CHUNK, ZC, TAB, "")
        eps = tl.load(eps_ptr)
        r = 1.0 / tl.sqrt(tl.sum(acc_xx, axis=0) / H + eps)     # fp64 sqrt: sqrt.rn.f64 in PTX
        tl.store(stats_ptr + 3 * row, r)
        tl.store(stats_ptr + 3 * row + 1, r * (tl.sum(acc_u, axis=0) / H))
        tl.store(stats_ptr + 3 * row + 2, r * (tl.sum(acc_ua, axis=0) / H))

    @triton.jit
    def _golden_tiles(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, stats_ptr,
                      y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                      T, H, ROWS, ZC: tl.constexpr, RB: tl.constexpr, BH: tl.constexpr, TAB: tl.constexpr):
        """A BH-column strip of ROWS rows, RB rows at a time: every output written once, the strip's
        dweight terms summed down its rows (one partial row per row block)."""
        cols = tl.program_id(0) * BH + tl.arange(0, BH)
        cm = cols < H
        gam = _load_gamma(w_ptr, cols, cm, ZC)[None, :]
        dw = tl.zeros([BH], dtype=tl.float64)
        dwg = tl.zeros([BH], dtype=tl.float64)
        first = tl.program_id(1) * ROWS
        for i in range(0, ROWS, RB):
            rows = first + i + tl.arange(0, RB)
            rm = (rows < T) & (i + tl.arange(0, RB) < ROWS)
            r = tl.load(stats_ptr + 3 * rows, mask=rm, other=0)[:, None]
            c = tl.load(stats_ptr + 3 * rows + 1, mask=rm, other=0)[:, None]
            q = tl.load(stats_ptr + 3 * rows + 2, mask=rm, other=0)[:, None]
            m = rm[:, None] & cm[None, :]
            off = rows.to(tl.int64)[:, None] * H + cols[None, :]
            x, graw, t, dy = _load_inputs(x_ptr, g_ptr, dy_ptr, off, m, "")
            s, oms = _silu_parts(graw, t, tab_ptr, m, TAB)
            dw_t, dwg_t = _write_outputs(y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, off, m,
                                         x, t, dy, gam, s, oms, r, c, q, "")
            dw += tl.sum(dw_t, axis=0)
            dwg += tl.sum(dwg_t, axis=0)
        part = tl.program_id(1).to(tl.int64) * H
        tl.store(dw_part_ptr + part + cols, dw, mask=cm)
        tl.store(dwg_part_ptr + part + cols, dwg, mask=cm)

    @triton.jit
    def _row_blocks(x_ptr, g_ptr, dy_ptr, w_ptr, eps_ptr, tab_ptr,
                    y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                    T, H, ZC: tl.constexpr, RB: tl.constexpr, CH: tl.constexpr, TAB: tl.constexpr,
                    REV: tl.constexpr):
        """RB rows, CH columns at a time, twice: the row sums (as _row_sums), then every output
        written once and the block's dweight terms summed over its RB rows, one partial row per
        block (RB >= 8 keeps the partials to 1/RB of a float64 output). REV: the second pass
        takes the chunks last to first, so that it starts on those the first pass left in L2."""
        rows = tl.program_id(0) * RB + tl.arange(0, RB)
        rm = rows < T
        base = rows.to(tl.int64)[:, None] * H
        acc_xx = tl.zeros([RB, CH], dtype=tl.float64)
        acc_u = tl.zeros([RB, CH], dtype=tl.float64)
        acc_ua = tl.zeros([RB, CH], dtype=tl.float64)
        for j in range(0, H, CH):
            cols = j + tl.arange(0, CH)
            m = rm[:, None] & (cols < H)[None, :]
            x, graw, t, dy = _load_inputs(x_ptr, g_ptr, dy_ptr, base + cols[None, :], m, "")
            gam = _load_gamma(w_ptr, cols, cols < H, ZC)[None, :]
            s, _ = _silu_parts(graw, t, tab_ptr, m, TAB)
            xx, u, ua = _row_sum_terms(x, t, dy, gam, s)
            acc_xx += xx
            acc_u += u
            acc_ua += ua
        eps = tl.load(eps_ptr)
        r = (1.0 / tl.sqrt(tl.sum(acc_xx, axis=1) / H + eps))[:, None]     # fp64 sqrt: sqrt.rn.f64
        c = r * (tl.sum(acc_u, axis=1) / H)[:, None]
        q = r * (tl.sum(acc_ua, axis=1) / H)[:, None]
        part = tl.program_id(0).to(tl.int64) * H
        last = ((H - 1) // CH) * CH
        for j in range(0, H, CH):
            cols = (last - j if REV else j) + tl.arange(0, CH)
            cm = cols < H
            m = rm[:, None] & cm[None, :]
            off = base + cols[None, :]
            x, graw, t, dy = _load_inputs(x_ptr, g_ptr, dy_ptr, off, m, "")
            gam = _load_gamma(w_ptr, cols, cm, ZC)[None, :]
            s, oms = _silu_parts(graw, t, tab_ptr, m, TAB)
            dw_t, dwg_t = _write_outputs(y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, off, m,
                                         x, t, dy, gam, s, oms, r, c, q, "")
            tl.store(dw_part_ptr + part + cols, tl.sum(dw_t, axis=0), mask=cm)
            tl.store(dwg_part_ptr + part + cols, tl.sum(dwg_t, axis=0), mask=cm)


    @triton.jit
    def _rows_persistent(x_ptr, g_ptr, dy_ptr, w_ptr, eps_ptr, tab_ptr,
                         y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                         T, H, ZC: tl.constexpr, HP: tl.constexpr, TAB: tl.constexpr,
                         PREFETCH: tl.constexpr, RECONVERT: tl.constexpr, EV: tl.constexpr):
        """Persistent programs, one whole row at a time (HP >= H columns), rows pid, pid + P, ...:
        only the row's raw 16-bit inputs stay in registers between its sums and its outputs (read
        from memory once), the next row's are loaded while this one is written (PREFETCH), and
        the dweight terms are summed down the program's rows in registers, one partial row per
        program (a fixed order: deterministic). RECONVERT: the second half converts the raw
        inputs to float64 again instead of keeping the float64 values live over the row sums."""
        pid = tl.program_id(0)
        step = tl.num_programs(0)
        cols = tl.arange(0, HP)
        cm = cols < H
        eps = tl.load(eps_ptr)
        dw = tl.zeros([HP], dtype=tl.float64)
        dwg = tl.zeros([HP], dtype=tl.float64)
        m0 = cm & (pid < T)
        off0 = pid.to(tl.int64) * H + cols
        xr = tl.load(x_ptr + off0, mask=m0, other=0)
        gr = tl.load(g_ptr + off0, mask=m0, other=0)
        dr = tl.load(dy_ptr + off0, mask=m0, other=0)
        stride = step.to(tl.int64) * H
        off = off0
        for row in range(pid, T, step):
            if PREFETCH:
                nm = cm & (row + step < T)
                xn = tl.load(x_ptr + off + stride, mask=nm, other=0)
                gn = tl.load(g_ptr + off + stride, mask=nm, other=0)
                dn_ = tl.load(dy_ptr + off + stride, mask=nm, other=0)
            gam = _load_gamma(w_ptr, cols, cm, ZC)
            x = xr.to(tl.float64)
            t = gr.to(tl.float64)
            dy = dr.to(tl.float64)
            s, _ = _silu_parts(gr, t, tab_ptr, cm, TAB)
            xx, u, ua = _row_sum_terms(x, t, dy, gam, s)
            r = 1.0 / tl.sqrt(tl.sum(xx, axis=0) / H + eps)      # fp64 sqrt: sqrt.rn.f64
            c = r * (tl.sum(u, axis=0) / H)
            q = r * (tl.sum(ua, axis=0) / H)
            if RECONVERT:      # a non-pure conversion the compiler cannot merge with the one above
                x = tl.inline_asm_elementwise("cvt.f64.f32 $0, $1;", "=d,f", [xr.to(tl.float32)],
                                              dtype=tl.float64, is_pure=False, pack=1)
                t = tl.inline_asm_elementwise("cvt.f64.f32 $0, $1;", "=d,f", [gr.to(tl.float32)],
                                              dtype=tl.float64, is_pure=False, pack=1)
                dy = tl.inline_asm_elementwise("cvt.f64.f32 $0, $1;", "=d,f", [dr.to(tl.float32)],
                                               dtype=tl.float64, is_pure=False, pack=1)
                w = tl.load(w_ptr + cols, mask=cm, other=0, cache_modifier=".ca").to(tl.float64)
                gam = w + 1.0 if ZC else w
            s, oms = _silu_parts(gr, t, tab_ptr, cm, TAB)
            dw_t, dwg_t = _write_outputs(y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, off, cm,
                                         x, t, dy, gam, s, oms, r, c, q, EV)
            dw += dw_t
            dwg += dwg_t
            if PREFETCH:
                xr, gr, dr = xn, gn, dn_
            else:
                nm = cm & (row + step < T)
                xr = tl.load(x_ptr + off + stride, mask=nm, other=0)
                gr = tl.load(g_ptr + off + stride, mask=nm, other=0)
                dr = tl.load(dy_ptr + off + stride, mask=nm, other=0)
            off += stride
        part = pid.to(tl.int64) * H
        tl.store(dw_part_ptr + part + cols, dw, mask=cm)
        tl.store(dwg_part_ptr + part + cols, dwg, mask=cm)


    @triton.jit
    def _col_sums(x_ptr, g_ptr, dy_ptr, tab_ptr, r_ptr, dw_part_ptr, dwg_part_ptr, T, H,
                  ROWS: tl.constexpr, RB: tl.constexpr, BN: tl.constexpr, TAB: tl.constexpr):
        """The dweight terms and their gauge terms summed down a strip of ROWS rows and BN columns
        (r, a row's rsqrt, given): one partial row per strip."""
        cols = tl.program_id(0) * BN + tl.arange(0, BN)
        cm = cols < H
        acc = tl.zeros([RB, BN], dtype=tl.float64)
        acc_g = tl.zeros([RB, BN], dtype=tl.float64)
        first = tl.program_id(1) * ROWS
        for i in range(0, ROWS, RB):
            rows = first + i + tl.arange(0, RB)
            rm = (rows < T) & (i + tl.arange(0, RB) < ROWS)     # a step may pass the strip's end
            m = rm[:, None] & cm[None, :]
            off = rows.to(tl.int64)[:, None] * H + cols[None, :]
            x, graw, t, dy = _load_inputs(x_ptr, g_ptr, dy_ptr, off, m, "")
            r = tl.load(r_ptr + rows, mask=rm, other=0)[:, None]
            s, _ = _silu_parts(graw, t, tab_ptr, m, TAB)
            dn = dy * (t * s)
            xhat = x * r
            acc += tl.where(m, dn * xhat, 0.0)
            acc_g += tl.where(m, tl.abs(dn) * tl.abs(xhat), 0.0)
        part = tl.program_id(1).to(tl.int64) * H
        tl.store(dw_part_ptr + part + cols, tl.sum(acc, axis=0), mask=cm)
        tl.store(dwg_part_ptr + part + cols, tl.sum(acc_g, axis=0), mask=cm)


    @triton.jit
    def _row_stream(x_ptr, g_ptr, dy_ptr, w_ptr, eps_ptr, tab_ptr,
                    y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                    T, H: tl.constexpr, ZC: tl.constexpr, RB: tl.constexpr, CH: tl.constexpr, TAB1: tl.constexpr,
                    TAB2: tl.constexpr, EV: tl.constexpr, PART: tl.constexpr):
        """RB rows a program, one row at a time in CH-column steps of one-dimensional tiles (few
        registers a thread, many programs an SM, as Inductor's row kernel): the row's three sums,
        then its outputs (the inputs again, from L2), the dweight terms added into the program's
        partial row (each element loaded and stored by the one thread that owns it, in program
        order). TAB1, TAB2: sigmoid from the table in the sums' / the outputs' loop. H is a
        compile-time constant (as in Inductor's kernels: known trip counts and masks). PART False
        leaves the partial rows out: a timing diagnostic only (dweight then wrong)."""
        pid = tl.program_id(0)
        eps = tl.load(eps_ptr)
        part = pid.to(tl.int64) * H
        for i in range(RB):
            row = pid * RB + i
            live = row < T
            base = row.to(tl.int64) * H
            acc_xx, acc_u, acc_ua = _row_sum_accs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, base, live, H, CH, ZC,
                                                  TAB1, "evict_last")
            r = 1.0 / tl.sqrt(tl.sum(acc_xx, axis=0) / H + eps)     # fp64 sqrt: sqrt.rn.f64
            c = r * (tl.sum(acc_u, axis=0) / H)
            q = r * (tl.sum(acc_ua, axis=0) / H)
            for j in range(0, H, CH):
                cols = j + tl.arange(0, CH)
                dw_t, dwg_t = _step_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, y_ptr, dgate_ptr, dx_ptr,
                                            dgate_g_ptr, dx_g_ptr, base, cols, live, H, r, c, q, ZC, TAB2, EV)
                if PART:     # the first row starts the partial row (nothing to load)
                    _add_partial(dw_part_ptr + part, dwg_part_ptr + part, cols, cols < H, i > 0, dw_t, dwg_t)

    @triton.jit
    def _row_sweep(x_ptr, g_ptr, dy_ptr, w_ptr, eps_ptr, tab_ptr, stats_ptr,
                   y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                   T, H: tl.constexpr, ZC: tl.constexpr, RB: tl.constexpr, CH: tl.constexpr,
                   TAB1: tl.constexpr, TAB2: tl.constexpr, EV: tl.constexpr, PART: tl.constexpr,
                   ROWMAJOR: tl.constexpr):
        """RB rows a program: their sums row by row (as stream), then their outputs column tile by
        column tile, down the block's rows, so that each thread adds the dweight terms of the
        columns it owns in registers (no cross-thread sum, no partial row in memory) and writes one
        partial row a block at the end. The inputs are read twice, the second time from L2 (RB rows
        back). Each row's r, c, q go through stats_ptr: written by the program, read after a
        barrier (bar.sync makes a CTA's global writes visible to the CTA)."""
        pid = tl.program_id(0)
        eps = tl.load(eps_ptr)
        first = pid * RB
        for i in range(RB):
            row = first + i
            live = row < T
            acc_xx, acc_u, acc_ua = _row_sum_accs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, row.to(tl.int64) * H, live,
                                                  H, CH, ZC, TAB1, "evict_last")
            r = 1.0 / tl.sqrt(tl.sum(acc_xx, axis=0) / H + eps)     # fp64 sqrt: sqrt.rn.f64
            tl.store(stats_ptr + 3 * row, r, mask=live)
            tl.store(stats_ptr + 3 * row + 1, r * (tl.sum(acc_u, axis=0) / H), mask=live)
            tl.store(stats_ptr + 3 * row + 2, r * (tl.sum(acc_ua, axis=0) / H), mask=live)
        tl.debug_barrier()
        part = pid.to(tl.int64) * H
        if ROWMAJOR:        # diagnostic: the outputs row by row (stream's order), dweight left out
            for i in range(RB):
                for j in range(0, H, CH):
                    _sweep_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, stats_ptr, y_ptr, dgate_ptr, dx_ptr,
                                   dgate_g_ptr, dx_g_ptr, first + i, j + tl.arange(0, CH), T, H, ZC, TAB2, EV)
        else:
            for j in range(0, H, CH):
                cols = j + tl.arange(0, CH)
                dw = tl.zeros([CH], dtype=tl.float64)
                dwg = tl.zeros([CH], dtype=tl.float64)
                for i in range(RB):
                    dw_t, dwg_t = _sweep_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, stats_ptr, y_ptr, dgate_ptr,
                                                 dx_ptr, dgate_g_ptr, dx_g_ptr, first + i, cols, T, H, ZC, TAB2, EV)
                    dw += dw_t
                    dwg += dwg_t
                if PART:    # else (a timing diagnostic) the dweight terms are left out
                    tl.store(dw_part_ptr + part + cols, dw, mask=cols < H)
                    tl.store(dwg_part_ptr + part + cols, dwg, mask=cols < H)

    @triton.jit
    def _sweep_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, stats_ptr, y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr,
                       dx_g_ptr, row, cols, T, H: tl.constexpr, ZC: tl.constexpr, TAB2: tl.constexpr,
                       EV: tl.constexpr):
        """One row's outputs over the columns cols (its r, c, q from stats_ptr); its dweight terms."""
        live = row < T
        r = tl.load(stats_ptr + 3 * row, mask=live, other=0.0)
        c = tl.load(stats_ptr + 3 * row + 1, mask=live, other=0.0)
        q = tl.load(stats_ptr + 3 * row + 2, mask=live, other=0.0)
        return _step_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr,
                             row.to(tl.int64) * H, cols, live, H, r, c, q, ZC, TAB2, EV)

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
                   T, H: tl.constexpr, ZC: tl.constexpr, CH: tl.constexpr, TAB1: tl.constexpr,
                   TAB2: tl.constexpr, EV: tl.constexpr, PS: tl.constexpr):
        """Stream's order (a row's sums, then its outputs from L1/L2, CH columns a step) in
        persistent programs (rows pid, pid + P, ...) whose dweight partial row stays in registers:
        one [CH] accumulator a column step, in a tuple (the steps unrolled), so that each thread
        adds the terms of the columns it owns; written out once a program (dw_part_ptr and dwg_part_ptr
        rows PS apart: one buffer, summed by one kernel)."""
        NT: tl.constexpr = (H + CH - 1) // CH
        pid = tl.program_id(0)
        eps = tl.load(eps_ptr)
        dws = (tl.zeros([CH], dtype=tl.float64),) * NT
        dwgs = (tl.zeros([CH], dtype=tl.float64),) * NT
        step = tl.num_programs(0)
        for i in range(0, tl.cdiv(T - pid, step)):       # rows pid, pid + step, ... (a grid of <= T)
            base = (pid + i * step).to(tl.int64) * H
            acc_xx, acc_u, acc_ua = _row_sum_accs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, base, True, H, CH, ZC,
                                                  TAB1, "evict_last")
            sxx, su, sua = tl.reduce((acc_xx, acc_u, acc_ua), 0, _add3)     # one pass over shared memory
            r = 1.0 / tl.sqrt(sxx / H + eps)     # fp64 sqrt: sqrt.rn.f64
            c = r * (su / H)
            q = r * (sua / H)
            for k in tl.static_range(NT):
                dw_t, dwg_t = _step_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, y_ptr, dgate_ptr, dx_ptr,
                                            dgate_g_ptr, dx_g_ptr, base, k * CH + tl.arange(0, CH), True, H,
                                            r, c, q, ZC, TAB2, EV)
                dws = _set(dws, k, dws[k] + dw_t)
                dwgs = _set(dwgs, k, dwgs[k] + dwg_t)
        part = pid.to(tl.int64) * PS     # the partial rows' stride: dw and dwg interleaved a row each
        for k in tl.static_range(NT):
            cols = k * CH + tl.arange(0, CH)
            tl.store(dw_part_ptr + part + cols, dws[k], mask=cols < H)
            tl.store(dwg_part_ptr + part + cols, dwgs[k], mask=cols < H)

    @triton.jit
    def _add_partial(dw_ptr, dwg_ptr, cols, cm, add, dw_t, dwg_t):
        pm = cm & add
        dw_old = tl.load(dw_ptr + cols, mask=pm, other=0.0)
        dwg_old = tl.load(dwg_ptr + cols, mask=pm, other=0.0)
        tl.store(dw_ptr + cols, dw_old + dw_t, mask=cm)
        tl.store(dwg_ptr + cols, dwg_old + dwg_t, mask=cm)


    @triton.jit
    def _row_pair(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr,
                  y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                  T, H: tl.constexpr, EPS: tl.constexpr, ZC: tl.constexpr, XB: tl.constexpr, RBLK: tl.constexpr,
                  TAB: tl.constexpr, PART: tl.constexpr, WIDE: tl.constexpr):
        """Written as Inductor writes its row kernel for the same closed forms (run 11e, the "raw"
        row sums): XB rows a program in [XB, RBLK] tiles, two loops — the three row sums, then the
        five outputs — int32 offsets unless WIDE, loads through float32,
        the first loop's loads kept in L2 for the second. PART: the dweight terms of each tile
        summed over its XB rows into the program's partial row (else left out: a timing
        diagnostic only)."""
        rows = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
        rmask = rows < T
        rbase = (rows.to(tl.int64) if WIDE else rows) * H
        cbase = tl.arange(0, RBLK)[None, :]
        acc_xx = tl.full([XB, RBLK], 0, tl.float64)
        acc_u = tl.full([XB, RBLK], 0, tl.float64)
        acc_ua = tl.full([XB, RBLK], 0, tl.float64)
        for j in tl.range(0, H, RBLK):
            cols = j + cbase
            m = (cols < H) & rmask
            x = tl.load(x_ptr + (cols + rbase), m, eviction_policy="evict_last", other=0.0).to(tl.float32).to(tl.float64)
            graw = tl.load(g_ptr + (cols + rbase), m, eviction_policy="evict_last", other=0.0)
            dy = tl.load(dy_ptr + (cols + rbase), m, eviction_policy="evict_last", other=0.0).to(tl.float32).to(tl.float64)
            w = tl.load(w_ptr + cols, cols < H, eviction_policy="evict_last", other=0.0).to(tl.float32).to(tl.float64)
            t = graw.to(tl.float32).to(tl.float64)
            gam = w + 1.0 if ZC else w
            s, _ = _silu_parts(graw, t, tab_ptr, m, TAB)
            u = dy * (t * s) * gam * x
            acc_xx = tl.where(m, acc_xx + x * x, acc_xx)
            acc_u = tl.where(m, acc_u + u, acc_u)
            acc_ua = tl.where(m, acc_ua + tl.abs(u), acc_ua)
        # a float constexpr would enter as a float32: EPS as a float64 constant, as Inductor writes it
        r = 1.0 / tl.sqrt(tl.sum(acc_xx, 1)[:, None] / H + tl.full([1, 1], EPS, tl.float64))   # once a row
        c = r * (tl.sum(acc_u, 1)[:, None] / H)
        q = r * (tl.sum(acc_ua, 1)[:, None] / H)
        part = tl.program_id(0).to(tl.int64) * H
        for j in tl.range(0, H, RBLK):
            cols = j + cbase
            cm = cols < H
            m = cm & rmask
            off = cols + rbase
            x = tl.load(x_ptr + off, m, eviction_policy="evict_first", other=0.0).to(tl.float32).to(tl.float64)
            w = tl.load(w_ptr + cols, cm, eviction_policy="evict_last", other=0.0).to(tl.float32).to(tl.float64)
            graw = tl.load(g_ptr + off, m, eviction_policy="evict_first", other=0.0)
            dy = tl.load(dy_ptr + off, m, eviction_policy="evict_first", other=0.0).to(tl.float32).to(tl.float64)
            t = graw.to(tl.float32).to(tl.float64)
            gam = w + 1.0 if ZC else w
            s, oms = _silu_parts(graw, t, tab_ptr, m, TAB)
            dw_t, dwg_t = _write_outputs(y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, off, m,
                                         x, t, dy, gam, s, oms, r, c, q, "")
            if PART:
                cols1 = j + tl.arange(0, RBLK)
                tl.store(dw_part_ptr + part + cols1, tl.sum(dw_t, 0), mask=cols1 < H)
                tl.store(dwg_part_ptr + part + cols1, tl.sum(dwg_t, 0), mask=cols1 < H)


if gluon is not None:
    # the Triton helpers above, compiled as Gluon (they create no tensor, so need no layout)
    _g_load_inputs, _g_load_gamma, _g_silu_parts, _g_row_sum_terms, _g_step_outputs = (
        gluon.jit(f.fn) for f in (_load_inputs, _load_gamma, _silu_parts, _row_sum_terms, _step_outputs))

    @gluon.jit
    def _rows_smem(x_ptr, g_ptr, dy_ptr, w_ptr, eps_ptr, tab_ptr,
                   y_ptr, dgate_ptr, dx_ptr, dgate_g_ptr, dx_g_ptr, dw_part_ptr, dwg_part_ptr,
                   T, H: gl.constexpr, ZC: gl.constexpr, CH: gl.constexpr, TAB1: gl.constexpr,
                   TAB2: gl.constexpr, EV: gl.constexpr, NW: gl.constexpr):
        """As stream (a row's sums, then its outputs, CH columns a step, the inputs again from
        L1/L2), in persistent programs (rows pid, pid + P, ...) that add the dweight terms into a
        partial row held in shared memory (Gluon: explicit layouts and shared memory) — on chip,
        where stream's partial rows went through L2 — written out once a program."""
        L: gl.constexpr = gl.BlockedLayout(size_per_thread=[CH // (32 * NW)], threads_per_warp=[32],
                                           warps_per_cta=[NW], order=[0])
        S: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
        NT: gl.constexpr = (H + CH - 1) // CH
        dw_s = gl.allocate_shared_memory(gl.float64, [NT, CH], S)
        dwg_s = gl.allocate_shared_memory(gl.float64, [NT, CH], S)
        zero = gl.zeros([CH], gl.float64, L)
        for j in range(NT):
            dw_s.index(j).store(zero)
            dwg_s.index(j).store(zero)
        pid = gl.program_id(0)
        eps = gl.load(eps_ptr)
        lane = gl.arange(0, CH, L)
        for row in range(pid, T, gl.num_programs(0)):
            base = row.to(gl.int64) * H
            acc_xx = gl.zeros([CH], gl.float64, L)
            acc_u = gl.zeros([CH], gl.float64, L)
            acc_ua = gl.zeros([CH], gl.float64, L)
            for j in range(NT):        # _row_sum_accs, written out: Gluon's tensors need a layout
                cols = j * CH + lane
                cm = cols < H
                x, graw, t, dy = _g_load_inputs(x_ptr, g_ptr, dy_ptr, base + cols, cm, "evict_last")
                gam = _g_load_gamma(w_ptr, cols, cm, ZC)
                s, _ = _g_silu_parts(graw, t, tab_ptr, cm, TAB1)
                xx, u, ua = _g_row_sum_terms(x, t, dy, gam, s)
                acc_xx += xx
                acc_u += u
                acc_ua += ua
            r = 1.0 / gl.sqrt(gl.sum(acc_xx, axis=0) / H + eps)     # fp64 sqrt: sqrt.rn.f64
            c = r * (gl.sum(acc_u, axis=0) / H)
            q = r * (gl.sum(acc_ua, axis=0) / H)
            for j in range(NT):
                dw_t, dwg_t = _g_step_outputs(x_ptr, g_ptr, dy_ptr, w_ptr, tab_ptr, y_ptr, dgate_ptr, dx_ptr,
                                              dgate_g_ptr, dx_g_ptr, base, j * CH + lane, True, H, r, c, q, ZC,
                                              TAB2, EV)
                a = dw_s.index(j)
                a.store(a.load(L) + dw_t)
                b = dwg_s.index(j)
                b.store(b.load(L) + dwg_t)
        part = pid.to(gl.int64) * H
        for j in range(NT):
            cols = j * CH + lane
            cm = cols < H
            gl.store(dw_part_ptr + part + cols, dw_s.index(j).load(L), mask=cm)
            gl.store(dwg_part_ptr + part + cols, dwg_s.index(j).load(L), mask=cm)


LAYOUTS = ("blocks", "strips", "rows", "stream", "pair", "sweep", "smem", "regs")


def blocks_launch(tokens: int, hidden: int, rows_per_block: int | None = None, chunk: int | None = None,
                  warps: int | None = None) -> tuple[int, int, int]:
    """Blocks layout: (RB rows a block, CH columns a step, warps): by default the best shape run
    10c measured at 8192x4096, 8 rows x 128 columns on 2 warps (16 float64 elements a thread);
    RB >= 8 where there are rows enough (the dweight partials: 1/RB of an output)."""
    ch = chunk or min(triton.next_power_of_2(max(hidden, 1)), 128)
    rb = rows_per_block or min(triton.next_power_of_2(max(tokens, 1)), max(8, 1024 // ch))
    return rb, ch, warps or max(1, min(16, rb * ch // 512))


def _sm_count(device) -> int:
    """The GPU's streaming multiprocessors (persistent grids: a program or two each); 4 elsewhere
    (Triton's interpreter on the CPU)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def rows_launch(tokens: int, hidden: int, device, programs: int | None = None, warps: int | None = None
                ) -> tuple[int, int, int]:
    """Rows layout: (HP columns held, persistent programs, warps): 8 columns a thread up to 16
    warps, one program an SM by default (a program holds a whole row)."""
    hp = triton.next_power_of_2(max(hidden, 1))
    nw = warps or max(1, min(16, hp // 256))
    if programs is None:
        sms = _sm_count(device)
        programs = sms
    return hp, max(1, min(programs, tokens)), nw


def launch_shape(tokens: int, hidden: int, rows: int | None = None,
                 strip: int | None = None) -> tuple[int, int, int, int]:
    """Strips layout: (CHUNK of the row sums, ROWS of a strip, RB rows at a time, BH columns of a
    strip): enough strips to fill the GPU, few enough row blocks that the dweight partials stay small."""
    chunk = min(triton.next_power_of_2(max(hidden, 1)), 2048)
    bh = strip or min(triton.next_power_of_2(max(hidden, 1)), 128)
    rb = min(triton.next_power_of_2(max(tokens, 1)), max(1, 1024 // bh))
    return chunk, rows or max(rb, 256), rb, bh


def _on_the_inputs_device(fn):
    """Launch on the inputs' GPU: Triton launches on the current device, which may be another."""
    @functools.wraps(fn)
    def on_device(inp: Inputs, *args, **kwargs):
        if not inp.x.is_cuda:
            return fn(inp, *args, **kwargs)
        with torch.cuda.device(inp.x.device):
            return fn(inp, *args, **kwargs)
    return on_device


_CONSTANTS: dict = {}


def _constant(value: float, dev, n: int = 1) -> torch.Tensor:
    """A float64 tensor of n copies of value on dev, made once and kept: each call of the pass would
    otherwise launch a fill (a host-to-device copy would synchronise every call). The first fill
    is waited for, so that a later call on another stream never reads it unfilled."""
    key = (float(value).hex(), str(dev), n)          # hex: NaN finds itself, -0.0 is not 0.0
    if key not in _CONSTANTS:
        c = torch.full((n,), value, dtype=torch.float64, device=dev)
        if c.is_cuda:
            torch.cuda.synchronize(c.device)
        _CONSTANTS[key] = c
    return _CONSTANTS[key]


@_on_the_inputs_device
def exact_outputs_triton(inp: Inputs, layout: str = "blocks", table: bool = False,
                         rows_per_block: int | None = None, chunk: int | None = None, warps: int | None = None,
                         reverse: bool = True, rows: int | None = None, strip: int | None = None,
                         programs: int | None = None, prefetch: bool = True, reconvert: bool = False,
                         evict: str = "", maxnreg: int | None = None,
                         partials: bool = True, poison: bool = False, row_major: bool = False
                         ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Values of y, dx, dgate, dweight and gauges of dx, dgate, dweight, as exact_outputs_fused (n,
    dn and the |value| gauges on first use). The layouts (module docstring) and their launch
    options: "blocks" rows_per_block, chunk, warps, reverse (its second pass from the last column
    chunk, for L2 hits); "strips" rows, strip; "rows" programs, warps, prefetch, reconvert, evict
    (the float64 stores' eviction policy), maxnreg; "stream" rows_per_block, chunk, warps, evict,
    partials; "pair" rows_per_block, chunk, warps, partials; "sweep" rows_per_block, chunk, warps,
    evict, partials, row_major (with partials False: the outputs in stream's order, a diagnostic);
    "smem" chunk, warps, programs, evict; "regs" chunk, warps, programs, evict, maxnreg. table: a 16-bit gate's sigmoids from
    references.fast.sigmoid_table instead of an exp per element ("stream", "sweep", "smem": a pair,
    for the sums' loop and the outputs' loop). partials False (a timing diagnostic) leaves dweight out: NaN.
    poison: the outputs start as NaN rather than whatever memory the allocator hands back, so that
    an element a kernel fails to write shows (on CUDA a freed block of the same size often still
    holds a previous call's correct values)."""
    if triton is None:
        raise RuntimeError("references.triton_reference: Triton is not installed")
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: one of {LAYOUTS}")
    if isinstance(table, tuple) and layout not in ("stream", "sweep", "smem", "regs"):
        raise ValueError(f"table {table!r}: a pair only for the stream, sweep, smem and regs layouts")
    if evict and layout not in ("rows", "stream", "sweep", "smem", "regs"):
        raise ValueError(f"evict {evict!r}: only the rows, stream, sweep, smem and regs layouts set the stores' "
                         "eviction policy")
    if not partials and layout not in ("stream", "pair", "sweep"):
        raise ValueError("partials=False: only the stream, pair and sweep layouts can leave dweight out")
    if row_major and (layout != "sweep" or partials):
        raise ValueError("row_major: a timing diagnostic of the sweep layout, with partials=False")
    shape, hidden = inp.x.shape, inp.hidden
    x, g, dy = (t.contiguous().reshape(-1, hidden) for t in (inp.x, inp.gate, inp.dy))
    tokens, dev = x.shape[0], x.device
    f64 = dict(dtype=torch.float64, device=dev)
    w = inp.weight.contiguous()
    zc = bool(inp.zero_centered_gamma)
    use_tab = bool(table) and has_sigmoid_table(g.dtype)
    tab = sigmoid_table(g.dtype, dev) if use_tab else _constant(0.0, dev, 2)       # (unread without the table)
    # the sums' loop's and the outputs' loop's (stream, sweep, smem, regs: table may be a pair)
    tab1, tab2 = (bool(t) and use_tab for t in (table if isinstance(table, tuple) else (table, table)))
    eps = _constant(float(inp.eps), dev)
    alloc = (lambda *size: torch.full(size, float("nan"), **f64)) if poison else \
        (lambda *size: torch.empty(size, **f64))
    y, dgate, dx, dgate_g, dx_g = (alloc(tokens, hidden) for _ in range(5))
    if layout == "blocks":
        rb, ch, nw = blocks_launch(tokens, hidden, rows_per_block, chunk, warps)
        blocks = -(-tokens // rb)
        dw_part, dwg_part = alloc(blocks, hidden), alloc(blocks, hidden)
        _row_blocks[(blocks,)](x, g, dy, w, eps, tab, y, dgate, dx, dgate_g, dx_g, dw_part, dwg_part,
                               tokens, hidden, ZC=zc, RB=rb, CH=ch, TAB=use_tab, REV=reverse, num_warps=nw)
    elif layout == "pair":
        rb = rows_per_block or 8
        ch = chunk or min(triton.next_power_of_2(max(hidden, 1)), 512)
        nw = warps or 8
        blocks = -(-tokens // rb)
        dw_part, dwg_part = alloc(blocks, hidden), alloc(blocks, hidden)
        _row_pair[(blocks,)](x, g, dy, w, tab, y, dgate, dx, dgate_g, dx_g, dw_part, dwg_part,
                             tokens, hidden, EPS=float(inp.eps), ZC=zc, XB=rb, RBLK=ch, TAB=use_tab, PART=partials,
                             WIDE=(blocks * rb + 1) * hidden >= 2 ** 31, num_warps=nw)
    elif layout == "stream":
        rb = rows_per_block or 16
        ch = chunk or min(triton.next_power_of_2(max(hidden, 1)), 1024)
        nw = warps or max(1, min(16, ch // 128))
        blocks = -(-tokens // rb)
        dw_part, dwg_part = alloc(blocks, hidden), alloc(blocks, hidden)
        _row_stream[(blocks,)](x, g, dy, w, eps, tab, y, dgate, dx, dgate_g, dx_g, dw_part, dwg_part,
                               tokens, hidden, ZC=zc, RB=rb, CH=ch, TAB1=tab1, TAB2=tab2, EV=evict,
                               PART=partials, num_warps=nw)
    elif layout == "sweep":
        rb = rows_per_block or 8
        ch = chunk or min(triton.next_power_of_2(max(hidden, 1)), 1024)
        nw = warps or max(1, min(16, ch // 128))
        blocks = -(-tokens // rb)
        dw_part, dwg_part = alloc(blocks, hidden), alloc(blocks, hidden)
        stats = torch.empty((tokens, 3), **f64)
        _row_sweep[(blocks,)](x, g, dy, w, eps, tab, stats, y, dgate, dx, dgate_g, dx_g, dw_part, dwg_part,
                              tokens, hidden, ZC=zc, RB=rb, CH=ch, TAB1=tab1, TAB2=tab2, EV=evict, PART=partials,
                              ROWMAJOR=row_major,
                              num_warps=nw)
    elif layout == "regs":
        ch = chunk or max(32, min(triton.next_power_of_2(max(hidden, 1)), 1024))
        nw = warps or max(1, min(16, ch // 64))
        if -(-hidden // ch) > 16:          # one register accumulator a step, the steps unrolled
            raise ValueError(f"regs: at most 16 column steps, got hidden {hidden} / chunk {ch}")
        sms = _sm_count(dev)
        nprog = max(1, min(programs or sms, tokens))
        parts = alloc(nprog, 2, hidden)           # a program's dw and dwg rows side by side: one sum
        _rows_regs[(nprog,)](x, g, dy, w, eps, tab, y, dgate, dx, dgate_g, dx_g, parts[:, 0], parts[:, 1],
                             tokens, hidden, ZC=zc, CH=ch, TAB1=tab1, TAB2=tab2,
                             EV=evict, PS=2 * hidden, num_warps=nw, **({"maxnreg": maxnreg} if maxnreg else {}))
        dw, dwg = parts.sum(0)
    elif layout == "smem":
        if gluon is None:
            raise RuntimeError("layout 'smem': needs Triton's Gluon (triton.experimental.gluon)")
        ch = chunk or max(32, min(triton.next_power_of_2(max(hidden, 1)), 1024))    # a warp: 32 lanes
        nw = warps or max(1, min(16, ch // 128))
        if ch % (32 * nw):
            raise ValueError(f"smem: chunk {ch} must be a multiple of 32 x warps ({32 * nw})")
        sms = _sm_count(dev)
        nprog = max(1, min(programs or 2 * sms, tokens))
        dw_part, dwg_part = alloc(nprog, hidden), alloc(nprog, hidden)
        _rows_smem[(nprog,)](x, g, dy, w, eps, tab, y, dgate, dx, dgate_g, dx_g, dw_part, dwg_part,
                             tokens, hidden, ZC=zc, CH=ch, TAB1=tab1, TAB2=tab2,
                             EV=evict, NW=nw, num_warps=nw)
    elif layout == "rows":
        hp, nprog, nw = rows_launch(tokens, hidden, dev, programs, warps)
        dw_part, dwg_part = alloc(nprog, hidden), alloc(nprog, hidden)
        _rows_persistent[(nprog,)](x, g, dy, w, eps, tab, y, dgate, dx, dgate_g, dx_g, dw_part, dwg_part,
                                   tokens, hidden, ZC=zc, HP=hp, TAB=use_tab, PREFETCH=prefetch,
                                   RECONVERT=reconvert, EV=evict, num_warps=nw,
                                   **({"maxnreg": maxnreg} if maxnreg else {}))
    else:
        chunk_s, rows, rb, bh = launch_shape(tokens, hidden, rows, strip)
        stats = torch.empty((tokens, 3), **f64)
        _row_sums[(tokens,)](x, g, dy, w, eps, tab, stats, hidden, ZC=zc, CHUNK=chunk_s,
                             TAB=use_tab, num_warps=max(1, min(8, chunk_s // 256)))
        blocks = -(-tokens // rows)
        dw_part, dwg_part = alloc(blocks, hidden), alloc(blocks, hidden)
        _golden_tiles[(-(-hidden // bh), blocks)](x, g, dy, w, tab, stats, y, dgate, dx, dgate_g, dx_g, dw_part,
                                                  dwg_part, tokens, hidden, rows, ZC=zc, RB=rb, BH=bh, TAB=use_tab,
                                                  num_warps=max(1, min(8, rb * bh // 256)))
    if layout == "regs":
        pass                   # summed above
    elif partials:
        dw, dwg = dw_part.sum(0), dwg_part.sum(0)
    else:                  # the partial rows were never written: no sum over them (nor its time)
        dw = dwg = torch.full((hidden,), float("nan"), **f64)
    return completed_on_use(inp, {"y": y.reshape(shape), "dgate": dgate.reshape(shape), "dx": dx.reshape(shape),
                                  "dweight": dw},
                            {"dgate": dgate_g.reshape(shape), "dx": dx_g.reshape(shape), "dweight": dwg})


@_on_the_inputs_device
def column_sums_triton(inp: Inputs, r: torch.Tensor, table: bool = True, rows: int = 256, rb: int = 8,
                       bn: int = 128, warps: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """dweight and its gauge from the inputs and each row's rsqrt r (float64, one a row): strips
    of `rows` rows x `bn` columns, partial rows summed in a fixed order."""
    hidden = inp.hidden
    x, g, dy = (t.contiguous().reshape(-1, hidden) for t in (inp.x, inp.gate, inp.dy))
    tokens = x.shape[0]
    if r.dtype != torch.float64 or r.numel() != tokens or r.device != x.device:
        raise ValueError(f"r: one float64 rsqrt a row on {x.device} ({tokens}), got {r.dtype} x {r.numel()} "
                         f"on {r.device}")
    f64 = dict(dtype=torch.float64, device=x.device)
    use_tab = table and has_sigmoid_table(g.dtype)
    tab = sigmoid_table(g.dtype, x.device) if use_tab else torch.zeros(2, **f64)
    strips = -(-tokens // rows)
    dw_part, dwg_part = torch.empty((strips, hidden), **f64), torch.empty((strips, hidden), **f64)
    _col_sums[(-(-hidden // bn), strips)](x, g, dy, tab, r.reshape(-1).contiguous(), dw_part, dwg_part,
                                          tokens, hidden, ROWS=rows, RB=rb, BN=bn, TAB=use_tab, num_warps=warps)
    return dw_part.sum(0), dwg_part.sum(0)
