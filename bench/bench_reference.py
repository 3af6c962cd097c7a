"""float64 reference throughput against the memory-bandwidth floor, and the share of a case's
reference time spent in mpmath certification.

    python bench/bench_reference.py [--device cuda] [--tokens 8192] [--hidden 4096] [--dtype bf16] [--profile] [--tune]
                                    [--triton [--layouts blocks,strips,rows,stream,pair,sweep,smem,regs,hybrid]]

Times the eager closed forms (references.exact.exact_outputs) and the fused torch.compile version
(references.fast.exact_outputs_fused, each sigmoid-table mode and both ways of writing dx's row
sums; compile time reported separately; on CUDA also its kernels' own time from torch.profiler),
and the undecided mask of certification eager (references.certify.undecided) and fused
(references.fast.undecided_fast). --triton: the hand-written kernels of
references/triton_reference.py in the layouts asked for, "hybrid" being Inductor's row graph
without the column sums plus the Triton column-sum kernel.

Floor: the bytes the closed forms must move at least once — read x, gate, dy (the input dtype) and
weight, write y, dx, dgate in float64 plus dweight — divided by the device's copy bandwidth
(measured here with a device-to-device copy, ~4.3 TB/s on an H200)."""
import argparse
import time

import torch

from harness.cases.case import Case
from harness.cases.generate import generate
from harness.references.bundle import build
from harness.references.certify import undecided
from harness.references.exact import exact_outputs, float64_error_bound
import harness.references.fast as fast
from harness.references.fast import exact_outputs_fused, has_sigmoid_table, undecided_fast
from harness.references.formats import fmt_of, round_to


def sync(dev):
    if dev.startswith("cuda"):
        torch.cuda.synchronize()


def once(fn, dev):
    """fn()'s result and its seconds, the device idle before and after (first calls: compiles)."""
    sync(dev)
    t0 = time.perf_counter()
    result = fn()
    sync(dev)
    return result, time.perf_counter() - t0


def timed(fn, dev, repeat=10):
    fn()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync(dev)
    return (time.perf_counter() - t0) / repeat


def device_ms(fn, calls=5):
    """The GPU time of fn's kernels a call (torch.profiler: the kernels' own durations, summed),
    free of host-side launch overheads and of any synchronisation in fn."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(getattr(e, "self_device_time_total", 0) for e in prof.key_averages()) / calls / 1e3


def kernel_times(inp, dev):
    """The fused pass's kernels and their device time a call (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            exact_outputs_fused(inp)
        sync(dev)
    for e in sorted(prof.key_averages(), key=lambda e: -getattr(e, "device_time_total", 0))[:4]:
        print(f"  kernel {e.key[:70]}: {getattr(e, 'device_time_total', 0) / 3 / 1e3:.3f} ms a call")


def hybrid(inp, dev, floor_s, vf, gf, bnd0):
    """Inductor's row kernel without the dweight column sums (each row's rsqrt out instead), then
    the column sums in the hand-written Triton kernel: each alone and together."""
    from harness.references.triton_reference import column_sums_triton
    if not dev.startswith("cuda"):
        print("hybrid: CUDA only (streams, Inductor's GPU kernels)")
        return
    args = (inp.x, inp.gate, inp.weight, inp.dy, None)
    for rs in ("xhat", "raw"):
        rows_fn = fast._compiled_outputs(fast._key(inp), "off", columns=False, row_sums=rs)
        _, t_c = once(lambda: rows_fn(*args), dev)
        t_rows = timed(lambda: rows_fn(*args), dev)
        print(f"hybrid: Inductor's row graph without the column sums, row sums {rs}: {t_rows * 1e3:.3f} ms "
              f"(compile {t_c:.1f} s)")
    r = rows_fn(*args)[-1]     # below: the "raw" row graph (the last of the loop)
    eps = inp.eps
    r_fn = torch.compile(lambda x: torch.rsqrt((x.to(torch.float64) ** 2).mean(-1) + eps), dynamic=False)
    r_fn(inp.x)
    t_r = timed(lambda: r_fn(inp.x), dev)
    print(f"  each row's rsqrt alone (Inductor): {t_r * 1e3:.3f} ms")
    for prio in (-1, 0):      # the column sums on a side stream beside the row graph (r first)
        side = torch.cuda.Stream(priority=prio)

        def overlapped():
            rr = r_fn(inp.x)
            cur = torch.cuda.current_stream()
            side.wait_stream(cur)
            with torch.cuda.stream(side):
                cols = column_sums_triton(inp, rr, table=False, rows=128, rb=8, bn=64, warps=4)
            out = rows_fn(*args)
            cur.wait_stream(side)
            return out, cols
        t_ov = timed(overlapped, dev)
        (_, cols) = overlapped()
        agree = bool(torch.all((cols[0] - vf["dweight"]).abs() <= 2 * bnd0["dweight"] * gf["dweight"] + 1e-300))
        print(f"  rsqrt, then the raw row graph and the Triton column sums on a side stream of priority {prio}: "
              f"{t_ov * 1e3:.3f} ms = {100 * floor_s / t_ov:.1f}% of the floor; dweight agrees: {agree}")
    for tab, rows, rb, bn, nw in ((True, 128, 8, 64, 4), (False, 128, 8, 64, 4), (False, 512, 8, 128, 8)):
        col = lambda: column_sums_triton(inp, r, table=tab, rows=rows, rb=rb, bn=bn, warps=nw)
        try:
            _, t_j = once(col, dev)
        except Exception as err:
            print(f"  column sums ({tab}, {rows}, {rb}, {bn}, {nw}) failed: {type(err).__name__}: {str(err)[:300]}")
            continue
        t_col = timed(col, dev)
        dw, dwg = col()
        agree = bool(torch.all((dw - vf["dweight"]).abs() <= 2 * bnd0["dweight"] * gf["dweight"] + 1e-300))
        both = lambda: (rows_fn(*args), col())
        t_both = timed(both, dev)
        t_bd = device_ms(both)
        print(f"  column sums in Triton (sigmoid {'table' if tab else 'exp'}, strips of {rows} rows x {bn} columns, "
              f"{rb} rows a step, {nw} warps): {t_col * 1e3:.3f} ms alone (JIT {t_j:.1f} s), agrees: {agree}; "
              f"with the raw row graph {t_both * 1e3:.3f} ms = {100 * floor_s / t_both:.1f}% of the floor "
              f"(kernels alone {t_bd:.3f} ms = {100 * floor_s * 1e3 / t_bd:.1f}%)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--profile", action="store_true", help="kernels of the fused pass (torch.profiler)")
    p.add_argument("--triton", action="store_true",
                   help="also time the hand-written Triton pass (references/triton_reference.py)")
    p.add_argument("--layouts", default="blocks,strips,rows",
                   help="with --triton: the layouts to time (comma-separated)")
    p.add_argument("--repeat", type=int, default=10,
                   help="calls timed back to back for the harness's pass (wall: the first call's launch is "
                        "not hidden behind a previous one, ~1/N of a call's host time)")
    p.add_argument("--only", default="",
                   help="with --triton: time only the variants whose description contains one of these |-separated texts")
    p.add_argument("--tune", action="store_true",
                   help="also time the fused pass compiled with Inductor's coordinate_descent_tuning")
    a = p.parse_args()
    case = Case(a.dtype, a.dtype, a.dtype, (a.tokens, a.hidden), False, 1e-5, "standard", "normal", "one", 0)
    inp = generate(case).to(a.device)
    n = inp.x.numel()
    esize = inp.x.element_size()
    floor_bytes = 3 * n * esize + 3 * n * 8 + 2 * a.hidden * 8
    buf = torch.empty(256 << 20, dtype=torch.uint8, device=a.device)
    bw = 2 * buf.numel() / timed(lambda: buf.clone(), a.device)
    t_ref = timed(lambda: exact_outputs(inp), a.device)
    floor_s = floor_bytes / bw
    print(f"device {a.device} ({torch.cuda.get_device_name() if a.device.startswith('cuda') else 'cpu'}), "
          f"{a.tokens}x{a.hidden} {a.dtype}")
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; floor {floor_bytes / 1e9:.2f} GB -> {floor_s * 1e3:.2f} ms")
    print(f"exact_outputs (float64 closed forms, fwd+bwd): {t_ref * 1e3:.2f} ms = {100 * floor_s / t_ref:.0f}% of the floor")
    # what the fused pass must move at least: inputs read once (one row per program), the values of
    # y, dx, dgate and the gauges of dx, dgate written once (float64), dweight and its gauge
    fused_bytes = 3 * n * esize + 5 * n * 8 + 4 * a.hidden * 8
    # the harness's pass (fast.FUSED_BACKEND: on CUDA the Triton "regs" kernel where it fits)
    backend = fast.FUSED_BACKEND
    _, t_h0 = once(lambda: exact_outputs_fused(inp), a.device)
    # which pass ran: the Triton one where it fits, unless it failed (then Inductor's, with a warning)
    which = "Triton, regs" if backend == "triton" and fast.triton_pass_fits(inp) and \
        ("triton",) + fast._key(inp) not in fast._FAILED else "Inductor"
    t_h = timed(lambda: exact_outputs_fused(inp), a.device, repeat=a.repeat)
    t_hd = device_ms(lambda: exact_outputs_fused(inp)) if a.device.startswith("cuda") else float("nan")
    print(f"THE HARNESS'S PASS, exact_outputs_fused (backend {backend}: {which}; wall over {a.repeat} calls): "
          f"{t_h * 1e3:.3f} ms = "
          f"{100 * floor_s / t_h:.1f}% of the floor; kernels alone {t_hd:.3f} ms = {100 * floor_s * 1e3 / t_hd:.1f}% "
          f"(first call {t_h0:.1f} s; minimal fused traffic {fused_bytes / 1e9:.2f} GB -> "
          f"{100 * fused_bytes / bw / t_h:.0f}% of copy bandwidth); against the issue's nominal 4.3 TB/s "
          f"({floor_bytes / 4.3e12 * 1e3:.3f} ms): {100 * floor_bytes / 4.3e12 / t_h:.1f}% wall, "
          f"{100 * floor_bytes / 4.3e9 / t_hd:.1f}% kernels")
    fast.FUSED_BACKEND = "inductor"          # below: Inductor's pass, its settings one by one
    default_table = fast.FUSED_SIGMOID_TABLE
    fast.FUSED_SIGMOID_TABLE = "off"         # first with an exp per element, then the table modes
    _, t_compile = once(lambda: exact_outputs_fused(inp), a.device)
    t_fused = timed(lambda: exact_outputs_fused(inp), a.device)
    # what Inductor's two kernels do move: its row kernel reads the inputs in each of its two loops,
    # the dweight column sums read them once more (the sigmoid table's reads, from L2, not counted)
    own_bytes = fused_bytes + 2 * 3 * n * esize

    def traffic(t):      # the minimal and the modelled traffic against copy bandwidth
        return (f"minimal fused traffic {fused_bytes / 1e9:.2f} GB -> {100 * fused_bytes / bw / t:.0f}%, "
                f"its own {own_bytes / 1e9:.2f} GB -> {100 * own_bytes / bw / t:.0f}% of copy bandwidth")
    if a.device.startswith("cuda"):
        t_fd = device_ms(lambda: exact_outputs_fused(inp))
        print(f"exact_outputs_fused, table {fast.FUSED_SIGMOID_TABLE}: kernels alone {t_fd:.3f} ms a call "
              f"= {100 * floor_s * 1e3 / t_fd:.1f}% of the floor")
    print(f"exact_outputs_fused (torch.compile): {t_fused * 1e3:.3f} ms = {100 * floor_s / t_fused:.1f}% of the floor, "
          f"{t_ref / t_fused:.1f}x eager (first call incl. compile {t_compile:.1f} s; {traffic(t_fused)})")
    for mode in ("all", "columns") if has_sigmoid_table(inp.gate.dtype) else ():
        fast.FUSED_SIGMOID_TABLE = mode      # the same pass reading sigmoid from a table instead
        _, t_c0 = once(lambda: exact_outputs_fused(inp), a.device)
        t_tab = timed(lambda: exact_outputs_fused(inp), a.device)
        if a.device.startswith("cuda"):
            t_td = device_ms(lambda: exact_outputs_fused(inp))
            print(f"  table {mode}: kernels alone {t_td:.3f} ms = {100 * floor_s * 1e3 / t_td:.1f}% of the floor")
        where = "everywhere" if mode == "all" else "in the dweight column sums only"
        print(f"  (the pass above computes sigmoid with an exp per element; reading it from a table of the "
              f"{a.dtype} gate's 65536 values {where}: {t_tab * 1e3:.3f} ms = {100 * floor_s / t_tab:.1f}% "
              f"of the floor, compile {t_c0:.1f} s; {traffic(t_tab)})")
    default_row_sums = fast.FUSED_ROW_SUMS
    for mode in ("off", "columns") if has_sigmoid_table(inp.gate.dtype) else ("off",):
        fast.FUSED_SIGMOID_TABLE, fast.FUSED_ROW_SUMS = mode, "raw"   # dx's row sums from the raw products
        _, t_c1 = once(lambda: exact_outputs_fused(inp), a.device)
        t_raw = timed(lambda: exact_outputs_fused(inp), a.device)
        if a.device.startswith("cuda"):
            t_rd = device_ms(lambda: exact_outputs_fused(inp))
            print(f"  raw row sums, table {mode}: kernels alone {t_rd:.3f} ms = {100 * floor_s * 1e3 / t_rd:.1f}% "
                  f"of the floor")
        print(f"  (dx's two row sums as r mean(dn g x), r mean(|dn g x|) — one loop for all three row sums; "
              f"table {mode}): {t_raw * 1e3:.3f} ms = {100 * floor_s / t_raw:.1f}% of the floor, compile {t_c1:.1f} s; "
              f"{traffic(t_raw)})")
        if a.profile and a.device.startswith("cuda"):
            kernel_times(inp, a.device)
    fast.FUSED_ROW_SUMS = default_row_sums
    fast.FUSED_SIGMOID_TABLE = default_table         # Inductor's pass as the harness runs it where Triton's does not fit
    if a.profile and a.device.startswith("cuda"):
        kernel_times(inp, a.device)
    if a.triton:
        from harness.references.triton_reference import blocks_launch, exact_outputs_triton, launch_shape, rows_launch
        vf, gf = exact_outputs_fused(inp)        # Inductor's: the Triton passes checked against it
        bnd0 = float64_error_bound(inp)
        # (layout, launch overrides, sigmoid table): the blocks layout's default, other launch shapes
        # (run 10b: fewer warps did better), then the strips layout
        variants = [("blocks", {}, False), ("blocks", {}, True)] + \
            [("blocks", dict(rows_per_block=rb, chunk=ch, warps=nw, reverse=rev), False)
             for rb, ch, nw, rev in ((8, 256, 4, False), (8, 256, 4, True), (8, 256, 2, True), (16, 256, 4, True),
                                     (8, 512, 4, True), (16, 128, 2, True), (32, 128, 4, True), (8, 256, 8, True),
                                     (4, 256, 2, True),
                                     # no spills, more warps an SM by ptxas (bench/triton-registers-run10.txt)
                                     (8, 128, 16, True), (8, 64, 8, True), (8, 32, 4, True))] + \
            [("strips", {}, True)] + \
            [("rows", dict(prefetch=pf, reconvert=rc, warps=nw, evict=ev, maxnreg=mr, **extra), tab)
             for pf, rc, nw, ev, mr, tab, extra in (
                 (True, False, 16, "", None, True, {}), (True, True, 16, "", None, True, {}),
                 (False, False, 16, "", None, True, {}), (False, True, 16, "", None, True, {}),
                 (True, False, 16, "", 128, True, {}), (True, True, 16, "", 128, True, {}),
                 (True, True, 16, "evict_first", 128, True, {}), (True, True, 32, "", 64, True, {}),
                 (True, True, 8, "", None, True, {}), (True, True, 8, "", None, True, {"programs": 264}),
                 (True, True, 16, "", 128, False, {}), (True, True, 16, "evict_first", 128, False, {}))]
        variants += [("stream", dict(rows_per_block=rb, chunk=ch, warps=nw, evict=ev), tab)
                     for rb, ch, nw, tab, ev in ((16, 1024, 8, False, ""), (16, 1024, 8, True, ""),
                                                 (16, 1024, 8, (True, False), ""), (16, 1024, 8, (False, True), ""),
                                                 (16, 2048, 16, False, ""), (16, 512, 4, False, ""),
                                                 (8, 1024, 8, False, ""), (32, 1024, 8, False, ""),
                                                 (16, 1024, 8, False, "evict_first"),
                                                 (16, 1024, 8, (True, False), "evict_first"),
                                                 (64, 1024, 8, False, ""), (16, 4096, 16, False, ""),
                                                 (16, 1024, 4, False, ""), (16, 256, 2, False, ""))] + \
            [("stream", dict(rows_per_block=rb, chunk=ch, warps=nw, evict=ev, partials=pt), tab)
             for rb, ch, nw, tab, ev, pt in ((16, 1024, 8, False, "evict_first", False),
                                             (16, 1024, 8, True, "evict_first", False),
                                             (16, 2048, 16, False, "evict_first", True),
                                             (32, 1024, 8, False, "evict_first", True),
                                             (16, 1024, 8, (False, True), "evict_first", True))]
        variants += [("pair", dict(rows_per_block=rb, chunk=ch, warps=nw, partials=pt), tab)
                     for rb, ch, nw, pt, tab in ((1, 1024, 8, False, False), (1, 2048, 16, False, False),
                                                 (1, 512, 4, False, False), (1, 2048, 8, False, False),
                                                 (1, 4096, 16, False, False), (4, 512, 8, True, False),
                                                 (8, 512, 8, True, False), (8, 256, 8, True, False),
                                                 (16, 256, 8, True, False), (8, 1024, 16, True, False),
                                                 (4, 1024, 8, True, False), (16, 512, 16, True, False),
                                                 (8, 512, 8, True, True), (8, 256, 4, True, False),
                                                 (2, 1024, 8, True, False), (8, 128, 4, True, False))]
        # sweep: the stream's row sums, then the outputs column tile by column tile (dweight in registers)
        variants += [("sweep", dict(rows_per_block=rb, chunk=ch, warps=nw, evict=ev), tab)
                     for rb, ch, nw, tab, ev in ((8, 1024, 8, True, "evict_first"), (8, 512, 8, True, "evict_first"),
                                                 (8, 256, 8, True, "evict_first"), (8, 1024, 16, True, "evict_first"),
                                                 (4, 512, 8, True, "evict_first"), (16, 512, 8, True, "evict_first"),
                                                 (4, 1024, 8, True, "evict_first"), (16, 1024, 8, True, "evict_first"),
                                                 (32, 512, 8, True, "evict_first"), (8, 512, 4, True, "evict_first"),
                                                 (8, 512, 8, (True, False), "evict_first"),
                                                 (8, 512, 8, False, "evict_first"), (8, 512, 8, True, ""))] + \
            [("sweep", dict(rows_per_block=rb, chunk=ch, warps=nw, evict="evict_first", partials=False, row_major=rm), True)
             for rb, ch, nw, rm in ((8, 1024, 8, False), (8, 1024, 8, True), (4, 512, 8, False), (4, 512, 8, True),
                                    (16, 1024, 8, True), (2, 1024, 8, False))] + \
            [("stream", dict(rows_per_block=16, chunk=1024, warps=8, evict="evict_first", partials=False), True)]
        # smem (Gluon): stream's order, persistent programs, the dweight partial row in shared memory
        variants += [("smem", dict(chunk=ch, warps=nw, programs=pr, evict=ev), tab)
                     for ch, nw, pr, tab, ev in ((1024, 8, 264, True, "evict_first"), (512, 8, 396, True, "evict_first"),
                                                 (512, 8, 264, True, "evict_first"), (1024, 16, 132, True, "evict_first"),
                                                 (2048, 16, 132, True, "evict_first"), (512, 4, 396, True, "evict_first"),
                                                 (1024, 8, 264, (True, False), "evict_first"),
                                                 (1024, 8, 264, False, "evict_first"), (1024, 8, 264, True, ""),
                                                 (1024, 8, 528, True, "evict_first"))]
        # regs: stream's order, persistent programs, the dweight partial row in registers (a tuple of steps)
        variants += [("regs", dict(chunk=ch, warps=nw, programs=pr, evict=ev), tab)
                     for ch, nw, pr, tab, ev in ((1024, 16, 132, True, "evict_first"), (512, 16, 132, True, "evict_first"),
                                                 (1024, 16, 264, True, "evict_first"),
                                                 (1024, 16, 132, (True, False), "evict_first"),
                                                 (1024, 16, 132, False, "evict_first"), (1024, 16, 132, True, ""),
                                                 (2048, 16, 132, True, "evict_first"), (1024, 32, 132, True, "evict_first"),
                                                 (512, 8, 132, True, "evict_first"))]
        variants = [v for v in variants if v[0] in a.layouts.split(",")]
        for layout, kw, tab in variants:
            if layout == "blocks":
                rb, ch, nw = blocks_launch(a.tokens, a.hidden, kw.get("rows_per_block"), kw.get("chunk"), kw.get("warps"))
                shape = (f"blocks of {rb} rows, {ch} columns a step, {nw} warps, second pass "
                         f"{'last chunk first' if kw.get('reverse', True) else 'in order'}")
            elif layout == "pair":
                shape = (f"Inductor-style pair of loops, {kw['rows_per_block']} rows x {kw['chunk']} columns, "
                         f"{kw['warps']} warps"
                         f"{'' if kw.get('partials', True) else ', NO dweight partials (timing diagnostic)'}")
                rb = kw["rows_per_block"]
            elif layout == "stream":
                shape = (f"row stream, {kw['rows_per_block']} rows a program one at a time, {kw['chunk']} columns, "
                         f"{kw['warps']} warps, stores {kw['evict'] or 'default'}"
                         f"{'' if kw.get('partials', True) else ', NO dweight partials (timing diagnostic)'}")
                rb = kw["rows_per_block"]
            elif layout == "sweep":
                shape = (f"sweep, {kw['rows_per_block']} rows a program: sums row by row, outputs "
                         f"{'ROW BY ROW' if kw.get('row_major') else 'tile by tile down the rows'}, {kw['chunk']} "
                         f"columns, {kw['warps']} warps, stores {kw['evict'] or 'default'}"
                         f"{'' if kw.get('partials', True) else ', NO dweight (timing diagnostic)'}")
                rb = kw["rows_per_block"]
            elif layout == "smem":
                shape = (f"smem (Gluon), {kw['programs']} persistent programs, one row at a time, {kw['chunk']} "
                         f"columns, {kw['warps']} warps, dweight partial row in shared memory, "
                         f"stores {kw['evict'] or 'default'}")
            elif layout == "regs":
                shape = (f"regs, {kw['programs']} persistent programs, one row at a time, {kw['chunk']} columns, "
                         f"{kw['warps']} warps, dweight partial row in registers, stores {kw['evict'] or 'default'}")
            elif layout == "rows":
                hp, nprog, nw = rows_launch(a.tokens, a.hidden, inp.x.device, kw.get("programs"), kw.get("warps"))
                shape = (f"persistent rows, {nprog} programs of {nw} warps, prefetch {kw['prefetch']}, "
                         f"reconvert {kw['reconvert']}, stores {kw['evict'] or 'default'}, maxnreg {kw['maxnreg']}")
            else:
                cfg = launch_shape(a.tokens, a.hidden, kw.get("rows"), kw.get("strip"))
                shape = f"row sums, then {cfg[1]}-row x {cfg[3]}-column strips, {cfg[2]} rows a step"
            if a.only and not any(o in shape for o in a.only.split("|")):
                continue
            run = lambda: exact_outputs_triton(inp, layout=layout, table=tab, **kw)
            try:
                _, t_c3 = once(run, a.device)
            except Exception as err:          # one variant failing to compile: report it, go on
                print(f"exact_outputs_triton ({shape}): failed: {type(err).__name__}: {str(err)[:300]}")
                continue
            t_tri = timed(run, a.device)
            t_dev = device_ms(run) if a.device.startswith("cuda") else float("nan")
            # outputs poisoned with NaN for the check: a fresh torch.empty may reuse the previous
            # variant's block, whose correct values would hide elements this one never wrote
            vt, _ = exact_outputs_triton(inp, layout=layout, table=tab, poison=True, **kw)
            agree = all(bool(torch.all((vt[k] - vf[k]).abs() <= 2 * bnd0[k] * gf[k] + 1e-300))
                        for k in ("y", "dx", "dgate", "dweight"))
            # blocks and strips read the inputs twice (blocks also write and read 2 partial rows a
            # block); rows reads them once
            tri_bytes = fused_bytes + (0 if layout == "rows" else 3 * n * esize) + \
                (2 * 2 * 8 * n // rb if layout in ("blocks", "stream", "pair", "sweep") and kw.get("partials", True) else 0)
            has = has_sigmoid_table(inp.gate.dtype)
            sig = (f"sigmoid: sums {'table' if tab[0] and has else 'exp'}, outputs {'table' if tab[1] and has else 'exp'}"
                   if isinstance(tab, tuple) else f"sigmoid {'table' if tab and has_sigmoid_table(inp.gate.dtype) else 'exp'}")
            print(f"exact_outputs_triton ({shape}, {sig}): "
                  f"{t_tri * 1e3:.3f} ms = {100 * floor_s / t_tri:.1f}% of the floor; kernels alone {t_dev:.3f} ms "
                  f"= {100 * floor_s * 1e3 / t_dev:.1f}% "
                  f"(first call incl. JIT {t_c3:.1f} s; its own traffic {100 * tri_bytes / bw / t_tri:.0f}% "
                  f"of copy bandwidth; agrees with the fused pass: {agree})")
            del vt
        if "hybrid" in a.layouts.split(","):
            hybrid(inp, a.device, floor_s, vf, gf, bnd0)
        del vf, gf
    if a.tune:
        from torch._inductor import config as ic
        ic.coordinate_descent_tuning = True
        fast._COMPILED.clear()
        torch._dynamo.reset()
        _, t_c2 = once(lambda: exact_outputs_fused(inp), a.device)
        t_tuned = timed(lambda: exact_outputs_fused(inp), a.device)
        print(f"exact_outputs_fused (coordinate_descent_tuning, table {fast.FUSED_SIGMOID_TABLE}): "
              f"{t_tuned * 1e3:.3f} ms = {100 * floor_s / t_tuned:.1f}% of the floor (compile {t_c2:.1f} s)")
        if a.profile and a.device.startswith("cuda"):
            kernel_times(inp, a.device)
        ic.coordinate_descent_tuning = False
    fast.FUSED_BACKEND = backend             # below: as the harness
    values, gauges = exact_outputs_fused(inp)
    bnd = float64_error_bound(inp)
    fmt0 = fmt_of(a.dtype)
    for out in ("y", "dx"):
        b = bnd[out] * gauges[out]
        t_m = timed(lambda: undecided(values[out], b, fmt0), a.device)
        t_mf = timed(lambda: undecided_fast(values[out], b, fmt0), a.device)
        t_r = timed(lambda: round_to(values[out], fmt0), a.device)
        same = bool(torch.equal(undecided(values[out], b, fmt0), undecided_fast(values[out], b, fmt0)))
        print(f"  undecided mask {out} ({a.dtype}): eager {t_m * 1e3:.2f} ms, fused {t_mf * 1e3:.2f} ms "
              f"({t_m / t_mf:.1f}x, identical: {same}); golden round_to alone {t_r * 1e3:.2f} ms")
    del values, gauges
    # Share of the reference stage spent in mpmath: a full build (the harness's pass on a big CUDA
    # case: Inductor's, exact_outputs_fused) + certification of every output.
    refs, t_build = once(lambda: build(inp), a.device)
    refs, t_build = once(lambda: build(inp), a.device)      # again, compiled
    t_cert = t_mp = 0.0
    for out, fmt in (("y", a.dtype), ("dx", a.dtype), ("dgate", a.dtype), ("dweight", a.dtype)):
        c, dt = once(lambda: refs.certified(out, fmt_of(fmt)), a.device)
        t_cert += dt
        t_mp += c.mp_seconds
        print(f"  certify {out}: {c.flagged} undecided, {c.certified} by mpmath, {c.uncertified} left, {dt * 1e3:.1f} ms")
    total = t_build + t_cert
    print(f"reference stage (build {1e3 * t_build:.1f} ms) {1e3 * total:.1f} ms: certification (undecided masks + mpmath) "
          f"{100 * t_cert / total:.0f}%, mpmath alone {100 * t_mp / total:.1f}%")


if __name__ == "__main__":
    main()
