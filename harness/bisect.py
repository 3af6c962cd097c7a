"""`harness bisect REPO GOOD BAD --impl SPEC`: find the first commit of REPO at which a plug-in
implementation goes over budget. SPEC is NAME=MODULE:ATTR or the name of an installed entry point
(group harness.impls), which is looked up here once and then judged as NAME=MODULE:ATTR, so that
MODULE is imported from each commit, not from what is installed.

Everything happens in a temporary linked worktree of REPO, so the user's checkout, index, branch
and bisect state are never touched; the worktree is removed (and pruned) on every way out, and no
process bisect starts writes bytecode (no __pycache__ in REPO or the worktree). Each commit is
judged by a fresh process (harness.bisect_judge) with the commit's import roots first (REPO's src/
when the commit has one, and REPO; or the --path entries); it stops at the first check over budget,
and each verdict line names the file MODULE was imported from. Error rows alone (the
implementation raised), a judge that ends without a verdict (a crash, a hang) and a failed --build
make a commit untestable (skip).

Step exit codes follow `git bisect run`: 0 good, 1 bad, 125 skip (build failed, MODULE does not
import, usage error), 128 abort (interrupted)."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.bisect_judge import BAD, CODES, GOOD, PAIR_TIMEOUT, SKIP, import_roots, write_json
from harness.references.errors import UsageError

ABORT = 128
_NAMES = {GOOD: "good", BAD: "bad", SKIP: "skip", ABORT: "abort"}
# A judge that ended this way was interrupted (the user's Ctrl-C reaches the whole process group):
# the bisection stops instead of skipping the commit.
_INTERRUPTED = {130, -signal.SIGINT, -signal.SIGTERM, -signal.SIGHUP}
_FIRST_BAD = re.compile(r"^([0-9a-f]{40}) is the first bad commit", re.M)
# Git variables that would point our git calls at some other repository than REPO/the worktree.
_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_PREFIX")


def _clean_env() -> dict:
    """The environment of every process bisect starts: no git variable pointing at another
    repository, and PYTHONDONTWRITEBYTECODE=1, so that no Python process of a bisection writes
    bytecode — not the judge importing the commit's package, nor a `git bisect run` step whose
    start-up imports a sitecustomize or an editable install's finder (REPO stays as it was, and a
    stray __pycache__ in the worktree could block the next checkout)."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _git(cwd, *args, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, env=_clean_env())
    if check and p.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


# ---------------------------------------------------------------------------------------------
# One step: the commit checked out in the worktree, judged by a fresh process.

def run_step(worktree: Path, impl: str, cases: str, device: str, results_root: Path,
             build: str | None = None, prefix: str = "", paths=(), log: Callable[[str], None] | None = None,
             budgets: str | None = None) -> int:
    """Judge the commit checked out in `worktree` (against the budget file `budgets`, an absolute
    path outside the worktree, where given); results go to results_root/<sha>/, its verdict line to
    `log` when given."""
    sha = _git(worktree, "rev-parse", "HEAD").stdout.strip()
    out = Path(results_root) / sha
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cwd = Path(worktree) / prefix if prefix else Path(worktree)
    roots = import_roots(cwd, paths)
    env = _clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(r) for r in roots] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with open(out / "step.log", "w") as fh:
        if build:
            b = subprocess.run(build, shell=True, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
            if b.returncode != 0:
                return _note(out, sha, SKIP, f"--build exited {b.returncode}", "", cwd, roots, log)
        fh.flush()
        cmd = [sys.executable, "-P", "-m", "harness.bisect_judge", "--impl", impl, "--cases", cases,
               "--device", device, "--out", str(out)] + [a for r in roots for a in ("--root", str(r))]
        cmd += ["--budgets", budgets] if budgets else []
        r = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        v = json.loads((out / "judge.json").read_text())
    except (OSError, ValueError):
        v = None
    if v is None or r.returncode in _INTERRUPTED:
        if r.returncode in _INTERRUPTED:
            return _note(out, sha, ABORT, "interrupted", "", cwd, roots, log)
        from harness.worker import describe_exit
        current = (out / "current").read_text() if (out / "current").is_file() else "start-up"
        why = (f"the judge ended without a verdict during {current}: {describe_exit(r.returncode)} "
               f"(or a pair ran past {PAIR_TIMEOUT:g} s); see step.log")
        return _note(out, sha, SKIP, why, "", cwd, roots, log)
    return _note(out, sha, CODES[v["verdict"]], v["why"], v.get("imported", ""), cwd, roots, log)


def _note(out: Path, sha: str, code: int, why: str, imported: str, tree: Path, roots, log) -> int:
    where = ""
    if imported:
        try:
            where = f"{Path(imported).resolve().relative_to(tree.resolve())} of the commit"
        except ValueError:
            where = imported
    rel = [os.path.relpath(r, tree) for r in roots]
    write_json(out / "step.json", {"code": code, "why": why, "imported": where, "roots": rel})
    if log is not None:
        log(f"bisect: {sha[:12]} {_NAMES[code]}: {why}" + (f" (imported {where})" if where else ""))
    return code


def _step(results_root: Path, sha: str) -> dict:
    f = results_root / sha / "step.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def _check_of(results_root: Path, sha: str) -> str:
    f = results_root / sha / "judge.json"
    return json.loads(f.read_text()).get("check", "") if f.is_file() else ""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def step_main(argv: list[str] | None = None) -> int:
    """Entry point of the per-commit process that `git bisect run` starts: its own CLI, so it owns
    its stderr and exit code (git bisect run's)."""
    p = argparse.ArgumentParser(prog="python -m harness.bisect --step")
    p.add_argument("--step", action="store_true", required=True)
    for opt in ("--impl", "--cases", "--results"):
        p.add_argument(opt, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--prefix", default="", help="REPO's path inside its work tree")
    p.add_argument("--build")
    p.add_argument("--path", action="append", default=[])
    p.add_argument("--budgets")
    a = p.parse_args(argv)
    try:
        top = Path(_git(Path.cwd(), "rev-parse", "--show-toplevel").stdout.strip())
        return run_step(top, a.impl, a.cases, a.device, Path(a.results), a.build, a.prefix, a.path, log=_stderr,
                        budgets=a.budgets)
    except KeyboardInterrupt:
        return ABORT
    except Exception as e:                   # never report a harness crash as a bad commit
        _stderr(f"bisect: step failed: {type(e).__name__}: {e}")
        return ABORT


# ---------------------------------------------------------------------------------------------
# The command.

def plugin_spec(impl: str) -> str:
    """NAME=MODULE:ATTR as given, or an installed entry point's name as NAME=MODULE:ATTR (its value
    from the installed metadata; the module is then imported from each commit); either may end in
    `@CLASS`, the math class every commit is judged at (validated here, before any checkout)."""
    import importlib.metadata
    from harness.impls.registry import PLUGIN_SPEC, ENTRY_POINT_GROUP
    from harness.references.mathclass import parse_math
    base, at, label = impl.rpartition("@") if "@" in impl else (impl, "", "")
    if at:
        try:
            label = "@" + parse_math(label).label      # a math class other than the declared one
        except UsageError as e:
            raise UsageError(f"bisect: --impl {impl!r}: {e}") from None
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    spec = f"{base}={eps[base].value}" if base in eps else base
    m = PLUGIN_SPEC.match(spec)
    if m and m["module"].split(".")[0] == "harness":
        raise UsageError(f"bisect: --impl {impl!r}: its module {m['module']!r} is the harness's own; "
                         f"bisect judges a module of REPO")
    if m:
        return spec + label
    raise UsageError(f"bisect: --impl {impl!r}: expected NAME=MODULE:ATTR (a plug-in imported from REPO's "
                     f"work tree) or an installed entry point's name ({ENTRY_POINT_GROUP})")


def _validate(repo_arg: str, good_rev: str, bad_rev: str, impl: str, cases: str, budgets: str | None = None):
    repo = Path(repo_arg)
    if not repo.is_dir():
        raise UsageError(f"bisect: {repo_arg}: not a directory")
    if _git(repo, "rev-parse", "--git-dir", check=False).returncode != 0:
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
    spec = plugin_spec(impl)
    from harness.cases.suite import load_suite, resolve_suite_path
    path = resolve_suite_path(cases)         # UsageError for a missing file / unknown suite
    load_suite(cases)                        # ... and for a malformed one, before any commit runs
    if Path(cases).suffix == ".toml" or Path(cases).exists():
        cases = str(path.resolve())          # the steps run in the worktree, not here
    if budgets is not None:
        from harness.budgets import load_budget_file
        load_budget_file(budgets)            # UsageError for a missing or malformed file, before any commit
    return repo.resolve(), shas["GOOD"], shas["BAD"], prefix, cases, spec, budgets


def _bisect_run(wt: Path, step_cmd: list[str], log: Callable[[str], None] | None = None) -> str:
    """`git bisect run`, its progress lines (the steps' verdicts, git's "Bisecting: ...") streamed to
    `log` as they come; all of its output returned for parsing."""
    p = subprocess.Popen(["git", "-C", str(wt), "bisect", "run", *step_cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=_clean_env())
    out = []
    try:
        for line in p.stdout:
            out.append(line)
            if log is not None and line.startswith(("bisect: ", "Bisecting: ")):
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
    reason), or "ambiguous" (no single first bad commit). check: the one failing check that decided
    the first bad commit (or GOOD's), with its replay command."""
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
    check: str = ""
    imported: str = ""
    roots: list[str] = field(default_factory=list)                  # import roots, relative to REPO

    @property
    def aborted(self) -> bool:
        return self.verdict == ABORT


def _decided_by(b: Bisection, sha: str) -> list[str]:
    lines = ["  decided by: " + (b.check or "(no failing check recorded)").replace("\n", "\n  ")]
    lines.append(f"  (replay at {sha[:12]} with PYTHONPATH={os.pathsep.join(b.roots) or '.'}; "
                 f"the judge imported {b.imported or 'the plug-in'})")
    return lines


def format_bisection(b: Bisection) -> str:
    lines = []
    if b.outcome == "good-is-bad":
        lines.append(f"bisect: GOOD {b.good_rev} ({b.good[:12]}) is already over budget; "
                     f"no first bad commit in {b.good_rev}..{b.bad_rev}")
        lines += _decided_by(b, b.good)
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
        lines += [f"  skipped {c[:12]}: {why}" for c, why in b.skipped]
    else:
        lines.append(f"first bad commit: {b.first_bad}")
        if b.subject:
            lines.append(f"  {b.subject}")
        lines += _decided_by(b, b.first_bad)
        lines += [f"  skipped {c[:12]}: {why}" for c, why in b.skipped]
    return "\n".join(lines)


def bisect(repo: str, good_rev: str, bad_rev: str, impl: str, cases: str, device: str = "cpu",
           build: str | None = None, log: Callable[[str], None] | None = None, paths=(),
           budgets: str | None = None) -> Bisection:
    """Bisect REPO between GOOD_REV and BAD_REV in a temporary worktree (removed on every way
    out); step verdicts and git bisect's output stream to `log` as they come. `budgets`: the budget
    file every commit is judged against, as `harness run --budgets`: the file given, as this call
    found it (copied once), so that a repository that gates on a budget file is bisected against
    the same budgets, whatever each commit's copy says or a build does to it."""
    repo_dir, good, bad, prefix, cases, spec, budgets = _validate(repo, good_rev, bad_rev, impl, cases, budgets)
    tmp = Path(tempfile.mkdtemp(prefix="harness-bisect-"))
    wt, results = tmp / "worktree", tmp / "results"
    given, budgets = budgets, (str(tmp / "budgets.csv") if budgets is not None else None)
    # -P: the worktree, the steps' working directory, is not put first on the path (a `harness`
    # folder in the repository bisected is never the harness that judges it)
    step_cmd = [sys.executable, "-P", "-m", "harness.bisect", "--step", "--impl", spec, "--cases", cases,
                "--device", device, "--results", str(results)]
    step_cmd += ["--prefix", prefix] if prefix else []
    step_cmd += ["--build", build] if build else []
    step_cmd += [a for p in paths for a in ("--path", p)]
    step_cmd += ["--budgets", budgets] if budgets else []
    found = dict(good_rev=good_rev, bad_rev=bad_rev, good=good, bad=bad)
    try:
        if given is not None:                # the file as the command found it, for every commit: an edit
            shutil.copyfile(given, budgets)  # meanwhile (to a file in REPO's checkout) changes no verdict
        w = _git(repo_dir, "worktree", "add", "--detach", str(wt), good, check=False)
        if w.returncode != 0:                # e.g. a read-only repository: the user's to fix
            why = (w.stderr.strip().splitlines() or ["git worktree add failed"])[-1]
            raise UsageError(f"bisect: cannot add a worktree to {repo}: {why}")

        def step() -> int:
            return run_step(wt, spec, cases, device, results, build, prefix, paths, log, budgets)

        def decided(sha: str) -> dict:
            s = _step(results, sha)
            return dict(check=_check_of(results, sha), imported=s.get("imported", ""), roots=s.get("roots", []))

        # The end points first: bisecting between two good (or two bad) commits says nothing.
        g = step()
        if g != GOOD:
            why = _step(results, good).get("why", "")
            if g == BAD:
                return Bisection("good-is-bad", **found, verdict=g, why=why, **decided(good))
            return Bisection("good-untestable", **found, verdict=g, why=why)
        _git(wt, "checkout", "--quiet", "--detach", bad)
        b = step()
        if b != BAD:
            why = _step(results, bad).get("why", "")
            return Bisection("bad-is-good" if b == GOOD else "bad-untestable", **found, verdict=b, why=why)

        start = _git(wt, "bisect", "start", bad, good, "--").stdout
        # Adjacent end points: git names the first bad commit at once (a run would judge BAD again).
        output = start if _FIRST_BAD.search(start) else _bisect_run(wt, step_cmd, log)
        blog = _git(wt, "bisect", "log", check=False).stdout
        skipped = [(c, _step(results, c).get("why", ""))
                   for c in re.findall(r"^# skip: \[([0-9a-f]{40})\]", blog, re.M)]
        m = _FIRST_BAD.search(output)
        if not m:
            only = "only 'skip'ped commits left" in output
            cands = re.findall(r"^([0-9a-f]{40})$", output, re.M) if only else []
            return Bisection("ambiguous", **found, skipped=skipped, only_skipped_left=only, candidates=cands)
        first = m.group(1)
        subject = _git(repo_dir, "log", "-1", "--format=%s", first, check=False).stdout.strip()
        return Bisection("found", **found, first_bad=first, subject=subject, skipped=skipped, **decided(first))
    finally:
        _cleanup(repo_dir, wt, tmp)


if __name__ == "__main__":
    sys.exit(step_main())
