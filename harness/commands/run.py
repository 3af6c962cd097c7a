"""`harness run`, `merge`, `report`."""
from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pandas as pd

from harness.api import Results, check_run_options, load_baseline, plan, run_plan
from harness.commands import EXIT_OK, Progress, err
from harness.commands.phases import Clock
from harness.commands.phases import line as phase_line
from harness.commands.phases import rows as phase_rows
from harness.commands.phases import share_line
from harness.pipeline.drive import isolated
from harness.commands.common import (check_output_file, finish, load_impls, nondeterminism, parse_gpus, parse_shard,
                                     timing_line)
from harness.environment import environment
from harness.references.errors import UsageError
from harness.reports.rundir import TIMING, RunDir, read_csv, read_results


def cmd_run(args) -> int:
    clock = Clock()
    if args.cases == "hypothesis":
        from harness.commands.explore import cmd_explore
        return cmd_explore(args)
    if args.shard_by and not args.shard:
        raise UsageError("--shard-by applies to --shard (--jobs always splits by shape)")
    for flag, value in (("--max-examples", args.max_examples), ("--seed", args.seed)):
        if value is not None:
            raise UsageError(f"{flag} applies to --cases hypothesis")
    check_output_file("--junit", args.junit)
    gpus = parse_gpus(args.gpus)
    check_run_options(args.jobs, args.timeout, args.threads, gpus)
    impls = load_impls(args.impl, args.timeout, args.device)
    p = plan(impls, args.cases, args.device, args.budgets, args.baseline, args.golden, args.reference_backend,
             parse_shard(args.shard), args.shard_by or "case", args.repeats, nondeterminism(args))
    rd = RunDir(args.out).create().check_outputs()
    preload_outputs(skip=("report",) if args.no_report else ())
    with rd.lock():                 # to the last report: a second run into --out fails at once
        err(f"harness: {len(p.cases)} cases x {len(p.impls)} implementation(s) "
            f"[{', '.join(f'{i.name} ({i.rounding.name}, {i.math.label})' for i in p.impls)}] on {p.settings.device}")
        clock.mark("sweep")
        env, show = [], Progress()
        # beside workers only: in this process it would compete with an inline pair's timed calls
        overlap = all(isolated(i, args.isolate) for i in p.impls)

        def progress(done: int, total: int, what: str, rows: list[dict]) -> None:
            if overlap and not env:    # the first pair is in, the workers have started: learn the environment meanwhile
                env.append(in_background(environment, p.settings.device, p.impls, args.reference_backend))
            show(done, total, what, rows)
        results = run_plan(p, args.out, resume=args.resume, jobs=args.jobs, timeout=args.timeout,
                           isolate=args.isolate, threads=args.threads, gpus=gpus, progress=progress, log=err)
        clock.mark("swept")
        err(timing_line(results.timings, [i.name for i in p.impls]))
        code = finish(results, Path(args.out), p.settings.device, p.impls, f"{p.suite}: {', '.join(args.impl)}",
                      args.junit, args.no_report, args.reference_backend, clock,
                      results_written=len(results.frame) > 0,           # the sweep wrote it
                      env=env[0].result() if env else None)
        clock.mark("end")
        record_phases(rd, clock, results.timings)
        return code


def record_phases(rd: RunDir, clock: Clock, timings: dict[str, float]) -> None:
    """The whole command's phases and process-seconds split: timing.csv's rows after the sweep's
    own, and one line on standard error."""
    phases = clock.phases(timings)
    rows = {**dict(sorted(timings.items())), **phase_rows(phases, timings)}
    rd.write_frame(TIMING, pd.DataFrame(list(rows.items()), columns=["stage", "seconds"]))
    err(phase_line(phases, timings))


def preload_outputs(skip: tuple[str, ...]) -> None:
    """The output writers' imports, loaded in a background thread while the sweep runs (the main
    process only waits on its workers then). A failure here is not reported here: the writers
    import the same modules (harness.reports.outputs.formats raises it again) and say why."""
    import threading

    from harness.reports.outputs import prepare_outputs

    def quietly():
        try:
            prepare_outputs(skip)
        except Exception:       # noqa: BLE001 — the real write raises it, with its context
            pass
    threading.Thread(target=quietly, name="preload-outputs", daemon=True).start()


def in_background(fn, *args) -> Future:
    """fn(*args) in a daemon thread, started now: its result, or what it raised, from the Future.
    For what the command needs after the sweep but can learn during it (the run's environment:
    installed distributions' metadata, git, the device's name: most of the write phase before),
    where the main process mostly waits on its workers (cmd_run starts it once the first pair is
    in: started with the sweep, it competed with the workers' own start)."""
    import threading
    future: Future = Future()

    def work():
        try:
            future.set_result(fn(*args))
        except BaseException as e:      # noqa: BLE001 — raised again by future.result(), in the command
            future.set_exception(e)
    threading.Thread(target=work, name=getattr(fn, "__name__", "background"), daemon=True).start()
    return future


def cmd_report(args) -> int:
    rd = RunDir(args.dir)
    if not rd.results.is_file():
        raise UsageError(f"report: {args.dir}: no results.csv")
    with rd.lock("report"):          # not while a sweep writes there: its files would be half of each
        return _report(rd, args)


def _report(rd: RunDir, args) -> int:
    from harness.gate import apply_baseline
    from harness.reports.outputs import RunData, write_outputs
    from harness.reports.summary import summarize
    df = read_results(rd.results)
    baseline = load_baseline(args.baseline)
    if baseline is not None:
        df = apply_baseline(df, baseline)
    r = Results(df)
    env = {}
    if rd.file(TIMING).is_file():
        try:
            t = dict(read_csv(rd.file(TIMING), text=("stage",)).itertuples(index=False))
            env["time"] = timing_line(t, list(dict.fromkeys(df["impl"]))).removeprefix("harness: time ")
            env["process-seconds"] = share_line(t)
            if "phase:total" in t:
                env["phases"] = phase_line({k.removeprefix("phase:"): v for k, v in t.items()
                                            if k.startswith("phase:")}, t).removeprefix("harness: ")
        except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
            pass
    write_outputs(rd.path, RunData(df, summarize(df), r.exit_code, rd.path.name, env, baseline))
    print(f"harness: wrote {rd.file('report.html')}")
    return EXIT_OK

