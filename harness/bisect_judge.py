"""The judge of `harness bisect`: one commit, in its own process (`python -m harness.bisect_judge`,
started by harness.bisect.run_step with the commit's import roots first on PYTHONPATH).

MODULE's top-level package is found in those roots only, by a finder put ahead of every other one
of sys.meta_path: an editable install of REPO (its finder, its .pth) cannot make a step judge the
user's checkout, and a commit without the package is untestable rather than judged on the
installed copy. The suite runs pair by pair through the pipeline (harness.pipeline: the commit's
code in a worker, whose implementation process pins the package to the same roots, judged by its
judge) and stops at the first check over budget. judge.json, written as the judge's last act, is
the verdict: a judge that ends without one (an exit of the implementation at import) made no
judgement; a pair that crashes or runs past the timeout is an `error` pair."""
from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import sys
from pathlib import Path

from harness.pinned import pin_imports
from harness.references.errors import UsageError

GOOD, BAD, SKIP = 0, 1, 125
CODES = {"good": GOOD, "bad": BAD, "skip": SKIP}
PAIR_TIMEOUT = 600.0           # seconds one pair may run (first calls compile)


def import_roots(tree: Path, paths=()) -> list[Path]:
    """Where a commit's code is imported from: the --path entries (relative to REPO's directory in
    the worktree) when given, else REPO's src/ (a src layout; when the commit has one) and REPO."""
    if paths:
        return [(tree / p).resolve() for p in paths]
    return [d.resolve() for d in (tree / "src", tree) if d.is_dir()]


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def judge(spec: str, cases: str, device: str, out: Path, roots: list[str], timeout: float = PAIR_TIMEOUT,
          budgets: str | None = None) -> int:
    """Judge the commit whose code is under `roots`: pair by pair, stopping at the first check over
    budget (the defaults, overridden by the budget file `budgets` where given). Writes
    out/judge.json (verdict, why, the file MODULE came from, the deciding check) as its last act
    and returns the step code; rows go to out/results.csv."""
    import pandas as pd

    from harness.analysis.check import rows as result_rows
    from harness.api import plan
    from harness.gate import by_severity, failure_line
    from harness.impls.registry import PLUGIN_SPEC, load_plugin
    from harness.pipeline.drive import Pipeline
    from harness.reports.rundir import RunDir
    from harness.worker import drop_spares, prespawn
    prespawn([dict(os.environ)])                 # the worker's imports overlap this process's own
    plugin, _, math_label = spec.partition("@")   # NAME=MODULE:ATTR[@CLASS], validated by bisect
    module = PLUGIN_SPEC.match(plugin)["module"]
    top = module.split(".")[0]
    verdict = {"verdict": "skip", "why": "", "imported": "", "check": "", "checked": 0, "planned": 0}
    try:
        if importlib.machinery.PathFinder.find_spec(top, roots) is None:
            raise UsageError(f"--impl {spec}: no package {top!r} in the commit's import roots ({', '.join(roots)})")
        pin_imports(top, roots)
        impl = load_plugin(plugin)
        impl = impl.with_math(math_label) if math_label else impl
        verdict["imported"] = getattr(sys.modules.get(module), "__file__", None) or module
        p = plan(impl, cases, device, budgets)
    except UsageError as e:
        drop_spares()
        verdict["why"] = str(e)
        write_json(out / "judge.json", verdict)
        return SKIP
    verdict["planned"] = len(p.cases)
    rd, error, skipped = RunDir(out).create(), None, 0
    pipe = Pipeline(p.settings, "process", timeout, pinned=(top, list(roots)))
    for case in p.cases:
        (out / "current").write_text(f"{case.case_id} [{case.label}]")
        rows = result_rows(pipe.run(case, impl))
        rd.append_pair(rows)
        verdict["checked"] += 1
        fails = by_severity(pd.DataFrame([r for r in rows if r["status"] == "fail"]))
        fail = fails.iloc[0] if len(fails) else None
        if fail is not None:
            verdict.update(verdict="bad", check=failure_line(fail).strip(),
                           why=f"{fail['case_id']} {fail['output']} vs {fail['reference']}: {fail['reason']} "
                               f"(pair {verdict['checked']} of {len(p.cases)})")
            break
        error = error or next((r for r in rows if r["status"] == "error"), None)
        skipped += all(r["status"] == "skip" for r in rows)
    else:
        if error is not None:
            verdict["why"] = f"error rows only (the implementation raised): {error['case_id']}: {error['reason']}"
        else:
            verdict.update(verdict="good", why=f"{verdict['checked'] - skipped} of {len(p.cases)} cases within "
                                              f"budget" + (f", {skipped} skipped" if skipped else ""))
    pipe.close()
    write_json(out / "judge.json", verdict)
    return CODES[verdict["verdict"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.bisect_judge")
    for opt in ("--impl", "--cases", "--device", "--out"):
        p.add_argument(opt, required=True)
    p.add_argument("--root", action="append", default=[])
    p.add_argument("--timeout", type=float, default=PAIR_TIMEOUT)
    p.add_argument("--budgets")
    a = p.parse_args(argv)
    try:
        return judge(a.impl, a.cases, a.device, Path(a.out), a.root, a.timeout, a.budgets)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
