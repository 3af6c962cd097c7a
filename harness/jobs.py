"""`harness run --jobs N`: the sweep split into N shard processes (`--shard K/N`, `--shard-by`
passed on) run at once, their results merged in suite order.

Why processes: most of a GPU sweep's time is the implementations' own compiles (Inductor, Triton)
and autotuning for each new shape, which are CPU-bound and serial within one process. Each worker
writes its own results under OUT/jobs/K-of-N/ (results.csv, timing.csv, log.txt), so a worker that
dies loses nothing already written and `--resume` picks up there."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from cases.case import Case
from harness.impls.base import Implementation
from reports.results_io import read_results, write_results


def child_argv(args, device: str, k: int, n: int, out: Path) -> list[str]:
    """The `harness run` command line of worker k of n (the parent's options, one shard)."""
    argv = [sys.executable, "-m", "harness", "run"]
    for spec in args.impl:
        argv += ["--impl", spec]
    argv += ["--cases", args.cases, "--device", device, "--out", str(out), "--shard", f"{k}/{n}",
             "--shard-by", args.shard_by or "case", "--no-report"]
    if args.budgets:
        argv += ["--budgets", args.budgets]
    if args.golden:
        argv += ["--golden", args.golden]
    if args.resume:
        argv.append("--resume")
    return argv


def _child_env(n: int) -> dict:
    env = dict(os.environ)
    # one Inductor compile pool per worker would oversubscribe the cores n times over
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, (os.cpu_count() or 1) // n)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def run_jobs(args, device: str, cases: list[Case], impls: list[Implementation], out_dir: Path,
             log: Callable[[str], None]) -> tuple[pd.DataFrame, dict[str, float], list[int]]:
    """Run the shards, wait, merge. Returns the merged results (suite order), the stage timings
    summed over the workers ('wall' is this run's elapsed time) and the jobs that did not finish."""
    n = min(args.jobs, max(len(cases), 1))
    if args.shard_by == "shape":                             # no more workers than compile keys
        from harness.runner import compile_key
        n = min(n, len({compile_key(c) for c in cases}))
    t0 = time.time()
    procs = []
    for k in range(1, n + 1):
        d = out_dir / "jobs" / f"{k}-of-{n}"
        d.mkdir(parents=True, exist_ok=True)
        fh = open(d / "log.txt", "w")
        procs.append((k, d, fh, subprocess.Popen(child_argv(args, device, k, n, d), stdout=fh,
                                                 stderr=subprocess.STDOUT, env=_child_env(n))))
    log(f"harness: {n} jobs, logs in {out_dir / 'jobs'}/K-of-{n}/log.txt")
    frames, timings = [], {}
    for k, d, fh, p in procs:
        rc = p.wait()
        fh.close()
        log(f"harness: job {k}/{n} exit {rc} after {time.time() - t0:.1f} s")
        if rc not in (0, 1):
            log(f"harness: job {k}/{n} failed: {_last_line(d / 'log.txt')}")
        if (d / "results.csv").is_file():
            frames.append(read_results(d / "results.csv"))
        if (d / "timing.csv").is_file():
            for stage, sec in pd.read_csv(d / "timing.csv").itertuples(index=False):
                if stage != "wall":
                    timings[stage] = timings.get(stage, 0.0) + float(sec)
    timings["wall"] = time.time() - t0
    timings["jobs"] = n
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(df):
        order = {c.case_id: i for i, c in enumerate(cases)}
        rank = {i.name: j for j, i in enumerate(impls)}
        key = df["case_id"].map(order).fillna(len(order)) * (len(rank) + 1) + df["impl"].map(rank).fillna(len(rank))
        df = df.assign(_k=key).sort_values("_k", kind="stable").drop(columns="_k").reset_index(drop=True)
        write_results(out_dir / "results.csv", df)
    elif (out_dir / "results.csv").exists():
        (out_dir / "results.csv").unlink()
    failed = [k for k, _, _, p in procs if p.returncode not in (0, 1)]
    if failed:
        from harness.errors import UsageError
        if not len(df):
            raise UsageError(f"--jobs: every job failed (see {out_dir / 'jobs'})")
        log(f"harness: job(s) {', '.join(map(str, failed))} did not finish; their finished cases are "
            f"kept (rerun with --resume)")
    return df, timings, failed
