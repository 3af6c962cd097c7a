"""`harness run --jobs N`: the sweep split into N shard processes (`--shard K/N`, `--shard-by`
passed on) run at once, their results merged in suite order.

Why processes: most of a GPU sweep's time is the implementations' own compiles (Inductor, Triton)
and autotuning for each new shape, which are CPU-bound and serial within one process. Each worker
writes its own results under OUT/jobs/K-of-N/ (results.csv, timing.csv, pair-timing.csv, log.txt), so a worker that
dies loses nothing already written and `--resume` picks up there. All workers share the device:
on one GPU, N CUDA contexts and N cases' references must fit in its memory (an out-of-memory case
becomes an `error` row, as in one process)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from harness.cases.case import Case
from harness.errors import UsageError
from harness.impls.base import Implementation
from harness.reports.results_io import read_results, write_results


# On an H200 (bench/RESULTS.md), `full` x 3 CUDA implementations with 16 jobs took 293 s split by
# case (run 6: workers compiled and autotuned the same keys) and 254 s split by shape (run 8a; the
# same machine type and versions, another session: not a controlled comparison).
DEFAULT_SHARD_BY = "shape"


def child_argv(args, device: str, k: int, n: int, out: Path) -> list[str]:
    """The `harness run` command line of worker k of n (the parent's options, one shard)."""
    argv = [sys.executable, "-m", "harness", "run"]
    for spec in args.impl:
        argv += ["--impl", spec]
    argv += ["--cases", args.cases, "--device", device, "--out", str(out), "--shard", f"{k}/{n}",
             "--shard-by", args.shard_by or DEFAULT_SHARD_BY, "--no-report"]
    if args.budgets:
        argv += ["--budgets", args.budgets]
    if args.golden:
        argv += ["--golden", args.golden]
    if args.resume:
        argv.append("--resume")
    return argv


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))       # what this process may use (cgroups, taskset)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _child_env(n: int) -> dict:
    env = dict(os.environ)
    # a compile pool or an OpenMP team of all the cores in each of n workers would oversubscribe
    # the cores n times over (the workers' CPU work: inputs, certification, Inductor compiles)
    share = str(max(1, _cores() // n))
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", share)
    env.setdefault("OMP_NUM_THREADS", share)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _prepare(out_dir: Path, n: int, by: str, resume: bool) -> None:
    """A fresh run starts from nothing (no earlier worker's results can be merged as current) and
    records its split in OUT/jobs/split.txt; a resumed one must use that same split (another would
    give a worker other cases than those its results.csv holds, and the merge would duplicate)."""
    jobs = out_dir / "jobs"
    split = f"{n} jobs, by {by}"
    if not resume:
        shutil.rmtree(jobs, ignore_errors=True)
        (out_dir / "results.csv").unlink(missing_ok=True)
        (out_dir / "pair-timing.csv").unlink(missing_ok=True)
        jobs.mkdir(parents=True)
        (jobs / "split.txt").write_text(split + "\n")
        return
    earlier = sorted(p.name for p in jobs.iterdir() if p.is_dir()) if jobs.is_dir() else []
    if not earlier:
        if (out_dir / "results.csv").exists():
            raise UsageError(f"--resume --jobs: {out_dir} holds a single-process run; resume it without --jobs")
        jobs.mkdir(parents=True, exist_ok=True)
        (jobs / "split.txt").write_text(split + "\n")
        return
    try:
        was = (jobs / "split.txt").read_text().strip()
    except OSError:                     # a run from before split.txt: the merge keeps each worker's
        return                          # own shard only, so another split costs time, not correctness
    if was != split:
        raise UsageError(f"--resume --jobs: {jobs} holds a run of {was}, not {split}; resume with the same "
                         f"--jobs and --shard-by, or start afresh")


def _complete(df: pd.DataFrame | None, expected: set[tuple[str, str]]) -> bool:
    """Whether a worker's results hold every (case, implementation) pair of its shard in full (a
    worker that dies of an uncaught exception also exits 1, like one whose checks failed)."""
    if not expected:
        return True
    if df is None or not len(df):
        return False
    from harness.runner import ROWS_PER_PAIR
    counts = df.groupby(["case_id", "impl"]).size()
    return all(counts.get(pair, 0) >= ROWS_PER_PAIR for pair in expected)


def read_or_none(read, path: Path, log: Callable[[str], None]):
    """A worker's (or shard's) file, or None where it is missing or damaged (killed mid-write): one
    line says so, and the other parts are still merged."""
    if not path.is_file():
        return None
    try:
        return read(path)
    except Exception as e:
        log(f"harness: {path} unreadable, left out ({type(e).__name__}: {e})")
        return None


def _own_pairs(df: pd.DataFrame | None, expected: set[tuple[str, str]]) -> pd.DataFrame | None:
    """The rows of a worker's file for the pairs of its own shard. A resumed run whose cases moved
    between shards (the suite changed; the by-shape split deals keys by cost over all cases) leaves
    rows for pairs another worker now owns and reruns: merged too, they would be duplicates."""
    if df is None or not len(df) or not {"case_id", "impl"} <= set(df.columns):
        return df
    mine = pd.Series(list(zip(df["case_id"].astype(str), df["impl"].astype(str))), index=df.index).isin(expected)
    return df[mine]


def _as_they_finish(procs: list[tuple]):
    """(k, dir, process, exit code) in the order the workers finish (so the logged times are theirs)."""
    pending = list(procs)
    while pending:
        done = [(k, d, p) for k, d, p in pending if p.poll() is not None]
        for item in done:
            pending.remove(item)
            yield (*item, item[2].returncode)
        if not done:
            time.sleep(0.1)


def run_jobs(args, device: str, cases: list[Case], impls: list[Implementation], out_dir: Path,
             log: Callable[[str], None]) -> tuple[pd.DataFrame, dict[str, float], list[int]]:
    """Run the shards, wait, merge. Returns the merged results (suite order), the stage timings
    summed over the workers ('wall' is this run's elapsed time) and the jobs that did not finish."""
    from harness.runner import PAIR_TIMING, combine_timings, compile_key, read_pair_timings, read_timings, shard
    by = args.shard_by or DEFAULT_SHARD_BY
    n = min(args.jobs, max(len(cases), 1))
    if by == "shape":                                        # no more workers than compile keys
        n = min(n, len({compile_key(c) for c in cases}))
    _prepare(out_dir, n, by, args.resume)
    t0 = time.time()
    procs = []
    try:
        for k in range(1, n + 1):
            d = out_dir / "jobs" / f"{k}-of-{n}"
            d.mkdir(parents=True, exist_ok=True)
            with open(d / "log.txt", "a" if args.resume else "w") as fh:   # the child holds its own copy
                procs.append((k, d, subprocess.Popen(child_argv(args, device, k, n, d), stdout=fh,
                                                     stderr=subprocess.STDOUT, env=_child_env(n))))
    except OSError as e:
        for _, _, p in procs:
            p.kill()
        raise UsageError(f"--jobs: cannot start a worker ({e})") from None
    log(f"harness: {n} jobs, logs in {out_dir / 'jobs'}/K-of-{n}/log.txt")
    frames, pair_times, parts, failed = [], [], [], []
    for k, d, p, rc in _as_they_finish(procs):
        log(f"harness: job {k}/{n} exit {rc} after {time.time() - t0:.1f} s")
        expected = {(c.case_id, i.name) for c in shard(cases, k, n, by=by) for i in impls}
        part = _own_pairs(read_or_none(read_results, d / "results.csv", log), expected)
        if part is not None:
            frames.append(part)
        if rc not in (0, 1) or not _complete(part, expected):
            failed.append(k)
            log(f"harness: job {k}/{n} did not finish its cases: {_last_line(d / 'log.txt')}")
        pt = _own_pairs(read_or_none(read_pair_timings, d / PAIR_TIMING, log), expected)
        if pt is not None:
            pair_times.append(pt.assign(job=k))
        parts.append(read_or_none(read_timings, d / "timing.csv", log) or {})
    timings = combine_timings(parts)
    timings["wall"] = time.time() - t0                       # this run's, not the slowest worker's
    timings["jobs"] = n
    if pair_times:
        pd.concat(pair_times, ignore_index=True).sort_values("job", kind="stable").to_csv(out_dir / PAIR_TIMING, index=False)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(df):
        order = {c.case_id: i for i, c in enumerate(cases)}
        rank = {i.name: j for j, i in enumerate(impls)}
        key = df["case_id"].map(order).fillna(len(order)) * (len(rank) + 1) + df["impl"].map(rank).fillna(len(rank))
        df = df.assign(_k=key).sort_values("_k", kind="stable").drop(columns="_k").reset_index(drop=True)
        write_results(out_dir / "results.csv", df)
    if failed:
        if not len(df):
            raise UsageError(f"--jobs: no job finished a case (see {out_dir / 'jobs'})")
        log(f"harness: job(s) {', '.join(map(str, failed))} did not finish; their finished cases are "
            f"kept (rerun with --resume)")
    return df, timings, failed
