"""Time `harness exhaustive` for a dtype / range / device: prints pairs/s and seconds.

    python bench/bench_exhaustive.py --dtype bf16 --device cuda --chunk 67108864          # full set
    python bench/bench_exhaustive.py --dtype bf16 --device cpu --gate-range 0x3f00:0x3f40
    python bench/bench_exhaustive.py ... --compile 1     # torch.compile the fused per-tile function
    python bench/bench_exhaustive.py ... --reference     # the original per-tile path, for comparison
    python bench/bench_exhaustive.py ... --profile-ops   # torch.profiler: operator calls per tile

A warm-up comes first and is not timed: the first x tile of every gate block of the same ranges and
chunk (the exact static tile shapes the timed run compiles for; CUDA context, kernels).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from harness import exhaustive as E  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--impl", default="torch")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--x-range")
    p.add_argument("--gate-range")
    p.add_argument("--dy", type=float, default=1.0)
    p.add_argument("--chunk", type=int, default=1 << 26)
    p.add_argument("--compile", type=int, choices=[0, 1], default=None,
                   help="fuse the elementwise part (default: on for cuda)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--summary", action="store_true", help="also print the result table")
    p.add_argument("--reference", action="store_true", help="time the original (reference) path")
    p.add_argument("--profile-ops", action="store_true",
                   help="profile one run (torch.profiler, CPU activity): operator calls per tile")
    a = p.parse_args()
    xr = E.parse_range(a.x_range, "--x-range")
    gr = E.parse_range(a.gate_range, "--gate-range")
    comp = None if a.compile is None else bool(a.compile)
    # warm-up: both regimes, the 1-D (dn) and 2-D tiles, compile. A failure of the CUDA / compiled
    # path falls back (compile off, then a printed error) instead of a traceback.
    def go(comp, **kw):
        return E.run_exhaustive(a.dtype, a.impl, a.device, xr, gr, a.dy, a.chunk, compile=comp,
                                reference=a.reference, **kw)

    t = time.perf_counter()
    warm = dict(max_x_tiles=1) if not a.reference else {}
    wxr = xr if not a.reference else (0x3f80, 0x3f90)
    wgr = gr if not a.reference else (0xc2a0, 0xc2c0)
    wchunk = a.chunk if not a.reference else 1 << 12
    try:
        E.run_exhaustive(a.dtype, a.impl, a.device, wxr, wgr, a.dy, wchunk, compile=comp, reference=a.reference, **warm)
    except Exception as e:                               # noqa: BLE001
        print(f"bench_exhaustive: WARNING: warm-up failed ({type(e).__name__}: {e}); retrying with compile off",
              file=sys.stderr)
        comp = False
        E.run_exhaustive(a.dtype, a.impl, a.device, wxr, wgr, a.dy, wchunk, compile=comp, reference=a.reference, **warm)
    print(f"warm-up {time.perf_counter() - t:.2f} s", file=sys.stderr)
    final = None
    for _ in range(a.repeat):
        if a.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        kw = dict(progress=lambda s: print(s, file=sys.stderr, flush=True))
        try:
            res = go(comp, **kw)
        except Exception as e:                           # noqa: BLE001
            if comp is False:
                raise
            print(f"bench_exhaustive: WARNING: run failed ({type(e).__name__}: {e}); retrying with compile off",
                  file=sys.stderr)
            comp = False
            res = go(comp, **kw)
        pairs = res.n_x * sum(res.n_gate.values())
        mem = f", peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if a.device == "cuda" else ""
        path = "reference" if a.reference else "fused"
        final = (f"bench_exhaustive {a.dtype} {a.impl} {a.device} {path} chunk={a.chunk} compile={comp}: "
                 f"{pairs:.4g} pairs in {res.seconds:.3f} s = {pairs / res.seconds:.4g} pairs/s{mem}"
                 + (f" {res.perf}" if res.perf else ""))
        print(final, file=sys.stderr)
    if a.profile_ops:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            res = go(comp)
        ev = prof.key_averages()
        ops = sum(e.count for e in ev if e.key.startswith("aten::"))
        n_t = res.perf.get("tiles") or -(-res.n_x // max(1, a.chunk // max(res.n_gate.values())))
        top = sorted((e for e in ev if e.key.startswith("aten::")), key=lambda e: -e.count)[:8]
        print(f"profile: {ops} aten operator calls (nested included), ~{ops / max(n_t, 1):.0f} per tile over "
              f"{n_t} tiles; most called: " + ", ".join(f"{e.key} {e.count}" for e in top), file=sys.stderr)
    if a.summary:
        print(E.summary(res))
    print(f"RESULT {final}")                            # the single final line
    return 0


if __name__ == "__main__":
    sys.exit(main())
