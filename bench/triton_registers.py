"""Registers and spills of the hand-written Triton reference kernel (references/triton_reference.py,
blocks layout) per launch shape, compiled for an H100/H200 (sm_90a) without a GPU: Triton lowers
the kernel to PTX, and the ptxas that ships with Triton reports what each thread holds.

    python bench/triton_registers.py [--run12]    (needs Triton installed; no GPU)

--run12: the stream, sweep, regs and smem layouts of run 12 instead of the blocks layout.

Why: on the H200 the blocks kernel ran at half the speed of Inductor's pass (bench/RESULTS.md,
run 10), and a thread's registers bound how many warps an SM keeps in flight (65536 registers an
SM: 255 registers a thread leave 256 threads, 8 warps)."""
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile

from harness.references import triton_reference as tr

PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
OUTPUTS = ("y_ptr", "dgate_ptr", "dx_ptr", "dgate_g_ptr", "dx_g_ptr", "dw_part_ptr", "dwg_part_ptr")
SIGNATURE = {"x_ptr": "*bf16", "g_ptr": "*bf16", "dy_ptr": "*bf16", "w_ptr": "*bf16", "eps_ptr": "*fp64",
             "tab_ptr": "*fp64", **{k: "*fp64" for k in OUTPUTS}, "T": "i32", "H": "i32",
             "ZC": "constexpr", "RB": "constexpr", "CH": "constexpr", "TAB": "constexpr", "REV": "constexpr"}
# What the JIT specializes at launch for 8192x4096 (torch's allocations, T and H multiples of 16):
# 16-byte divisibility, without which Triton neither vectorizes the loads and stores nor allocates
# registers as it does on the device.
ATTRS = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(SIGNATURE.items())
         if kind.startswith("*") or name in ("T", "H")}
# (rows a block, columns a step, warps, sigmoid table): run 10's measured shapes, then smaller ones
SHAPES = [(8, 256, 8, False), (8, 256, 8, True), (8, 256, 4, False), (8, 128, 2, False), (16, 256, 4, False),
          (8, 512, 4, False), (4, 256, 2, False), (8, 256, 16, False), (8, 128, 8, False), (8, 128, 16, False),
          (8, 64, 8, False), (16, 64, 16, False), (8, 32, 4, False)]


def registers(rb: int, ch: int, warps: int, table: bool) -> tuple[int, int, int, str]:
    """(registers a thread, spill stores and loads in bytes, the global memory instructions) of the
    blocks kernel at this shape."""
    src = ASTSource(fn=tr._row_blocks, signature=SIGNATURE, attrs=ATTRS,
                    constexprs={"ZC": False, "RB": rb, "CH": ch, "TAB": table, "REV": True})
    kernel = compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    regs, st, ld, _ = _ptxas(kernel)
    memory = " ".join(sorted(set(re.findall(r"(?:ld|st)\.global[.\w]*", kernel.asm["ptx"]))))
    return regs, st, ld, memory


def main():
    print("rows  columns  warps  sigmoid  elements/thread  registers  spill stores/loads (B)  "
          "warps an SM (registers)  global loads and stores")
    for rb, ch, warps, table in SHAPES:
        regs, st, ld, memory = registers(rb, ch, warps, table)
        per_sm = min(64, 65536 // (regs * 32 * warps) * warps)
        print(f"{rb:4d}  {ch:7d}  {warps:5d}  {'table' if table else 'exp':7s}  {rb * ch // (32 * warps):15d}  "
              f"{regs:9d}  {st:>10d} / {ld:<10d}  {per_sm:23d}  {memory}")


def _ptxas(kernel) -> tuple[int, int, int, int]:
    """(registers a thread, spill stores, spill loads, bar.sync instructions) of a compiled kernel."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(kernel.asm["ptx"])
    try:
        log = subprocess.run([PTXAS, "-v", "-arch=sm_90a", f.name, "-o", os.devnull],
                             capture_output=True, text=True, check=True).stderr
    finally:
        os.unlink(f.name)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return (int(re.search(r"Used (\d+) registers", log).group(1)), int(spill.group(1)), int(spill.group(2)),
            kernel.asm["ptx"].count("bar.sync"))


def row_layouts():
    """Run 12's layouts, as bench_reference.py launches them at 8192x4096 (H = 4096 a constant):
    stream, sweep and regs (Triton), smem (Gluon)."""
    head = {"x_ptr": "*bf16", "g_ptr": "*bf16", "dy_ptr": "*bf16", "w_ptr": "*bf16", "eps_ptr": "*fp64",
            "tab_ptr": "*fp64"}
    outs = {k: "*fp64" for k in OUTPUTS}
    print("layout  columns  warps  sigmoid  registers  spill stores/loads (B)  bar.sync  warps an SM (registers)")
    for layout, ch, warps, table in (("stream", 1024, 8, True), ("sweep", 1024, 8, True), ("sweep", 512, 8, True),
                                     ("regs", 1024, 16, True), ("regs", 1024, 16, False), ("regs", 512, 16, True),
                                     ("regs", 2048, 16, True), ("regs", 512, 8, True), ("smem", 1024, 8, True),
                                     ("smem", 512, 8, True)):
        consts = {"H": 4096, "ZC": False, "CH": ch, "TAB1": table, "TAB2": table, "EV": "evict_first"}
        if layout == "stream":
            fn, sig, consts = tr._row_stream, {**head, **outs}, {**consts, "RB": 16, "PART": True}
        elif layout == "sweep":
            fn, sig, consts = tr._row_sweep, {**head, "stats_ptr": "*fp64", **outs}, \
                {**consts, "RB": 8, "PART": True, "ROWMAJOR": False}
        elif layout == "regs":
            fn, sig, consts = tr._rows_regs, {**head, **outs}, {**consts, "PS": 2 * 4096}
        else:
            fn, sig, consts = tr._rows_smem, {**head, **outs}, {**consts, "NW": warps}
        sig = {**sig, "T": "i32", **{k: "constexpr" for k in consts}}
        attrs = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(sig.items())
                 if kind.startswith("*") or name == "T"}
        if layout == "smem":
            from triton.experimental.gluon._runtime import GluonASTSource as source
        else:
            source = ASTSource
        kernel = compile(source(fn=fn, signature=sig, attrs=attrs, constexprs=consts),
                         target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        regs, st, ld, bars = _ptxas(kernel)
        print(f"{layout:6s}  {ch:7d}  {warps:5d}  {'table' if table else 'exp':7s}  {regs:9d}  {st:>10d} / {ld:<10d}  "
              f"{bars:8d}  {min(64, 65536 // (regs * 32 * warps) * warps):23d}")


if __name__ == "__main__":
    import sys
    row_layouts() if "--run12" in sys.argv else main()
