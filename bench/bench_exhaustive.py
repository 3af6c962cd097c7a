"""Time `harness exhaustive` as a user runs it, beside its inner sweep, for bf16 and fp16; one table.

    python3 bench/bench_exhaustive.py --device cuda --cli          # the issue-21 figures (one H200)
    python3 bench/bench_exhaustive.py --device cuda --cli --keep DIR   # ... and the warm run's files in DIR
    python3 bench/bench_exhaustive.py --device cpu --cli --x-range 0x3f80:0x3f90 --gate-range 0x3f00:0x4000

Per dtype:
  cli cold   `python -m harness exhaustive --dtype D --device DEV --out TMP` in a subprocess, start-up
             to exit, with fresh TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR (new temporary dirs);
  cli warm   the same command again with the same cache dirs (a second run);
  cli sweep  the sweep seconds the command itself printed (so start-up = whole - sweep);
  inner      run_exhaustive in this process after an untimed warm-up, with the parameters the CLI's
             own parser and `harness.exhaustive.run_params` resolve from the same arguments (default
             chunk, device, ranges): the bench cannot drift from the command's defaults.
The CLI rows run first, before this process touches the GPU. Targets (issue 21): whole command
<= 8 s warm and <= 15 s cold on one H200.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WARM_TARGET, COLD_TARGET = 8.0, 15.0


def cli_argv(dtype: str, device: str, out: str, x_range: str | None = None, gate_range: str | None = None) -> list[str]:
    """The command as a user types it (after `python -m harness`)."""
    argv = ["exhaustive", "--dtype", dtype, "--device", device, "--out", out]
    if x_range:
        argv += ["--x-range", x_range]
    if gate_range:
        argv += ["--gate-range", gate_range]
    return argv


def inner_params(argv: list[str]):
    """The run the CLI would make of `argv`: its own parser and defaults (run_params)."""
    from harness.cli import build_parser
    from harness.exhaustive import run_params
    return run_params(build_parser().parse_args(argv))


def time_cli(argv: list[str], env: dict) -> tuple[float, int, float | None, subprocess.CompletedProcess]:
    """Whole-command seconds, exit code, the sweep seconds it printed, the process."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "harness", *argv], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    m = re.search(r", ([0-9.]+) s for [0-9.e+]+ pairs", p.stdout)
    return wall, p.returncode, float(m.group(1)) if m else None, p


def cli_rows(dtype: str, a) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-exh-") as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(tmp, "triton"))
        row = {}
        for kind in ("cold", "warm"):
            out = os.path.join(tmp, f"out-{kind}")
            wall, rc, sweep, p = time_cli(cli_argv(dtype, a.device, out, a.x_range, a.gate_range), env)
            row[kind] = (wall, rc, sweep)
            print(f"bench_exhaustive: cli {kind} {dtype}: {wall:.2f} s, exit {rc}, sweep {sweep} s\n{p.stdout}"
                  f"{p.stderr[-2000:]}", file=sys.stderr, flush=True)
            if a.keep and kind == "warm":
                keep = Path(a.keep)
                keep.mkdir(parents=True, exist_ok=True)
                for name in ("results.csv", "histogram.csv", "worst.csv"):
                    if os.path.exists(os.path.join(out, name)):
                        shutil.copy(os.path.join(out, name), keep / f"{dtype}-{name}")
                (keep / f"{dtype}-summary.txt").write_text(p.stdout + p.stderr)
    return row


def inner_row(dtype: str, a) -> tuple[float, float, dict]:
    import torch

    from harness.exhaustive import run_exhaustive
    with tempfile.TemporaryDirectory() as tmp:
        p = inner_params(cli_argv(dtype, a.device, tmp, a.x_range, a.gate_range))
    kw = dict(dtype=p.dtype, impl=p.impl, device=p.device, x_range=p.x_range, gate_range=p.gate_range, dy=p.dy,
              chunk=p.chunk)
    t0 = time.perf_counter()
    run_exhaustive(**kw, max_x_tiles=1)                  # untimed warm-up: kernel, context, allocations
    print(f"bench_exhaustive: warm-up {dtype} {time.perf_counter() - t0:.2f} s", file=sys.stderr, flush=True)
    best = None
    for _ in range(a.repeat):
        if p.device == "cuda":
            torch.cuda.synchronize()
        res = run_exhaustive(**kw)
        if best is None or res.seconds < best.seconds:
            best = res
    pairs = best.n_x * sum(best.n_gate.values())
    return best.seconds, pairs, best.perf


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, choices=["cpu", "cuda"], help="default: cuda where available")
    ap.add_argument("--dtypes", "--dtype", dest="dtypes", default="bf16,fp16", help="comma-separated")
    ap.add_argument("--cli", action="store_true", help="also time the CLI command, cold and warm")
    ap.add_argument("--no-inner", action="store_true", help="skip the in-process sweep")
    ap.add_argument("--x-range")
    ap.add_argument("--gate-range")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", help="copy the warm CLI run's results, histogram, worst CSVs and output here")
    a = ap.parse_args()
    if a.device is None:
        import torch
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    dtypes = a.dtypes.split(",")
    cli = {d: cli_rows(d, a) for d in dtypes} if a.cli else {}
    inner = {d: inner_row(d, a) for d in dtypes} if not a.no_inner else {}

    def s(v):
        return "-" if v is None else f"{v:.2f}"
    head = (f"{'dtype':5s} {'device':6s} {'inner s':>8s} {'pairs':>10s} {'pairs/s':>9s} {'cli cold s':>10s} "
            f"{'(sweep)':>8s} {'cli warm s':>10s} {'(sweep)':>8s} {'exit':>4s}  targets")
    lines = [head]
    for d in dtypes:
        sec, pairs, perf = inner.get(d, (None, None, {}))
        cold, warm = cli.get(d, {}).get("cold"), cli.get(d, {}).get("warm")
        verdict = ""
        if cold and warm:
            verdict = (f"warm {'ok' if warm[0] <= WARM_TARGET else 'MISSED'} (<= {WARM_TARGET:g}), "
                       f"cold {'ok' if cold[0] <= COLD_TARGET else 'MISSED'} (<= {COLD_TARGET:g})")
        lines.append(f"{d:5s} {a.device:6s} {s(sec):>8s} {'-' if pairs is None else format(pairs, '.4g'):>10s} "
                     f"{'-' if not sec else format(pairs / sec, '.3g'):>9s} {s(cold and cold[0]):>10s} "
                     f"{s(cold and cold[2]):>8s} {s(warm and warm[0]):>10s} {s(warm and warm[2]):>8s} "
                     f"{'-' if not warm else str(warm[1]):>4s}  {verdict}")
        if perf:
            lines.append(f"      inner perf: {perf}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
