"""`harness cases` (which imports no torch: listing a suite is instant), `replay`, `budgets`,
`selftest`, `bisect`, `exhaustive`."""
from __future__ import annotations

import sys
from pathlib import Path

from harness.commands import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, err
from harness.references.errors import UsageError


def cmd_replay(args) -> int:
    from harness.replay import format_counts, format_replay, replay, write_replay_results
    if args.out:
        from harness.commands.common import check_output_file
        if Path(args.out).is_file():
            raise UsageError(f"--out {args.out}: is a file, expected a directory")
        check_output_file("--out", str(Path(args.out) / "results.csv"))
    from harness.commands.common import load_impls
    from harness.replay import check_arguments
    check_arguments(args.device, args.top, args.timeout)         # before a plug-in's import
    impl = load_impls([args.impl], args.timeout, args.device)[0]
    r = replay(args.case_id, impl, args.cases, args.device, args.top, args.budgets, args.case, args.isolate,
               args.timeout)
    print(format_replay(r))
    if args.out:
        err(f"harness: wrote {write_replay_results(r, args.out)}")
    print(format_counts(r))
    return EXIT_FAIL if any(row["status"] not in ("pass", "skip") for row in r.rows) else EXIT_OK


def cmd_budgets(args) -> int:
    from harness.budgets import budget_file_text, refusal, regen
    from harness.references.atomic import atomic_write
    from harness.reports.rundir import read_results
    if args.budgets_cmd == "show":
        from harness.derivation import derivation_table
        print(derivation_table())
        return EXIT_OK
    out = Path(args.output)
    if out.is_dir():
        raise UsageError(f"-o {args.output}: is a directory, expected a file path")
    if not out.parent.is_dir():
        raise UsageError(f"-o {args.output}: no directory {out.parent}")
    p = Path(args.src)
    f = p / "results.csv" if p.is_dir() else p
    if not f.is_file():
        raise UsageError(f"budgets regen --from {args.src}: no results.csv")
    results = read_results(f)                   # its own errors name the file
    try:
        lines, grown, refused = regen(results, allow_growth=args.allow_growth)
    except UsageError as e:
        raise UsageError(f"budgets regen --from {f}: {e}") from None
    with atomic_write(out, "w") as fh:
        fh.write(budget_file_text(lines))
    for key, new, old in grown:
        print(f"grew: {','.join(map(str, key))}: {old:.4g} -> {new:.4g}")
    for key, new, old in refused:
        print(refusal(key, new, old), file=sys.stderr)
    print(f"harness: wrote {len(lines)} budgets to {args.output}")
    return EXIT_FAIL if refused else EXIT_OK


def cmd_selftest(args) -> int:
    from harness.selftest import format_selftest, format_selftest_summary, selftest
    s = selftest(args.cases, args.device, args.out, jobs=args.jobs, log=err)
    print(format_selftest(s))
    err(format_selftest_summary(s))
    return EXIT_OK if s.ok else EXIT_FAIL


def cmd_bisect(args) -> int:
    from harness.bisect import bisect, format_bisection
    b = bisect(args.repo, args.good, args.bad, args.impl, args.cases, args.device, args.build, log=err, paths=args.path,
               budgets=args.budgets)
    print(format_bisection(b))
    if b.outcome == "found":
        return EXIT_OK
    return EXIT_INTERRUPTED if b.aborted else EXIT_FAIL


def cmd_exhaustive(args) -> int:
    from harness.exhaustive.command import exhaustive_command
    return exhaustive_command(args)


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
