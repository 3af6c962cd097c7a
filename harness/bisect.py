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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.references.errors import UsageError

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
             build: str | None = None, prefix: str = "", log: Callable[[str], None] | None = None) -> int:
    """Judge the commit checked out in `worktree`; results go to results_root/<sha>/. The verdict
    line goes to `log` when given."""
    sha = _git(worktree, "rev-parse", "HEAD").stdout.strip()
    out = Path(results_root) / sha
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cwd = Path(worktree) / prefix if prefix else Path(worktree)
    step_log = out / "step.log"
    # No __pycache__ in the worktree: stray files there could block the next checkout.
    env = _clean_env({"PYTHONDONTWRITEBYTECODE": "1"})
    env["PYTHONPATH"] = os.pathsep.join([str(cwd)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with open(step_log, "w") as fh:
        if build:
            b = subprocess.run(build, shell=True, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
            if b.returncode != 0:
                code, why = SKIP, f"--build exited {b.returncode}"
                _note(out, sha, code, why, log)
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
        lines = [ln for ln in step_log.read_text().splitlines() if ln.startswith("harness: error:")]
        if lines:
            why += f" ({lines[-1][len('harness: error: '):]})"
    _note(out, sha, code, why, log)
    return code


def _only_errors(results: Path) -> bool:
    from harness.references.errors import UsageError
    from harness.reports.results_io import read_results
    try:
        status = read_results(results)["status"]
    except UsageError:
        return False
    bad = status[status != "pass"]
    return len(bad) > 0 and bool((bad == "error").all())


def _note(out: Path, sha: str, code: int, why: str, log: Callable[[str], None] | None) -> None:
    verdict = {GOOD: "good", BAD: "bad", SKIP: "skip", ABORT: "abort"}[code]
    (out / "verdict").write_text(f"{verdict}\n{why}\n")
    if log is not None:
        log(f"bisect: {sha[:12]} {verdict}: {why}")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def step_main(argv: list[str] | None = None) -> int:
    """Entry point of the per-commit process (`python -m harness.bisect --step`): its own CLI, so
    it owns its stderr and exit code (git bisect run's)."""
    a = _step_parser().parse_args(argv)
    try:
        return run_step(_toplevel(Path.cwd()), a.impl, a.cases, a.device, Path(a.results),
                        a.build, a.prefix, log=_stderr)
    except KeyboardInterrupt:
        return ABORT
    except Exception as e:                   # never report a harness crash as a bad commit
        _stderr(f"bisect: step failed: {type(e).__name__}: {e}")
        return ABORT


def _toplevel(path: Path) -> Path:
    return Path(_git(path, "rev-parse", "--show-toplevel").stdout.strip())


# ---------------------------------------------------------------------------------------------
# The command.

def _validate(repo_arg: str, good_rev: str, bad_rev: str, impl: str, cases: str):
    from harness.impls.registry import _SPEC
    repo = Path(repo_arg)
    if not repo.is_dir():
        raise UsageError(f"bisect: {repo_arg}: not a directory")
    p = _git(repo, "rev-parse", "--git-dir", check=False)
    if p.returncode != 0:
        raise UsageError(f"bisect: {repo_arg}: not a git repository")
    inside = _git(repo, "rev-parse", "--is-inside-work-tree", check=False).stdout.strip() == "true"
    prefix = _git(repo, "rev-parse", "--show-prefix").stdout.strip() if inside else ""
    shas = {}
    for what, rev in (("GOOD", good_rev), ("BAD", bad_rev)):
        r = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        if r.returncode != 0:
            raise UsageError(f"bisect: {what} {rev!r}: not a commit of {repo_arg}")
        shas[what] = r.stdout.strip()
    if shas["GOOD"] == shas["BAD"]:
        raise UsageError(f"bisect: GOOD and BAD are the same commit ({shas['GOOD'][:12]})")
    if not _SPEC.match(impl):
        raise UsageError(f"bisect: --impl {impl!r}: expected NAME=MODULE:ATTR (a plug-in imported "
                         f"from REPO's work tree)")
    from harness.cases.suite import load_suite, resolve_suite_path
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


def format_failures(rows: list[dict]) -> str:
    """The failing rows of one commit's results, one entry each (with its reason)."""
    if not rows:
        return "  (no failing rows recorded)"
    lines = [f"failing checks ({len(rows)}):"]
    for r in rows:
        lines.append(f"  [{r.get('status')}] {r.get('impl')} {r.get('label') or r.get('case_id')}: "
                     f"output={r.get('output')} reference={r.get('reference')} "
                     f"max_ulp={_fmt_num(r.get('max_ulp'))} max_scaled_err={_fmt_num(r.get('max_scaled_err'))} "
                     f"budget={_fmt_num(r.get('budget'))}")
        if r.get("reason"):
            lines.append(f"      {r['reason']}")
    return "\n".join(lines)


def _verdict_of(results_root: Path, sha: str) -> str:
    f = results_root / sha / "verdict"
    return f.read_text().splitlines()[1] if f.is_file() else ""


def _bisect_run(wt: Path, step_cmd: list[str], log: Callable[[str], None] | None = None) -> str:
    """`git bisect run`, its output streamed to `log` line by line as it comes and returned for parsing."""
    p = subprocess.Popen(["git", "-C", str(wt), "bisect", "run", *step_cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=_clean_env())
    out = []
    try:
        for line in p.stdout:
            out.append(line)
            if log is not None:
                log(line.rstrip("\n"))
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


@dataclass
class Bisection:
    """What `bisect` found. outcome: "found" (first_bad is set), "good-is-bad", "good-untestable",
    "bad-is-good", "bad-untestable" (end points; verdict is that end point's step code and why its
    reason), or "ambiguous" (no single first bad commit)."""
    outcome: str
    good_rev: str
    bad_rev: str
    good: str
    bad: str
    verdict: int | None = None
    why: str = ""
    first_bad: str = ""
    subject: str = ""
    skipped: list[tuple[str, str]] = field(default_factory=list)    # (sha, why)
    only_skipped_left: bool = False
    candidates: list[str] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)    # failing rows at the first bad (or GOOD)

    @property
    def aborted(self) -> bool:
        return self.verdict == ABORT


def format_bisection(b: Bisection) -> str:
    lines = []
    if b.outcome == "good-is-bad":
        lines.append(f"bisect: GOOD {b.good_rev} ({b.good[:12]}) is already over budget; "
                     f"no first bad commit in {b.good_rev}..{b.bad_rev}")
        lines.append(format_failures(b.failures))
    elif b.outcome == "good-untestable":
        lines.append(f"bisect: GOOD {b.good_rev} ({b.good[:12]}) cannot be tested: {b.why}")
    elif b.outcome == "bad-is-good":
        lines.append(f"bisect: BAD {b.bad_rev} ({b.bad[:12]}) is within budget; nothing to bisect")
    elif b.outcome == "bad-untestable":
        lines.append(f"bisect: BAD {b.bad_rev} ({b.bad[:12]}) cannot be tested: {b.why}")
    elif b.outcome == "ambiguous":
        lines.append("bisect: no single first bad commit found")
        if b.only_skipped_left:
            lines.append("  the first bad commit could be any of (untestable commits in between):")
            lines += [f"    {c}" for c in b.candidates]
        lines += [f"  skipped {c}: {why}" for c, why in b.skipped]
    else:
        lines.append(f"first bad commit: {b.first_bad}")
        if b.subject:
            lines.append(f"  {b.subject}")
        lines += [f"  skipped {c[:12]}: {why}" for c, why in b.skipped]
        lines.append(format_failures(b.failures))
    return "\n".join(lines)


def bisect(repo: str, good_rev: str, bad_rev: str, impl: str, cases: str, device: str = "cpu",
           build: str | None = None, log: Callable[[str], None] | None = None) -> Bisection:
    """Bisect REPO between GOOD_REV and BAD_REV in a temporary worktree (removed on every way
    out); step verdicts and git bisect's output stream to `log` as they come."""
    repo_dir, good, bad, prefix, cases = _validate(repo, good_rev, bad_rev, impl, cases)
    tmp = Path(tempfile.mkdtemp(prefix="harness-bisect-"))
    wt, results = tmp / "worktree", tmp / "results"
    step_cmd = [sys.executable, "-m", "harness.bisect", "--step", "--impl", impl, "--cases", cases,
                "--device", device, "--results", str(results)]
    if prefix:
        step_cmd += ["--prefix", prefix]
    if build:
        step_cmd += ["--build", build]
    found = dict(good_rev=good_rev, bad_rev=bad_rev, good=good, bad=bad)
    try:
        w = _git(repo_dir, "worktree", "add", "--detach", str(wt), good, check=False)
        if w.returncode != 0:                # e.g. a read-only repository: the user's to fix
            why = (w.stderr.strip().splitlines() or ["git worktree add failed"])[-1]
            raise UsageError(f"bisect: cannot add a worktree to {repo}: {why}")

        # The end points first: bisecting between two good (or two bad) commits says nothing.
        g = run_step(wt, impl, cases, device, results, build, prefix, log)
        if g != GOOD:
            why = _verdict_of(results, good)
            if g == BAD:
                return Bisection("good-is-bad", **found, verdict=g, why=why,
                                 failures=_failures(results / good))
            return Bisection("good-untestable", **found, verdict=g, why=why)
        _git(wt, "checkout", "--quiet", "--detach", bad)
        b = run_step(wt, impl, cases, device, results, build, prefix, log)
        if b != BAD:
            why = _verdict_of(results, bad)
            return Bisection("bad-is-good" if b == GOOD else "bad-untestable", **found, verdict=b, why=why)

        _git(wt, "bisect", "start", bad, good, "--")
        output = _bisect_run(wt, step_cmd, log)
        blog = _git(wt, "bisect", "log", check=False).stdout
        skipped = [(c, _verdict_of(results, c))
                   for c in re.findall(r"^# skip: \[([0-9a-f]{40})\]", blog, re.M)]

        m = _FIRST_BAD.search(output)
        if not m:
            only = "only 'skip'ped commits left" in output
            cands = re.findall(r"^([0-9a-f]{40})$", output, re.M) if only else []
            return Bisection("ambiguous", **found, skipped=skipped, only_skipped_left=only,
                             candidates=cands)
        first = m.group(1)
        subject = _git(repo_dir, "log", "-1", "--format=%s", first, check=False).stdout.strip()
        return Bisection("found", **found, first_bad=first, subject=subject, skipped=skipped,
                         failures=_failures(results / first))
    finally:
        _cleanup(repo_dir, wt, tmp)


if __name__ == "__main__":
    sys.exit(step_main())
