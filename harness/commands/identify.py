"""`harness identify --impl SPEC [--cases SUITE] [--device D]` (SPEC §4): measure an implementation
against the model reference of every built-in rounding model at every math class in one sweep,
print per output dtype and output the models it is within budget of (each at the least permissive
class at which it fits), and end with `IMPL realises MODEL, CLASS math` (exit 0) or `IMPL realises
no single declared model: ...` naming the outputs that fit none (exit 1)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from harness.api import check_run_options, plan, run_plan
from harness.commands import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Progress, err
from harness.commands.common import load_impls, parse_gpus
from harness.references.errors import UsageError
from harness.references.mathclass import CLASSES
from harness.references.models import builtin_models
from harness.reports.realised import by_output, model_fits, output_label, realised, verdict_line, within
from harness.reports.summary import sort_keys


def format_identify(df: pd.DataFrame) -> tuple[int, list[str], list[str]]:
    """(exit code, the lines to print, the verdict lines among them: one per implementation)."""
    table = model_fits(df)
    # The dtype is the output's own: dgate's follows the gate and dweight's the weight, so "fp32
    # dgate" on a bf16 case with a float32 gate is its own row.
    lines, code = [f"{'implementation':24s} {'dtype':5s} {'output':8s} (the output's dtype: dgate's is the gate's, "
                   f"dweight's the weight's)"], EXIT_OK
    verdicts = []
    for impl in dict.fromkeys(table["impl"]):
        t = sort_keys(table[table["impl"] == impl], ["out_dtype", "output"])     # realised's order too
        for (act, dt, out), fits in by_output(t).items():
            lines.append(f"{impl:24s} {dt:5s} {output_label(act, out):8s} within budget of: {within(fits)}")
        if not realised(t)[0]:
            code = EXIT_FAIL
        verdicts.append(verdict_line(impl, t))
        lines.append(verdicts[-1])
    if table.empty:     # nothing verified (README: exit 1), said on stderr by the command
        return EXIT_FAIL, [], ["harness: identify: no model check was measured (every pair errored or was skipped)"]
    return code, lines, verdicts


def cmd_identify(args) -> int:
    names = tuple(builtin_models())
    # which model fits is a question about the first call's values: whether a later call repeats
    # them is the gate's (harness run), not this command's
    gpus = parse_gpus(args.gpus)
    check_run_options(args.jobs, args.timeout, args.threads, gpus)
    impls = load_impls(args.impl, args.timeout, args.device)
    p = plan(impls, args.cases, args.device, args.budgets, None, args.golden, args.reference_backend,
             repeats=0, allow_nondeterministic=True)
    if len(p.impls) != 1:
        raise UsageError("identify: one --impl at a time")
    p.settings = replace(p.settings, models=tuple((n, c) for n in names for c in CLASSES))
    err(f"harness: identify {p.impls[0].name}: {len(p.cases)} cases against {', '.join(names)}, each at "
        f"{', '.join(c.label for c in CLASSES)} math, on {p.settings.device}")
    res = run_plan(p, args.out, jobs=args.jobs, timeout=args.timeout, isolate=args.isolate, threads=args.threads,
                   gpus=gpus, progress=Progress(), log=err)
    if res.frame.empty:
        raise UsageError("identify: no results")
    code, lines, verdicts = format_identify(res.frame)
    if res.unfinished:
        code = EXIT_USAGE
        verdicts = verdicts + [f"harness: error: {len(res.unfinished)} pairs did not finish"]
    # the report leads with what this command says: the model realised, and this exit code
    res.command_exit, res.headline = code, verdicts
    res.write(Path(args.out), report=not args.no_report)
    for line in lines:
        print(line)
    if res.unfinished or not lines:
        err(verdicts[-1])
    return code
