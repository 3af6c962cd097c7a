"""One function per subcommand: arguments in, exit code out. Library code never prints; this does."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd

from harness.cli import EXIT_FAIL, EXIT_OK, EXIT_USAGE, _parse_shard
from harness.errors import UsageError


def _impls(specs):
    from harness.impls.registry import resolve_all
    return resolve_all(specs)


def _check_available(impls, device: str) -> None:
    for impl in impls:
        reason = impl.skip_reason(device)
        if reason:
            raise UsageError(f"--impl {impl.name}: {reason}")


def _stderr(line: str) -> None:
    """The `log` callback the library streams progress lines through while long work runs."""
    print(line, file=sys.stderr, flush=True)


def _env(device: str) -> dict:
    from harness.environment import environment
    return environment(device)


def _render(out_dir: Path, df: pd.DataFrame, baseline, exit_code: int, device: str, title: str) -> None:
    from harness.reports.html import write_all
    env = _env(device)
    timing = out_dir / "timing.csv"
    if timing.is_file():                     # where the sweep's time went, in the environment table
        from harness.runner import read_timings, timing_line
        try:
            t = read_timings(timing)
            impls = list(dict.fromkeys(df["impl"])) if "impl" in df else []
            env["time"] = timing_line(t, impls).removeprefix("harness: time ")
        except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
            pass                             # a damaged timing.csv only costs this line
    from harness.runner import PAIR_TIMING, slowest_pairs
    slow = slowest_pairs(out_dir / PAIR_TIMING)
    if slow:
        env["slowest pairs"] = slow
    write_all(out_dir, df, baseline=baseline, env=env, exit_code=exit_code, title=title)


def _write_outputs(out_dir: Path, df, baseline, exit_code: int, device: str, title: str,
                   no_report: bool) -> None:
    """summary.csv always; report.html unless --no-report."""
    if no_report:
        from harness.reports.summary import summarize
        summarize(df).to_csv(out_dir / "summary.csv", index=False)
    else:
        _render(out_dir, df, baseline, exit_code, device, title)


def _write_timings(out_dir: Path, timings: dict[str, float], impl_names: list[str]) -> None:
    """timing.csv (stage, seconds) and one line on stderr: where the sweep's time went."""
    from harness.runner import timing_line, write_timings
    write_timings(out_dir / "timing.csv", timings)
    print(timing_line(timings, impl_names), file=sys.stderr)


def _load_baseline(path: str | None):
    if not path:
        return None
    p = Path(path)
    f = p / "results.csv" if p.is_dir() else p
    if not f.is_file():
        raise UsageError(f"--baseline {path}: no results.csv there")
    from harness.reports.results_io import read_results
    return read_results(f)


def _writable_dir(path: str) -> Path:
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {path}: cannot create the directory ({e.strerror})") from None
    if not os.access(p, os.W_OK):
        raise UsageError(f"--out {path}: not writable")
    return p


def cmd_run(args) -> int:
    from harness.gate import apply_baseline, verdict
    from harness.runner import SweepConfig, resolve_device, run_sweep, shard
    from harness.summary import summary_table
    from harness.budgets import load_budget_file

    device = resolve_device(args.device)
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device available")
    impls = _impls(args.impl)
    _check_available(impls, device)
    overrides = load_budget_file(args.budgets) if args.budgets else []
    baseline = _load_baseline(args.baseline)
    out_dir = _writable_dir(args.out)
    specs = {i.name: s for i, s in zip(impls, args.impl)}

    if args.cases == "hypothesis":
        ignored = [f for f, v in (("--resume", args.resume), ("--shard", args.shard), ("--jobs", args.jobs > 1),
                                  ("--shard-by", args.shard_by),
                                  ("--baseline", args.baseline), ("--junit", args.junit)) if v]
        if ignored:
            raise UsageError(f"--cases hypothesis: {ignored[0]} does not apply to an exploration")
        from harness.explore import explore
        for stale in ("timing.csv", "pair-timing.csv"):    # an exploration has no stage timings
            (out_dir / stale).unlink(missing_ok=True)
        e = explore(impls, specs, device, args.max_examples, args.seed, out_dir, overrides,
                    args.budgets or "", log=_stderr)
        code = print_exploration(e)
        results = out_dir / "results.csv"
        if results.exists():                       # the same files as any run: summary + report
            from harness.reports.results_io import read_results
            _write_outputs(out_dir, read_results(results), None, code, device,
                           f"hypothesis seed {args.seed}: {', '.join(specs)}", args.no_report)
        return code

    from harness.cases.suite import load_suite
    suite = load_suite(args.cases)
    cases = list(suite.cases)
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: need at least 1")
    if args.shard_by and not (args.shard or args.jobs > 1):
        raise UsageError("--shard-by applies to --shard or --jobs")
    if args.jobs > 1 and args.shard:
        raise UsageError("--jobs shards the cases itself: drop --shard (or run shards yourself and `harness merge`)")
    if args.shard:
        cases = shard(cases, *_parse_shard(args.shard), by=args.shard_by or "case")
    cfg = SweepConfig(impls, cases, device, out_dir, specs, args.cases, overrides, args.budgets or "",
                      resume=args.resume, golden_dir=Path(args.golden) if args.golden else None)
    print(f"harness: {len(cases)} cases x {len(impls)} implementation(s) "
          f"[{', '.join(f'{i.name} ({i.rounding})' for i in impls)}] on {device}", file=sys.stderr)
    if args.jobs > 1:
        from harness.jobs import run_jobs
        df, timings, failed_jobs = run_jobs(args, device, cases, impls, out_dir, log=_stderr)
    else:
        df, timings, failed_jobs = run_sweep(cfg), cfg.timings, []
    _write_timings(out_dir, timings, [i.name for i in impls])
    if baseline is not None:
        df = apply_baseline(df, baseline)
        from harness.reports.results_io import write_results
        write_results(out_dir / "results.csv", df)
    code, lines = verdict(df)
    print(summary_table(df))
    for ln in lines:
        print(ln)
    _write_outputs(out_dir, df, baseline, code, device, f"{suite.name}: {', '.join(specs)}", args.no_report)
    if args.junit:
        from harness.reports.junit import write_junit
        write_junit(df, Path(args.junit))
    print(f"harness: wrote {out_dir / 'results.csv'}" + ("" if args.no_report else f" and {out_dir / 'report.html'}"))
    if failed_jobs:                                  # an incomplete sweep is an error, whatever passed
        print(f"harness: error: {len(failed_jobs)} job(s) did not finish", file=sys.stderr)
        return EXIT_USAGE
    return code


def print_exploration(e) -> int:
    """Print a hypothesis exploration's outcome; exit 1 if it found a failing case, else 0."""
    from harness.explore import format_exploration
    if e.note:
        print(e.note, file=sys.stderr)
    print(format_exploration(e))
    return EXIT_FAIL if e.falsified else EXIT_OK


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


def _merge_timings(dirs: list[Path], out: Path) -> None:
    """The shards' timing.csv (runner.combine_timings) and pair-timing.csv (concatenated), where
    they have them; a missing or damaged one is left out with one line."""
    from harness.jobs import read_or_none
    from harness.runner import PAIR_TIMING, combine_timings, read_pair_timings, read_timings, write_timings
    timings = combine_timings([t for d in dirs if (t := read_or_none(read_timings, d / "timing.csv", _stderr))])
    pairs = [pt for d in dirs if (pt := read_or_none(read_pair_timings, d / PAIR_TIMING, _stderr)) is not None]
    if timings:
        write_timings(out / "timing.csv", timings)
    if pairs:
        pd.concat(pairs, ignore_index=True).to_csv(out / PAIR_TIMING, index=False)


def cmd_merge(args) -> int:
    from harness.gate import verdict
    from harness.reports.results_io import read_results, write_results
    frames = []
    for d in args.dirs:
        f = Path(d) / "results.csv"
        if not f.is_file():
            raise UsageError(f"merge: {d}: no results.csv")
        frames.append(read_results(f))
    df = pd.concat(frames, ignore_index=True)
    key = ["case_id", "impl", "output", "reference"]
    dup = df[df.duplicated(key, keep=False)]
    if not dup.empty:
        r = dup.iloc[0]
        raise UsageError(f"merge: {r['case_id']} {r['impl']} {r['output']} {r['reference']} is in more "
                         f"than one input: shards must be disjoint")
    from harness.runner import ROWS_PER_PAIR
    sweep = df[df["reference"].str.startswith("model:")][["case_id", "impl"]].drop_duplicates()
    counts = df.merge(sweep, on=["case_id", "impl"]).groupby(["case_id", "impl"]).size()
    if (counts != ROWS_PER_PAIR).any():
        cid, impl = counts[counts != ROWS_PER_PAIR].index[0]
        raise UsageError(f"merge: {cid} {impl} has {counts[(cid, impl)]} of {ROWS_PER_PAIR} rows: "
                         f"an interrupted shard; rerun it with --resume first")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / "results.csv", df)
    _merge_timings([Path(d) for d in args.dirs], out)
    code, lines = verdict(df)
    for ln in lines:
        print(ln)
    _render(out, df, None, code, str(df["device"].iloc[0]) if len(df) else "cpu", "merged")
    print(f"harness: merged {len(frames)} result sets, {len(df)} rows -> {out}")
    return code


def cmd_report(args) -> int:
    from harness.gate import apply_baseline, verdict
    d = Path(args.dir)
    f = d / "results.csv"
    if not f.is_file():
        raise UsageError(f"report: {args.dir}: no results.csv")
    from harness.reports.results_io import read_results
    df = read_results(f)
    baseline = _load_baseline(args.baseline)
    if baseline is not None:
        df = apply_baseline(df, baseline)
    code, _ = verdict(df)
    _render(d, df, baseline, code, str(df["device"].iloc[0]) if len(df) else "cpu", d.name)
    print(f"harness: wrote {d / 'report.html'}")
    return EXIT_OK


def cmd_replay(args) -> int:
    from harness.replay import format_counts, format_replay, replay, write_replay_results
    budgets = getattr(args, "budgets", None)
    r = replay(args.case_id, args.impl, args.cases, args.device, getattr(args, "top", 5), budgets)
    print(format_replay(r))
    if getattr(args, "out", None):
        f = write_replay_results(r, args.out, args.impl, args.cases)
        print(f"harness: wrote {f}", file=sys.stderr)
    print(format_counts(r))
    return EXIT_FAIL if any(row["status"] != "pass" for row in r.rows) else EXIT_OK


def cmd_budgets(args) -> int:
    from harness.budgets import regen, write_budget_file
    if args.budgets_cmd == "show":
        from harness.budgets import derivation_table
        print(derivation_table())
        return EXIT_OK
    p = Path(args.src)
    f = p / "results.csv" if p.is_dir() else p
    if not f.is_file():
        raise UsageError(f"budgets regen --from {args.src}: no results.csv")
    from harness.reports.results_io import read_results
    lines, grown, refused = regen(read_results(f), allow_growth=args.allow_growth)
    write_budget_file(lines, args.output)
    for key, new, old in grown:
        print(f"grew: {','.join(map(str, key))}: {old:.4g} -> {new:.4g}")
    for key, new, old in refused:
        print(f"refused (over cap, use --allow-growth): {','.join(map(str, key))}: {old:.4g} -> {new:.4g}",
              file=sys.stderr)
    print(f"harness: wrote {len(lines)} budgets to {args.output}")
    return EXIT_FAIL if refused else EXIT_OK


def cmd_selftest(args) -> int:
    from harness.selftest import format_selftest, format_selftest_summary, selftest
    s = selftest(args.cases, args.device, args.out)
    if s.report:
        print(format_selftest(s))
    print(format_selftest_summary(s), file=sys.stderr)
    return EXIT_OK if s.ok else EXIT_FAIL


EXIT_INTERRUPTED = 130      # a bisect step was aborted (interrupted), as for Ctrl-C in harness.cli


def cmd_bisect(args) -> int:
    from harness.bisect import bisect, format_bisection
    b = bisect(args.repo, args.good, args.bad, args.impl, args.cases, args.device, args.build,
               log=_stderr)
    print(format_bisection(b))
    if b.outcome == "found":
        return EXIT_OK
    return EXIT_INTERRUPTED if b.aborted else EXIT_FAIL


def cmd_exhaustive(args) -> int:
    from harness.exhaustive import exhaustive_command
    return exhaustive_command(args)
