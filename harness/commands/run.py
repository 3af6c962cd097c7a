"""`harness run`, `cases`, `merge`, `report`."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.api import Results, check_run_options, load_baseline, plan, run_plan
from harness.commands import EXIT_OK, Progress, err
from harness.environment import environment
from harness.references.errors import UsageError
from harness.reports.rundir import TIMING, RunDir, read_csv, read_results
from harness.reports.summary import summary_table


def parse_shard(s: str | None) -> tuple[int, int] | None:
    if not s:
        return None
    try:
        k, n = (int(v) for v in s.split("/"))
    except ValueError:
        raise UsageError(f"--shard {s!r}: expected K/N, e.g. 1/4") from None
    if not (n >= 1 and 1 <= k <= n):
        raise UsageError(f"--shard {s!r}: need 1 <= K <= N")
    return k, n


def parse_gpus(s: str | None) -> tuple[int, ...]:
    if not s:
        return ()
    try:
        gpus = tuple(int(v) for v in s.split(","))
    except ValueError:
        raise UsageError(f"--gpus {s!r}: expected GPU indices, e.g. 0,1") from None
    if any(g < 0 for g in gpus):
        raise UsageError(f"--gpus {s!r}: indices are >= 0")
    return gpus


def check_output_file(flag: str, path: str | None) -> None:
    """An output file's path must be writable before the work starts (not a directory)."""
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a directory, expected a file path")
    if not p.parent.exists():
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{flag} {path}: cannot create its directory ({e.strerror or e})") from None


def timing_line(timings: dict[str, float], impl_names: list[str]) -> str:
    impl = {n: timings.get(f"impl:{n}", 0.0) for n in impl_names}
    return ("harness: time " + ", ".join([
        f"{timings.get('wall', 0.0):.1f} s", f"references {timings.get('references', 0.0):.1f} s",
        f"implementations {sum(impl.values()):.1f} s (" + ", ".join(f"{n} {t:.1f}" for n, t in impl.items()) + ")",
        f"analysis {timings.get('analysis', 0.0):.1f} s (mpmath {timings.get('mpmath', 0.0):.1f} s)"])
        + (f", {int(timings.get('jobs', 1))} workers" if timings.get("jobs", 1) > 1 else ""))


def finish(results: Results, out: Path, device: str, impls, title: str, junit: str | None, no_report: bool,
           backend: str = "auto") -> int:
    """Print the summary and verdict, write summary.csv, report.html and JUnit; the exit code."""
    results.title, results.env = title, environment(device, impls, backend)
    if results.timings:
        results.env["time"] = timing_line(results.timings, [i.name for i in impls]).removeprefix("harness: time ")
    print(summary_table(results.frame))
    for line in results.verdict_lines():
        print(line)
    written = results.write(out, report=not no_report)
    if junit:
        written.append(results.write_junit(junit))
    print("harness: wrote " + ", ".join(str(p) for p in written))
    return results.exit_code


def cmd_run(args) -> int:
    if args.cases == "hypothesis":
        from harness.commands.explore import cmd_explore
        return cmd_explore(args)
    if args.shard_by and not args.shard:
        raise UsageError("--shard-by applies to --shard (--jobs always splits by shape)")
    check_output_file("--junit", args.junit)
    check_run_options(args.jobs, args.timeout, args.threads)
    gpus = parse_gpus(args.gpus)
    p = plan(args.impl, args.cases, args.device, args.budgets, args.baseline, args.golden, args.reference_backend,
             parse_shard(args.shard), args.shard_by or "case", args.repeats, args.require_repeatable)
    rd = RunDir(args.out).create().check_outputs()
    with rd.lock():                 # to the last report: a second run into --out fails at once
        err(f"harness: {len(p.cases)} cases x {len(p.impls)} implementation(s) "
            f"[{', '.join(f'{i.name} ({i.rounding.name})' for i in p.impls)}] on {p.settings.device}")
        results = run_plan(p, args.out, resume=args.resume, jobs=args.jobs, timeout=args.timeout,
                           isolate=args.isolate, threads=args.threads, gpus=gpus, progress=Progress(), log=err)
        err(timing_line(results.timings, [i.name for i in p.impls]))
        return finish(results, Path(args.out), p.settings.device, p.impls, f"{p.suite}: {', '.join(args.impl)}",
                      args.junit, args.no_report, args.reference_backend)


def cmd_cases(args) -> int:
    from harness.cases.suite import list_suites, load_suite
    if not args.suite:
        for name, desc, n in list_suites():
            print(f"{name:10s} {n:5d} cases  {desc}")
        return EXIT_OK
    s = load_suite(args.suite)
    for c in s.cases:
        print(f"{c.case_id}  {c.regime:7s}  {c.label}")
    print(f"{len(s.cases)} cases")
    return EXIT_OK


def cmd_report(args) -> int:
    from harness.gate import apply_baseline
    from harness.reports.outputs import RunData, write_outputs
    from harness.reports.summary import summarize
    rd = RunDir(args.dir)
    if not rd.results.is_file():
        raise UsageError(f"report: {args.dir}: no results.csv")
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
        except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
            pass
    write_outputs(rd.path, RunData(df, summarize(df), r.exit_code, rd.path.name, env, baseline))
    print(f"harness: wrote {rd.file('report.html')}")
    return EXIT_OK

