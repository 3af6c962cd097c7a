"""`harness bisect REPO GOOD BAD --impl NAME=MODULE:ATTR`: find the first commit of REPO at which a
plug-in implementation goes over budget.

Everything happens in a temporary linked worktree of REPO, so the user's checkout, index, branch
and bisect state are never touched; the worktree is removed (and pruned) on every way out.
Each commit is judged by a fresh process, `python -m harness.bisect --step ...` (see step_main),
which runs `python -m harness run` with REPO's worktree first on PYTHONPATH, so MODULE is imported
from the commit under test and never from a cached module of an earlier one.

Step exit codes follow `git bisect run`: 0 good, 1 bad, 125 skip (build failed, MODULE does not
import, usage error), 128 abort (interrupted)."""
from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.errors import UsageError

GOOD, BAD, SKIP, ABORT = 0, 1, 125, 128
_FIRST_BAD = re.compile(r"^([0-9a-f]{40}) is the first bad commit", re.M)
# Git variables that would point our git calls at some other repository than REPO/the worktree.
_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_PREFIX")


def _clean_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV}
    env.update(extra or {})
    return env


def _git(cwd, *args, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, env=_clean_env())
    if check and p.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


# ---------------------------------------------------------------------------------------------
# One step: judge the commit checked out in the current directory (a new process per commit).

def _step_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.bisect --step")
    p.add_argument("--step", action="store_true", required=True)
    p.add_argument("--impl", required=True)
    p.add_argument("--cases", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--results", required=True, help="root of the per-commit results dirs")
    p.add_argument("--prefix", default="", help="REPO's path inside its work tree")
    p.add_argument("--build")
    return p


def map_harness_exit(rc: int) -> int:
    """harness run's exit code -> git bisect run's: within budget good, over budget bad, a plug-in
    that does not import (usage error, 2) or anything unexpected is untestable: skip. A signal
    (negative) or 130 (harness interrupted) aborts the whole bisection rather than skipping."""
    if rc == 0:
        return GOOD
    if rc == 1:
        return BAD
    if rc < 0 or rc == 130:
        return ABORT
    return SKIP


def run_step(worktree: Path, impl: str, cases: str, device: str, results_root: Path,
             build: str | None = None, prefix: str = "") -> int:
    """Judge the commit checked out in `worktree`; results go to results_root/<sha>/."""
    sha = _git(worktree, "rev-parse", "HEAD").stdout.strip()
    out = Path(results_root) / sha
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cwd = Path(worktree) / prefix if prefix else Path(worktree)
    log = out / "step.log"
    # No __pycache__ in the worktree: stray files there could block the next checkout.
    env = _clean_env({"PYTHONDONTWRITEBYTECODE": "1"})
    env["PYTHONPATH"] = os.pathsep.join([str(cwd)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with open(log, "w") as fh:
        if build:
            b = subprocess.run(build, shell=True, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
            if b.returncode != 0:
                code, why = SKIP, f"--build exited {b.returncode}"
                _note(out, sha, code, why)
                return code
        fh.flush()
        r = subprocess.run([sys.executable, "-m", "harness", "run", "--impl", impl, "--cases", cases,
                            "--device", device, "--out", str(out), "--no-report"],
                           cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    code = map_harness_exit(r.returncode)
    why = f"harness run exited {r.returncode}"
    if code == BAD and _only_errors(out / "results.csv"):
        # exit 1 from error rows alone (the plug-in raised): not "over budget", untestable
        code, why = SKIP, why + " (error rows only: the implementation raised)"
    if r.returncode == 2:                    # say why it was skipped: the usage error's one line
        lines = [ln for ln in log.read_text().splitlines() if ln.startswith("harness: error:")]
        if lines:
            why += f" ({lines[-1][len('harness: error: '):]})"
    _note(out, sha, code, why)
    return code


def _only_errors(results: Path) -> bool:
    from harness.errors import UsageError
    from reports.results_io import read_results
    try:
        status = read_results(results)["status"]
    except UsageError:
        return False
    bad = status[status != "pass"]
    return len(bad) > 0 and bool((bad == "error").all())


def _note(out: Path, sha: str, code: int, why: str) -> None:
    verdict = {GOOD: "good", BAD: "bad", SKIP: "skip", ABORT: "abort"}[code]
    (out / "verdict").write_text(f"{verdict}\n{why}\n")
    print(f"bisect: {sha[:12]} {verdict}: {why}", file=sys.stderr, flush=True)


def step_main(argv: list[str] | None = None) -> int:
    a = _step_parser().parse_args(argv)
    try:
        return run_step(_toplevel(Path.cwd()), a.impl, a.cases, a.device, Path(a.results),
                        a.build, a.prefix)
    except KeyboardInterrupt:
        return ABORT
    except Exception as e:                   # never report a harness crash as a bad commit
        print(f"bisect: step failed: {type(e).__name__}: {e}", file=sys.stderr)
        return ABORT


def _toplevel(path: Path) -> Path:
    return Path(_git(path, "rev-parse", "--show-toplevel").stdout.strip())


# ---------------------------------------------------------------------------------------------
# The command.

def _validate(args):
    from harness.impls.registry import _SPEC
    repo = Path(args.repo)
    if not repo.is_dir():
        raise UsageError(f"bisect: {args.repo}: not a directory")
    p = _git(repo, "rev-parse", "--git-dir", check=False)
    if p.returncode != 0:
        raise UsageError(f"bisect: {args.repo}: not a git repository")
    inside = _git(repo, "rev-parse", "--is-inside-work-tree", check=False).stdout.strip() == "true"
    prefix = _git(repo, "rev-parse", "--show-prefix").stdout.strip() if inside else ""
    shas = {}
    for what, rev in (("GOOD", args.good), ("BAD", args.bad)):
        r = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        if r.returncode != 0:
            raise UsageError(f"bisect: {what} {rev!r}: not a commit of {args.repo}")
        shas[what] = r.stdout.strip()
    if shas["GOOD"] == shas["BAD"]:
        raise UsageError(f"bisect: GOOD and BAD are the same commit ({shas['GOOD'][:12]})")
    if not _SPEC.match(args.impl):
        raise UsageError(f"bisect: --impl {args.impl!r}: expected NAME=MODULE:ATTR (a plug-in imported "
                         f"from REPO's work tree)")
    cases = args.cases
    from cases.suite import load_suite, resolve_suite_path
    path = resolve_suite_path(cases)         # UsageError for a missing file / unknown suite
    load_suite(cases)                        # ... and for a malformed one, before any commit runs
    if Path(cases).suffix == ".toml" or Path(cases).exists():
        cases = str(path.resolve())          # the steps run in the worktree, not here
    return repo.resolve(), shas["GOOD"], shas["BAD"], prefix, cases


def _failures(results_dir: Path) -> list[dict]:
    f = results_dir / "results.csv"
    if not f.is_file():
        return []
    with open(f, newline="") as fh:
        return [row for row in csv.DictReader(fh) if row.get("status") != "pass"]


def _fmt_num(v: str) -> str:
    try:
        return f"{float(v):.4g}"
    except (TypeError, ValueError):
        return v or "-"


def _print_failures(results_dir: Path) -> None:
    rows = _failures(results_dir)
    if not rows:
        print("  (no failing rows recorded)")
        return
    print(f"failing checks ({len(rows)}):")
    for r in rows:
        print(f"  [{r.get('status')}] {r.get('impl')} {r.get('label') or r.get('case_id')}: "
              f"output={r.get('output')} reference={r.get('reference')} "
              f"max_ulp={_fmt_num(r.get('max_ulp'))} max_scaled_err={_fmt_num(r.get('max_scaled_err'))} "
              f"budget={_fmt_num(r.get('budget'))}")
        if r.get("reason"):
            print(f"      {r['reason']}")


def _verdict_of(results_root: Path, sha: str) -> str:
    f = results_root / sha / "verdict"
    return f.read_text().splitlines()[1] if f.is_file() else ""


def _bisect_run(wt: Path, step_cmd: list[str]) -> str:
    """`git bisect run`, its output streamed to stderr as it comes and returned for parsing."""
    p = subprocess.Popen(["git", "-C", str(wt), "bisect", "run", *step_cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=_clean_env())
    out = []
    try:
        for line in p.stdout:
            out.append(line)
            sys.stderr.write(line)
        p.wait()
    finally:
        if p.poll() is None:                 # interrupted: do not leave git bisect running
            p.terminate()
            p.wait()
    return "".join(out)


def _cleanup(repo: Path, wt: Path, tmp: Path) -> None:
    # Each step best-effort: a failure of one must not keep the others from running.
    if (wt / ".git").exists():
        _git(wt, "bisect", "reset", check=False)
        _git(repo, "worktree", "remove", "--force", str(wt), check=False)
    _git(repo, "worktree", "prune", check=False)
    shutil.rmtree(tmp, ignore_errors=True)
    _git(repo, "worktree", "prune", check=False)


def bisect(args) -> int:
    repo, good, bad, prefix, cases = _validate(args)
    tmp = Path(tempfile.mkdtemp(prefix="harness-bisect-"))
    wt, results = tmp / "worktree", tmp / "results"
    step_cmd = [sys.executable, "-m", "harness.bisect", "--step", "--impl", args.impl, "--cases", cases,
                "--device", args.device, "--results", str(results)]
    if prefix:
        step_cmd += ["--prefix", prefix]
    if args.build:
        step_cmd += ["--build", args.build]
    try:
        w = _git(repo, "worktree", "add", "--detach", str(wt), good, check=False)
        if w.returncode != 0:                # e.g. a read-only repository: the user's to fix
            why = (w.stderr.strip().splitlines() or ["git worktree add failed"])[-1]
            raise UsageError(f"bisect: cannot add a worktree to {args.repo}: {why}")

        # The end points first: bisecting between two good (or two bad) commits says nothing.
        g = run_step(wt, args.impl, cases, args.device, results, args.build, prefix)
        if g != GOOD:
            why = _verdict_of(results, good)
            if g == BAD:
                print(f"bisect: GOOD {args.good} ({good[:12]}) is already over budget; "
                      f"no first bad commit in {args.good}..{args.bad}")
                _print_failures(results / good)
            else:
                print(f"bisect: GOOD {args.good} ({good[:12]}) cannot be tested: {why}")
            return 1 if g != ABORT else 130
        _git(wt, "checkout", "--quiet", "--detach", bad)
        b = run_step(wt, args.impl, cases, args.device, results, args.build, prefix)
        if b != BAD:
            why = _verdict_of(results, bad)
            if b == GOOD:
                print(f"bisect: BAD {args.bad} ({bad[:12]}) is within budget; nothing to bisect")
            else:
                print(f"bisect: BAD {args.bad} ({bad[:12]}) cannot be tested: {why}")
            return 1 if b != ABORT else 130

        _git(wt, "bisect", "start", bad, good, "--")
        output = _bisect_run(wt, step_cmd)
        log = _git(wt, "bisect", "log", check=False).stdout
        skipped = re.findall(r"^# skip: \[([0-9a-f]{40})\]", log, re.M)

        m = _FIRST_BAD.search(output)
        if not m:
            print("bisect: no single first bad commit found")
            if "only 'skip'ped commits left" in output:
                cands = re.findall(r"^([0-9a-f]{40})$", output, re.M)
                print("  the first bad commit could be any of (untestable commits in between):")
                for c in cands:
                    print(f"    {c}")
            for c in skipped:
                print(f"  skipped {c}: {_verdict_of(results, c)}")
            return 1
        first = m.group(1)
        subject = _git(repo, "log", "-1", "--format=%s", first, check=False).stdout.strip()
        print(f"first bad commit: {first}")
        if subject:
            print(f"  {subject}")
        for c in skipped:
            print(f"  skipped {c[:12]}: {_verdict_of(results, c)}")
        _print_failures(results / first)
        return 0
    finally:
        _cleanup(repo, wt, tmp)


if __name__ == "__main__":
    sys.exit(step_main())
