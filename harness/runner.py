"""The sweep: every planned (case, implementation) pair through isolated workers (harness.worker),
its rows appended to the run directory's results.csv as each pair completes.

--jobs N runs N workers at once; each takes the next compile key (every case of one hidden size and
dtype mix: each compile and autotuning happens once), costliest first, as it finishes one; each
worker gets its share of the cores for OpenMP (--threads; passive waiting) and compiles and, with
--gpus, its own GPU. A pair that raises, dies or hangs becomes `error` rows and the sweep goes
on; a sweep that could not finish every planned pair says so (SweepResult.finished), and the
caller never exits 0 for it. --resume keeps the finished pairs (an `error` pair is finished: a
case that kills its worker is not retried forever) of this invocation's cases, implementations and
device, recomputes their verdicts under the current budgets, drops every other row, and runs the
rest."""
from __future__ import annotations

import math
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from harness.analysis.check import references_of, status_rows
from harness.cases.case import Case
from harness.cases.generate import act_format
from harness.impls.base import Implementation
from harness.pair import VERSION, PairRunner, Settings, replay_command
from harness.references.exact import OUTPUTS
from harness.references.metrics import get
from harness.reports.rundir import OUTPUTS as RUN_FILES
from harness.reports.rundir import PAIR_TIMING, RESULTS, TIMING, RunDir
from harness.reports.schema import SCHEMA_VERSION
from harness.worker import DEFAULT_TIMEOUT, Worker, picklable, sweep_envs

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
    threads: int | None = None          # OpenMP threads per worker (None: cores / jobs)
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
    """The cases whose compiles and autotuning belong together: hidden size, dtypes and op variant
    (a group size or the other order is another graph, and another kernel specialisation)."""
    return (case.shape[-1], case.dtype, case.gate_dtype, case.weight_dtype, case.group, case.norm_before_gate)


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


# A case this big is a work item of its own: its references and certification (an fp32 2048x4096
# case: ~25 s a pair warm on the H200) outweigh a compile, and a key holding several of them was the
# critical path of `full` (64 s of an 84 s warm sweep).
BIG_CASE = 1 << 22


def key_queue(todo: list) -> "queue.SimpleQueue":
    """The pairs to run as work items — every case of one compile key (each compile and autotuning
    once), except that a big case (BIG_CASE elements) is an item of its own — costliest first: each
    worker takes the next item as it finishes one (longest processing time first, dynamically), so
    first calls of different keys overlap across the workers and no worker is left with a long tail
    that a static split guessed wrong. Cost: KEY_COST_IN_CASES a key's first calls, 1 + elements/2^20
    a pair."""
    def pair_cost(case, impls):
        return len(impls) * (1 + math.prod(case.shape) / (1 << 20))
    items: dict[tuple, list] = {}
    for case, impls in todo:
        key = compile_key(case) + ((case.case_id,) if math.prod(case.shape) >= BIG_CASE else ())
        items.setdefault(key, []).append((case, impls))
    cost = {k: KEY_COST_IN_CASES * max(len(i) for _, i in g) + sum(pair_cost(c, i) for c, i in g)
            for k, g in items.items()}
    q: queue.SimpleQueue = queue.SimpleQueue()
    for key in sorted(items, key=lambda k: (-cost[k], repr(k))):
        q.put(items[key])
    return q


def _next_pairs(q: "queue.SimpleQueue"):
    """The (case, impls) of key after key, until no key is left."""
    while True:
        try:
            group = q.get_nowait()
        except queue.Empty:
            return
        yield from group


def expected_checks(impls: list[Implementation], models=()) -> dict[str, set]:
    """Per implementation, the (output, reference) of every row one of its pairs has."""
    return {i.name: {(o, ref) for o in OUTPUTS for ref, *_ in references_of(i, models)} for i in impls}


# harness.analysis.compare's over-budget reason: "OUTPUT METRIC error VALUE > budget BUDGET ..."
_BUDGET_FAIL = re.compile(r"^\S+ \S+ error \S+ > budget ")


def _budget_reason(reason: str) -> bool:
    """A fail that is about a budget, a baseline or repeatability (recomputed on resume), not about
    the output itself (invalid, non-finite, against a NaN reference: those stay fails)."""
    return bool(_BUDGET_FAIL.match(reason)) or reason.startswith(("regressed: ", "second call raised ")) \
        or " not repeatable: " in reason


def regate(df: pd.DataFrame, cases: dict[str, Case], impls: dict[str, Implementation], s: Settings) -> pd.DataFrame:
    """Finished rows' verdicts under the current budgets (and --require-repeatable): budget, metric
    and status recomputed from the measured values, their replay commands this invocation's;
    errors, skips and failures that are not about a budget stay as they were."""
    from harness.analysis.check import budget_for
    from harness.references.formats import fmt_of
    df = df.copy()
    for col in ("budget_metric", "budget_source", "reason", "replay", "suite"):
        if col in df.columns:
            df[col] = df[col].astype(object)
    for i, r in df.iterrows():
        case, impl = cases[r["case_id"]], impls[r["impl"]]
        spec = s.impl_specs.get(impl.name, impl.spec or impl.name)
        df.at[i, "replay"] = replay_command(case, spec, s.suite_ref, s.device, s.override_path)
        df.at[i, "suite"] = s.suite_ref
        reason = str(r.get("reason", "") or "")
        if r["status"] not in ("pass", "fail") or (r["status"] == "fail" and not _budget_reason(reason)):
            continue
        act = act_format(case, impl.act_follows)
        kind = str(r["reference"]).split(":")[0]
        b = budget_for(case, impl, r["output"], kind, fmt_of(r["out_dtype"]), act, s.overrides, s.override_path)
        value = float(r.get(get(b.metric).column, math.nan))
        if not (b.metric == r.get("budget_metric") and b.value == float(r.get("budget", math.nan))):
            if "count_over" in df.columns:
                df.at[i, "count_over"] = math.nan          # counted against the old budget
        df.at[i, "budget_metric"], df.at[i, "budget"], df.at[i, "budget_source"] = b.metric, b.value, b.source
        status, why = "pass", ""
        if not value <= b.value:                            # NaN fails
            status, why = "fail", (f"{r['output']} {b.metric} error {value:.4g} > budget {b.value:.4g} "
                                   f"at [{r.get('worst_index', '')}] vs {r['reference']}")
        elif s.require_repeatable and r.get("repeatable") in (False, "False"):
            status, why = "fail", (f"{r['output']} not repeatable: {int(r.get('differing_elements', 0) or 0)} "
                                   f"elements differ between two calls on the same inputs (--require-repeatable)")
        df.at[i, "status"], df.at[i, "reason"] = status, why
    return df


def resume_rows(sw: "Sweep") -> pd.DataFrame:
    """What --resume keeps: complete pairs of this invocation's cases and implementations, measured
    on its device with this schema, re-gated. results.csv and pair-timing.csv are rewritten to it."""
    rd = sw.rundir
    kept = rd.repair_for_resume(expected_checks(sw.impls, sw.settings.models))
    if len(kept):
        planned = {(c.case_id, i.name) for c in sw.cases for i in sw.impls}
        same = [(c, i) in planned for c, i in zip(kept["case_id"], kept["impl"])]
        same = pd.Series(same, index=kept.index) & (kept["device"].astype(str) == sw.settings.device)
        if "math" in kept.columns:      # measured at the math class this run judges at
            same &= kept["math"].astype(str) == kept["impl"].map({i.name: i.math.label for i in sw.impls})
        if "schema_version" in kept.columns:
            same &= pd.to_numeric(kept["schema_version"], errors="coerce") == SCHEMA_VERSION
        if "harness_version" in kept.columns:
            same &= kept["harness_version"].astype(str) == VERSION
        bad = {k for k, ok in zip(zip(kept["case_id"], kept["impl"]), same) if not ok}
        kept = kept[[k not in bad for k in zip(kept["case_id"], kept["impl"])]]
    if len(kept):
        kept = regate(kept, {c.case_id: c for c in sw.cases}, {i.name: i for i in sw.impls}, sw.settings)
        rd.write_results(kept)
        rd.keep_pair_timing(set(zip(kept["case_id"], kept["impl"])))
    else:
        rd.clear([RESULTS, PAIR_TIMING])
    return kept.reset_index(drop=True)


def _suite_order(df: pd.DataFrame, cases: list[Case], impls: list[Implementation]) -> pd.DataFrame:
    if df.empty:
        return df
    order = {c.case_id: i for i, c in enumerate(cases)}
    rank = {i.name: j for j, i in enumerate(impls)}
    key = df["case_id"].map(order).fillna(len(order)) * (len(rank) + 1) + df["impl"].map(rank).fillna(len(rank))
    return df.assign(_k=key).sort_values("_k", kind="stable").drop(columns="_k").reset_index(drop=True)


def run_sweep(sw: Sweep, progress: Callable[[int, int, str, list[dict]], None] | None = None,
              log: Callable[[str], None] | None = None) -> SweepResult:
    """Run the sweep; `progress(done, total, what, rows)` after each pair, `log(line)` for events.
    The caller holds the run directory's lock."""
    t0 = time.time()
    rd = sw.rundir
    planned = {(c.case_id, i.name) for c in sw.cases for i in sw.impls}
    rd.clear([f for f in RUN_FILES if f not in (RESULTS, PAIR_TIMING)])      # an earlier run's report
    if sw.resume:
        kept = resume_rows(sw)
    else:
        rd.clear([RESULTS, PAIR_TIMING])
        kept = pd.DataFrame()
    done = set(zip(kept["case_id"], kept["impl"])) if len(kept) else set()
    todo = [(c, [i for i in sw.impls if (c.case_id, i.name) not in done]) for c in sw.cases]
    todo = [(c, impls) for c, impls in todo if impls]
    total = sum(len(i) for _, i in todo)
    jobs = max(1, min(sw.jobs, len({compile_key(c) for c, _ in todo}) or 1))
    # the compile pool's share from the --jobs asked for (not the workers used), as the workers
    # the command line started early (harness.worker.prespawn) have it
    envs = sweep_envs(sw.jobs, sw.threads, sw.gpus)          # the first workers were started with these
    timings: dict[str, float] = {}
    lock = threading.Lock()
    state = {"done": 0}
    failed: list[BaseException] = []
    workers: list[Worker] = []

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

    def error_rows(case: Case, impl: Implementation, why: str) -> list[dict]:
        act = act_format(case, impl.act_follows).name
        rows = status_rows(case, impl, sw.settings.device, act, "error", why, sw.settings.models)
        spec = sw.settings.impl_specs.get(impl.name, impl.spec or impl.name)
        cmd = replay_command(case, spec, sw.settings.suite_ref, sw.settings.device, sw.settings.override_path) \
            if spec else ""
        for r in rows:
            r.update(replay=cmd, suite=sw.settings.suite_ref, harness_version=VERSION)
        if log:
            log(f"harness: {impl.name} {case.case_id} [{case.label}]: {why}")
        return rows

    def inline(mine) -> None:
        runner = PairRunner(sw.settings)
        for case, impls in mine:
            for impl in impls:
                try:
                    rows, times = runner.run(case, impl)
                except KeyboardInterrupt:
                    raise
                except BaseException as e:      # SystemExit too: an implementation's exit is an error row
                    rows, times = error_rows(case, impl, f"the pair raised {type(e).__name__}: {e}"), {}
                record(case, impl, rows, times)

    def isolated(k: int) -> None:
        worker = Worker(sw.settings, envs[k], on_start=rd.note_worker, log=log)
        workers.append(worker)
        try:
            for case, impls in _next_pairs(pending):
                for impl in impls:
                    if failed:
                        return
                    rows, times, why = worker.run(case, impl, sw.timeout)
                    if failed:                  # interrupted: the pair's end is the harness's doing
                        return
                    if rows is None:
                        rows = error_rows(case, impl, why)
                    elif sw.settings.device.startswith("cuda") and any(r["status"] == "error" for r in rows):
                        worker.stop()       # a CUDA error poisons the context: the next pair gets a new one
                    record(case, impl, rows, times)
        except BaseException as e:            # a harness bug: stop, keep what is written
            failed.append(e)
        finally:
            worker.close()

    process = sw.isolate == "process" or (sw.isolate == "auto" and all(i.spec or picklable(i) for i in sw.impls))
    pending = key_queue(todo)
    if not process:
        inline(todo)
    else:
        ts = [threading.Thread(target=isolated, args=(k,), daemon=True) for k in range(jobs)]
        for t in ts:
            t.start()
        try:
            for t in ts:
                while t.is_alive():
                    t.join(0.2)
        except KeyboardInterrupt:
            failed.append(KeyboardInterrupt())
            for w in list(workers):         # the threads see `failed` after their pair; stop them now
                w.stop()
            for t in ts:
                t.join(10)
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
