"""Speed beside accuracy, as a user gets it, and how each clock compares: `harness run` on
bench/suites/speed.toml (8192x4096 bf16, both orders) for torch, torch-compile and fla
(FusedRMSNormGated), whose results.csv holds the GPU time of a forward + backward (gpu_seconds,
by CUDA-graph replay or the profiler: gpu_method) and the host-inclusive wall time (impl_seconds);
and the same call timed here, outside the harness, three ways:

  wall      a call's wall time, synchronised, median of REPEATS (host-inclusive: Python, launches)
  profiler  torch.profiler's summed device time (kernels, copies, fills) over REPEATS calls, per call
  graph     the call captured in a CUDA graph, replayed REPLAYS times between two events, per replay

The harness's GPU time must agree with the same kind of timing here (its method's) within 10 %.
bench/gpu.sh's `speed` stage runs this three times, in three processes, for the spread.

    python3 bench/bench_speed.py [--out DIR] [--impl NAME ...]"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

IMPLS = ["fla", "torch-compile", "torch"]
SUITE = str(Path(__file__).parent / "suites" / "speed.toml")
REPEATS = 100          # wall-timed and profiled calls
REPLAYS = 100          # graph replays per window (three windows, median)


def module_and_inputs(name: str, case):
    import torch

    from harness.cases.generate import generate
    from harness.impls.registry import resolve
    impl = resolve(name)
    inp = generate(case).to("cuda")
    m = impl.factory(inp.hidden, eps=inp.eps, zero_centered_gamma=False, dtype=inp.weight.dtype, device="cuda",
                     **impl.case_kwargs(case))
    with torch.no_grad():
        m.weight.copy_(inp.weight)
    return m, inp


def three_ways(name: str, case) -> dict[str, float]:
    """Seconds per forward + backward: wall, profiler, graph (NaN where the graph cannot be captured)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    m, inp = module_and_inputs(name, case)

    def fresh():
        m.weight.grad = None
        return inp.x.clone().requires_grad_(True), inp.gate.clone().requires_grad_(True)

    def call(x, g):
        m(x, g).backward(inp.dy)
    t_end = time.perf_counter() + 0.5              # warm: first calls compile and autotune, then 0.5 s more
    for k in range(1_000_000):
        call(*fresh())
        torch.cuda.synchronize()
        if k >= 3 and time.perf_counter() > t_end:
            break
    walls = []
    for _ in range(REPEATS):
        x, g = fresh()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call(x, g)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
    ins = [fresh() for _ in range(REPEATS)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for x, g in ins:
            call(x, g)
        torch.cuda.synchronize()
    del ins
    kernels = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA) / 1e6
    graph = float("nan")
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                call(*fresh())
        torch.cuda.current_stream().wait_stream(side)
        x, g = fresh()
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            call(x, g)
        windows = []
        for _ in range(3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(REPLAYS):
                gr.replay()
            b.record()
            b.synchronize()
            windows.append(a.elapsed_time(b) / 1e3 / REPLAYS)
        graph = statistics.median(windows)
    except Exception as e:                           # noqa: BLE001 — reported, not hidden
        print(f"{name}: graph capture failed: {type(e).__name__}: {str(e)[:200]}")
    return {"wall": statistics.median(walls), "profiler": kernels / REPEATS, "graph": graph}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/speed")
    ap.add_argument("--impl", action="append")
    args = ap.parse_args()
    impls = args.impl or IMPLS
    cmd = [sys.executable, "-m", "harness", "run", "--cases", SUITE, "--device", "cuda", "--out", args.out,
           "--no-report"] + [a for i in impls for a in ("--impl", i)]
    t0 = time.perf_counter()
    rc = subprocess.run(cmd).returncode
    print(f"harness run on {SUITE}: exit {rc}, {time.perf_counter() - t0:.1f} s (whole command)")

    from harness.cases.suite import load_suite
    from harness.reports.rundir import read_results
    df = read_results(Path(args.out) / "results.csv")
    cases = {c.case_id: c for c in load_suite(SUITE).cases}
    print(f"{'impl':14s} {'order':10s} | harness: {'GPU ms':>7s} {'method':>8s} {'wall ms':>8s} {'% floor':>7s} | "
          f"here: {'graph':>7s} {'profiler':>8s} {'wall':>7s} | {'agree':>5s} {'y ULP (model)':>13s}")
    bad = 0
    for (impl, cid), g in df.groupby(["impl", "case_id"], sort=False):
        if (g["status"] == "skip").all():
            continue
        gpu, wall = float(g["gpu_seconds"].max()) * 1e3, float(g["impl_seconds"].max()) * 1e3
        method = str(g["gpu_method"].iloc[0]) if "gpu_method" in g else ""
        try:
            here = {k: v * 1e3 for k, v in three_ways(impl, cases[cid]).items()}
        except Exception as e:                     # noqa: BLE001 - reported, not hidden
            print(f"{impl}: timing here failed: {type(e).__name__}: {e}")
            here = {"wall": float("nan"), "profiler": float("nan"), "graph": float("nan")}
        same_kind = here.get(method, float("nan"))
        agree = abs(gpu - same_kind) <= 0.10 * same_kind
        bad += not agree
        y = g[g["reference"].str.startswith("model") & (g["output"] == "y")]["max_ulp"].max()
        print(f"{impl:14s} {'norm first' if cases[cid].norm_before_gate else 'gate first':10s} | "
              f"{gpu:16.3f} {method:>8s} {wall:8.3f} {100 * float(g['floor_fraction'].max()):6.1f}% | "
              f"{here['graph']:13.3f} {here['profiler']:8.3f} {here['wall']:7.3f} | {str(agree):>5s} {y:13.4g}")
    print(f"harness GPU times agreeing with this bench's timing of the same kind within 10 %: "
          f"{'all' if not bad else f'{bad} do not'}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
