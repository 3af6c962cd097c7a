"""The sweep: every planned (case, implementation) pair through the pipeline (harness.pipeline:
isolated workers wherever the implementation can be sent to one), its rows appended to the run
directory's results.csv as each pair completes — so that an interrupted sweep keeps them — and
held here: the final results.csv is written from the rows the judges sent, never read back from
the file (which a plug-in could have written meanwhile).

--jobs N runs N workers at once; each takes the next work item (every case of one compile key, so
that each compile and autotuning happens once) as it finishes one, longest first
(harness.schedule); each
worker gets its share of the cores for OpenMP (--threads; passive waiting) and compiles and, with
--gpus, its own GPU. A pair that raises, dies or hangs becomes `error` rows and the sweep goes
on; a sweep that could not finish every planned pair says so (SweepResult.finished), and the
caller never exits 0 for it. --resume: harness.resume."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from harness.analysis.check import rows as result_rows
from harness.analysis.result import PairResult
from harness.cases.case import Case
from harness.impls.base import Implementation
from harness.pipeline.drive import Pipeline, isolated
from harness.pipeline.settings import Settings
from harness.reports.rundir import OUTPUTS as RUN_FILES
from harness.reports.rundir import PAIR, PAIR_TIMING, RESULTS, TIMING, RunDir, render_rows
from harness.resume import resume_rows
from harness.schedule import WorkQueue, compile_key, work_items
from harness.worker import DEFAULT_TIMEOUT, sweep_envs

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


def _suite_order(pairs: dict[tuple[str, str], str], cases: list[Case], impls: list[Implementation]) -> list[str]:
    """The pairs' lines in the suite's order: by case, then implementation (a name the plan does
    not hold after those it does, in the order found)."""
    order = {c.case_id: i for i, c in enumerate(cases)}
    rank = {i.name: j for j, i in enumerate(impls)}
    keys = sorted(pairs, key=lambda k: (order.get(k[0], len(order)), rank.get(k[1], len(rank))))
    return [pairs[k] for k in keys]


def run_sweep(sw: Sweep, progress: Callable[[int, int, str, list[dict]], None] | None = None,
              log: Callable[[str], None] | None = None) -> SweepResult:
    """Run the sweep; `progress(done, total, what, rows)` after each pair, `log(line)` for events.
    The caller holds the run directory's lock."""
    t0, m0 = time.time(), time.monotonic()
    rd = sw.rundir
    planned = {(c.case_id, i.name) for c in sw.cases for i in sw.impls}
    rd.clear([f for f in RUN_FILES if f not in (RESULTS, PAIR_TIMING)])      # an earlier run's report
    if sw.resume:
        kept = resume_rows(sw, log)
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
    # (case_id, impl) -> its rows' lines, what the judges sent (the kept pairs' as read): the
    # results, whatever the file says
    rendered: dict[tuple[str, str], str] = {}
    if len(kept):
        for key, rows in kept.groupby(PAIR, sort=False):
            rendered[key] = render_rows(rows.to_dict("records"))
    failed: list[BaseException] = []
    pipes: list[Pipeline] = []

    def record(r: PairResult) -> None:
        rows = result_rows(r)
        with lock:
            rendered[(r.case.case_id, r.impl.name)] = rd.append_pair(rows)
            rd.append_csv_row(PAIR_TIMING, {"case_id": r.case.case_id, "label": r.case.label, "impl": r.impl.name,
                                            "references": r.times.get("references", 0.0),
                                            "impl_seconds": r.times.get("impl", 0.0),
                                            "analysis": r.times.get("analysis", 0.0),
                                            "mpmath": r.times.get("mpmath", 0.0), "pair_seconds": r.pair_seconds},
                              PAIR_TIMING_COLUMNS)
            for stage, sec in r.times.items():
                key = f"impl:{r.impl.name}" if stage == "impl" else stage
                timings[key] = timings.get(key, 0.0) + sec
            state["done"] += 1
            if progress:
                progress(state["done"], total, f"{r.impl.name} {r.case.label}", rows)

    def pairs(items):
        for case, impls in items:
            for impl in impls:
                if failed:
                    return
                yield case, impl

    def inline(mine) -> None:
        pipe = Pipeline(sw.settings, "inline", sw.timeout, log=log)
        for r in pipe.run_many(pairs(mine)):
            record(r)

    def isolated_worker(k: int) -> None:
        pipe = Pipeline(sw.settings, "process", sw.timeout, env=envs[k], on_start=rd.note_worker, log=log)
        pipes.append(pipe)
        try:
            for r in pipe.run_many(pairs(pending.pairs())):
                if failed:                  # interrupted: the pair's end is the harness's doing
                    return
                record(r)
        except BaseException as e:            # a harness bug: stop, keep what is written
            failed.append(e)
        finally:
            pipe.close()

    process = all(isolated(i, sw.isolate) for i in sw.impls)
    pending = WorkQueue(work_items(todo))
    if not process:
        inline(todo)
    else:
        ts = [threading.Thread(target=isolated_worker, args=(k,), daemon=True) for k in range(jobs)]
        for t in ts:
            t.start()
        try:
            for t in ts:
                while t.is_alive():
                    t.join(0.2)
        except KeyboardInterrupt:
            failed.append(KeyboardInterrupt())
            for p in list(pipes):           # the threads see `failed` after their pair; stop them now
                p.close()
            for t in ts:
                t.join(10)
    if failed:
        raise failed[0]
    timings["wall"] = time.time() - t0
    timings["jobs"] = float(jobs)
    ready = [p.ready_at for p in pipes if p.ready_at is not None]
    timings["worker_start"] = min(ready) - m0 if ready else 0.0
    df = rd.write_rendered(_suite_order(rendered, sw.cases, sw.impls)) if rendered else kept
    got = set(zip(df["case_id"], df["impl"])) if len(df) else set()
    unfinished = sorted(planned - got)
    rd.write_frame(TIMING, pd.DataFrame(sorted(timings.items()), columns=["stage", "seconds"]))
    return SweepResult(df, len(planned), unfinished, timings)
