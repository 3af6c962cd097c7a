"""`harness run --cases hypothesis`: harness.explore, printed; exit 1 if it found a failing case."""
from __future__ import annotations

from pathlib import Path

from harness.api import Results, plan
from harness.commands import EXIT_FAIL, EXIT_OK, err
from harness.references.errors import UsageError

DEFAULT_EXAMPLES = 50             # --max-examples when not given


def cmd_explore(args) -> int:
    from harness.commands.common import finish, load_impls, nondeterminism
    from harness.explore import explore, format_exploration
    from harness.reports.rundir import RunDir
    ignored = [f for f, v in (("--resume", args.resume), ("--shard", args.shard), ("--jobs", args.jobs > 1),
                              ("--shard-by", args.shard_by), ("--baseline", args.baseline),
                              ("--junit", args.junit)) if v]
    if ignored:
        raise UsageError(f"--cases hypothesis: {ignored[0]} does not apply to an exploration")
    if args.max_examples is None:
        args.max_examples = DEFAULT_EXAMPLES
    if args.max_examples < 1:
        raise UsageError(f"--max-examples {args.max_examples}: need at least 1")
    impls = load_impls(args.impl, args.timeout, args.device)
    p = plan(impls, "quick", args.device, args.budgets, None, args.golden, args.reference_backend,
             repeats=args.repeats, allow_nondeterministic=nondeterminism(args))
    rd = RunDir(args.out).create()
    with rd.lock():
        for stale in ("timing.csv", "pair-timing.csv"):          # an exploration has no stage timings
            rd.file(stale).unlink(missing_ok=True)
        e = explore(p.impls, p.settings, args.max_examples, args.seed, rd.path, timeout=args.timeout, log=err)
    if e.note:
        err(e.note)
    print(format_exploration(e))
    if e.results is not None:
        results = Results(rd.read_results(), suite="hypothesis")
        finish(results, Path(args.out), p.settings.device, p.impls,
               f"hypothesis seed {args.seed}: {', '.join(args.impl)}", None, args.no_report)
    return EXIT_FAIL if e.falsified else EXIT_OK
