"""The sweep: every planned (case, implementation) pair through isolated workers (harness.worker),
its rows appended to the run directory's results.csv as each pair completes.

--jobs N runs N workers at once, every case of one compile key (hidden size and dtypes) on one
worker so that each compile and autotuning happens once; each worker gets cores / N threads and,
with --devices, its own GPU. A pair that raises, dies or hangs becomes `error` rows and the sweep goes
on; a sweep that could not finish every planned pair says so (SweepResult.finished), and the
caller never exits 0 for it. --resume keeps the finished pairs of this invocation's cases and
implementations, recomputes their verdicts under the current budgets, and runs the rest."""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from harness.analysis.check import REFERENCE_KINDS, status_rows
from harness.cases.case import Case
from harness.cases.generate import act_format
from harness.impls.base import Implementation
from harness.pair import PairRunner, Settings
from harness.references.exact import OUTPUTS
from harness.references.metrics import get
from harness.reports.rundir import PAIR_TIMING, TIMING, RunDir
from harness.worker import DEFAULT_TIMEOUT, Worker, picklable

def rows_per_pair(sw: "Sweep") -> int:
    return len(OUTPUTS) * (len(REFERENCE_KINDS) + len(sw.settings.models))
PAIR_TIMING_COLUMNS = ["case_id", "label", "impl", "references", "impl_seconds", "analysis", "mpmath", "pair_seconds"]


@dataclass
class Sweep:
    cases: list[Case]
    impls: list[Implementation]
    settings: Settings
    rundir: RunDir
    resume: bool = False
    jobs: int = 1
    timeout: float = DEFAULT_TIMEOUT
    isolate: str = "auto"               # "process", "inline" (no worker), or "auto": process where possible
    threads: int | None = None          # OpenMP threads per worker (None: 1)
    gpus: tuple[int, ...] = ()          # pin worker k to GPU gpus[k % len(gpus)]


@dataclass
class SweepResult:
    results: pd.DataFrame               # this invocation's pairs, in suite order
    planned: int
    unfinished: list[tuple[str, str]]   # (case_id, impl) pairs with no rows
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return not self.unfinished


def compile_key(case: Case) -> tuple:
    """The cases whose compiles and autotuning belong together: hidden size and dtypes."""
    return (case.shape[-1], case.dtype, case.gate_dtype, case.weight_dtype)


# What a compile key costs next to each of its cases, for balancing: fitted over `full` on an H200
# (docs/performance.md: ~28-31 s a key for its first calls, 0.2-1.9 s a case).
KEY_COST_IN_CASES = 16


def shard(cases: list[Case], k: int, n: int, by: str = "case") -> list[Case]:
    """Deterministic 1/n of the cases, k in 1..n: disjoint and complete over k, suite order kept.
    by="case": by case id. by="shape": every case of one compile_key in one shard, keys dealt
    costliest first to the least loaded shard (a key costs KEY_COST_IN_CASES + its cases)."""
    if by == "case":
        return [c for c in cases if int(c.case_id, 16) % n == k - 1]
    groups: dict[tuple, int] = {}
    for c in cases:
        groups[compile_key(c)] = groups.get(compile_key(c), KEY_COST_IN_CASES) + 1
    load, owner = [0] * n, {}
    for key, cost in sorted(groups.items(), key=lambda kv: (-kv[1], repr(kv[0]))):
        j = min(range(n), key=lambda i: (load[i], i))
        owner[key] = j
        load[j] += cost
    return [c for c in cases if owner[compile_key(c)] == k - 1]


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_env(threads: int, compile_threads: int, gpu: int | None) -> dict:
    """A worker's environment: its OpenMP team (one thread unless asked: on a shared CI box a team of
    every core spins against the other processes — quick ran 3-4x slower with the default), its
    share of the cores for Inductor's compile pool, and its GPU."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(compile_threads))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


def regate(df: pd.DataFrame, cases: dict[str, Case], impls: dict[str, Implementation], s: Settings) -> pd.DataFrame:
    """Finished rows' verdicts under the current budgets: budget, metric and status recomputed from
    the measured values; errors, skips and failures that are not about a budget stay as they were."""
    from harness.analysis.check import budget_for
    from harness.references.formats import fmt_of
    df = df.copy()
    for i, r in df.iterrows():
        if r["status"] not in ("pass", "fail"):
            continue
        reason = str(r.get("reason", "") or "")
        if r["status"] == "fail" and " error " not in reason and not reason.startswith("regressed: "):
            continue                                   # an invalid output, non-finite, NaN reference
        case, impl = cases[r["case_id"]], impls[r["impl"]]
        act = act_format(case, impl.act_follows)
        kind = str(r["reference"]).split(":")[0]
        b = budget_for(case, impl, r["output"], kind, fmt_of(r["out_dtype"]), act, s.overrides, s.override_path)
        value = float(r.get(get(b.metric).column, math.nan))
        ok = value <= b.value
        df.at[i, "budget_metric"], df.at[i, "budget"], df.at[i, "budget_source"] = b.metric, b.value, b.source
        df.at[i, "status"] = "pass" if ok else "fail"
        df.at[i, "reason"] = "" if ok else (f"{r['output']} {b.metric} error {value:.4g} > budget {b.value:.4g} "
                                            f"at [{r.get('worst_index', '')}] vs {r['reference']}")
    return df


def _suite_order(df: pd.DataFrame, cases: list[Case], impls: list[Implementation]) -> pd.DataFrame:
    if df.empty:
        return df
    order = {c.case_id: i for i, c in enumerate(cases)}
    rank = {i.name: j for j, i in enumerate(impls)}
    key = df["case_id"].map(order).fillna(len(order)) * (len(rank) + 1) + df["impl"].map(rank).fillna(len(rank))
    return df.assign(_k=key).sort_values("_k", kind="stable").drop(columns="_k").reset_index(drop=True)


def run_sweep(sw: Sweep, progress: Callable[[int, int, str, list[dict]], None] | None = None,
              log: Callable[[str], None] | None = None) -> SweepResult:
    """Run the sweep; `progress(done, total, what, rows)` after each pair, `log(line)` for events."""
    t0 = time.time()
    rd = sw.rundir
    planned = {(c.case_id, i.name) for c in sw.cases for i in sw.impls}
    kept = pd.DataFrame()
    if sw.resume:
        kept = rd.repair_for_resume(rows_per_pair(sw))
        if len(kept):
            mine = pd.Series(list(zip(kept["case_id"], kept["impl"])), index=kept.index).isin(planned)
            kept = regate(kept[mine], {c.case_id: c for c in sw.cases}, {i.name: i for i in sw.impls}, sw.settings)
        rd.write_results(kept) if len(kept) else rd.results.unlink(missing_ok=True)
    else:
        rd.results.unlink(missing_ok=True)
        rd.file(PAIR_TIMING).unlink(missing_ok=True)
    done = set(zip(kept["case_id"], kept["impl"])) if len(kept) else set()
    todo = [(c, [i for i in sw.impls if (c.case_id, i.name) not in done]) for c in sw.cases]
    todo = [(c, impls) for c, impls in todo if impls]
    total = sum(len(i) for _, i in todo)
    jobs = max(1, min(sw.jobs, len({compile_key(c) for c, _ in todo}) or 1))
    threads, compile_threads = sw.threads or 1, max(1, cores() // jobs)
    timings: dict[str, float] = {}
    lock = threading.Lock()
    state = {"done": 0}
    failed: list[BaseException] = []

    def record(case: Case, impl: Implementation, rows: list[dict], times: dict) -> None:
        with lock:
            rd.append_pair(rows)
            rd.append_csv_row(PAIR_TIMING, {"case_id": case.case_id, "label": case.label, "impl": impl.name,
                                            "references": times.get("references", 0.0),
                                            "impl_seconds": times.get("impl", 0.0),
                                            "analysis": times.get("analysis", 0.0), "mpmath": times.get("mpmath", 0.0),
                                            "pair_seconds": float(rows[0].get("pair_seconds", 0.0) or 0.0)},
                              PAIR_TIMING_COLUMNS)
            for stage, sec in times.items():
                key = f"impl:{impl.name}" if stage == "impl" else stage
                timings[key] = timings.get(key, 0.0) + sec
            state["done"] += 1
            if progress:
                progress(state["done"], total, f"{impl.name} {case.label}", rows)

    def inline(mine) -> None:
        runner = PairRunner(sw.settings)
        for case, impls in mine:
            for impl in impls:
                record(case, impl, *runner.run(case, impl))

    def isolated(mine, k: int) -> None:
        gpu = sw.gpus[k % len(sw.gpus)] if sw.gpus else None
        worker = Worker(sw.settings, worker_env(threads, compile_threads, gpu))
        try:
            for case, impls in mine:
                for impl in impls:
                    rows, times, why = worker.run(case, impl, sw.timeout)
                    if rows is None:
                        act = act_format(case, impl.act_follows).name
                        rows = status_rows(case, impl, sw.settings.device, act, "error", why, sw.settings.models)
                        for r in rows:
                            r["replay"] = ""
                        if log:
                            log(f"harness: {impl.name} {case.case_id} [{case.label}]: {why}")
                    record(case, impl, rows, times)
        except BaseException as e:            # a harness bug or an interrupt: stop, keep what is written
            failed.append(e)
        finally:
            worker.close()

    process = sw.isolate == "process" or (sw.isolate == "auto" and all(i.spec or picklable(i) for i in sw.impls))
    parts = [[(c, i) for c, i in todo if c in set(shard([c for c, _ in todo], k, jobs, "shape"))]
             for k in range(1, jobs + 1)] if jobs > 1 else [todo]
    if not process:
        inline(todo)
    else:
        ts = [threading.Thread(target=isolated, args=(p, k), daemon=True) for k, p in enumerate(parts)]
        for t in ts:
            t.start()
        try:
            for t in ts:
                while t.is_alive():
                    t.join(0.2)
        except KeyboardInterrupt:
            failed.append(KeyboardInterrupt())
    if failed:
        raise failed[0]
    timings["wall"] = time.time() - t0
    timings["jobs"] = float(jobs)
    df = rd.read_results() if rd.results.exists() else pd.DataFrame()
    if len(df):
        df = _suite_order(df, sw.cases, sw.impls)
        rd.write_results(df)
    got = set(zip(df["case_id"], df["impl"])) if len(df) else set()
    unfinished = sorted(planned - got)
    rd.write_frame(TIMING, pd.DataFrame(sorted(timings.items()), columns=["stage", "seconds"]))
    return SweepResult(df, len(planned), unfinished, timings)

