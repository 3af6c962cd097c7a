"""The Python API (SPEC §6): `verify` runs a sweep and returns `Results`; `assert_verified` raises
an AssertionError whose message is the failure record itself. The command line's `harness run` is
built on `verify`; the pytest plugin on `plan` and `verify_case`.

`impl` is a built-in name, an installed entry point's name, `NAME=MODULE:ATTR`, a factory (its
declared attributes as a plug-in's), or an Implementation. `math` (a math class: "accurate",
"fast", "accurate+ftz", "fast+ftz") judges every implementation at that class instead of its
declared one, as `--impl SPEC@CLASS` does. Every argument is checked here, before any work, with a
UsageError naming the bad one."""
from __future__ import annotations

import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from harness.cases.case import Case, distinct
from harness.gate import KEY, apply_baseline, failure_line, verdict
from harness.impls.base import Implementation, from_factory
from harness.pipeline.settings import Settings
from harness.references.accel import BACKENDS
from harness.references.errors import UsageError
from harness.reports.outputs import RunData, formats, write_outputs
from harness.reports.rundir import RunDir, read_results
from harness.reports.schema import gated_columns, missing_columns
from harness.reports.summary import summarize
from harness.runner import Sweep, SweepResult, run_sweep
from harness.schedule import shard
from harness.worker import DEFAULT_TIMEOUT, base_env, visible_gpus

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


@dataclass
class Results:
    """A sweep's outcome. `frame`: the results.csv rows; `ok`: every planned pair finished and every
    check within budget (skips aside); `failures`: the fail and error rows of the checks that count
    (against the exact value and the declared model). A command that decides its own exit code
    (harness identify) sets `command_exit` and the `headline` its report leads with."""
    frame: pd.DataFrame
    planned: int = 0
    unfinished: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    suite: str = ""
    title: str = ""
    env: dict = field(default_factory=dict)
    baseline: pd.DataFrame | None = None
    command_exit: int | None = None
    headline: list = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.command_exit is not None:
            return self.command_exit
        if self.unfinished:
            return EXIT_USAGE
        return verdict(self.frame)[0]

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def failures(self) -> pd.DataFrame:
        if self.frame.empty:
            return self.frame
        from harness.reports.summary import gated
        return self.frame[self.frame["status"].isin(["fail", "error"]) & gated(self.frame)]

    def verdict_lines(self) -> list[str]:
        lines = verdict(self.frame)[1]
        if self.baseline is not None and len(self.frame) and "baseline_value" in self.frame.columns:
            compared = self.frame[self.frame["baseline_value"].notna()]
            if compared.empty:
                lines.append("harness: note: --baseline: no check of this run has a value there to compare with "
                             "(other implementations, cases or metrics): nothing was compared")
            elif "device" in compared.columns and "device" in self.baseline.columns:
                theirs = self.baseline.merge(compared[KEY], on=KEY)["device"]
                theirs, ours = (sorted({str(v) for v in d.dropna()} - {""}) for d in (theirs, compared["device"]))
                if theirs and ours and theirs != ours:
                    lines.append(f"harness: note: --baseline: its checks ran on {', '.join(theirs)}, this run's on "
                                 f"{', '.join(ours)}: compared all the same (another device's kernels round otherwise)")
        if self.unfinished:
            lines.append(f"harness: error: {len(self.unfinished)} of {self.planned} planned pairs did not finish")
        return lines

    def write(self, directory, report: bool = True, data: RunData | None = None,
              results_written: bool = False) -> list[Path]:
        """results.csv, summary.csv and (unless report=False) report.html in `directory`; `data`:
        run_data() if already made; `results_written`: results.csv there already holds `frame`
        (the sweep wrote it), and is not written again."""
        rd = RunDir(directory).create("write")
        if not results_written:
            rd.write_results(self.frame)
        return [rd.results] + write_outputs(rd.path, data or self.run_data(), skip=() if report else ("report",))

    def write_report(self, directory, data: RunData | None = None) -> Path:
        """report.html alone, in `directory`."""
        path = Path(directory) / formats()["report"].filename
        formats()["report"].write(data or self.run_data(), path)
        return path

    def run_data(self) -> RunData:
        return RunData(self.frame, summarize(self.frame), self.exit_code, self.title, self.env, self.baseline,
                       self.suite, tuple(self.headline))

    def write_junit(self, path, data: RunData | None = None) -> Path:
        formats()["junit"].write(data or self.run_data(), Path(path))
        return Path(path)


def as_implementation(impl) -> Implementation:
    """An Implementation from whatever `verify` accepts."""
    from harness.impls.registry import check_name, resolve
    if isinstance(impl, Implementation):
        check_name(impl.name)
        return impl
    if isinstance(impl, str):
        return resolve(impl)
    if callable(impl):
        name = check_name(getattr(impl, "__name__", "impl"))
        module, qual = getattr(impl, "__module__", None), getattr(impl, "__qualname__", "")
        spec = f"{name}={module}:{qual}" if module and module != "__main__" and "<" not in qual else ""
        return from_factory(name, impl, f"{module}:{qual}", spec=spec)
    raise UsageError(f"impl {impl!r}: expected a name, NAME=MODULE:ATTR, or a factory")


def resolve_device(device: str) -> str:
    import torch
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device {device!r}: one of auto, cpu, cuda")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device available")
    return device


def load_baseline(path: str | None) -> pd.DataFrame | None:
    if not path:
        return None
    p = Path(path)
    f = p / "results.csv" if p.is_dir() else p
    if not f.is_file():
        raise UsageError(f"--baseline {path}: no results.csv there")
    df = read_results(f)
    if missing := missing_columns(df, ["budget_metric", "budget", *gated_columns(df)]):
        raise UsageError(f"--baseline {f}: no column {missing[0]!r}: nothing to compare against")
    return df


@dataclass
class Plan:
    """A checked request: what `verify` runs (also the pytest plugin's per-case tests)."""
    impls: list[Implementation]
    cases: list[Case]
    suite: str
    settings: Settings
    baseline: pd.DataFrame | None = None
    # positions in the implementations given -> why each is not in `impls`: those that run only on
    # other devices than this one, left out with skip_other_devices (else a usage error)
    absent: dict = field(default_factory=dict)


def _case_list(cases) -> list[Case]:
    """Cases given as objects: each a Case (a usage error names the first that is not), each once."""
    cases = list(cases)                        # a generator is read once
    for i, c in enumerate(cases):
        if not isinstance(c, Case):
            raise UsageError(f"cases[{i}]: a {type(c).__name__}, expected a Case (or give a suite's name or path)")
    return distinct(cases)


def plan(impls, cases="quick", device="auto", budgets=None, baseline=None, golden=None,
         reference_backend="auto", shard_spec: tuple[int, int] | None = None, shard_by: str = "case",
         repeats: int | None = None, allow_nondeterministic: bool = False, math: str | None = None,
         skip_other_devices: bool = False) -> Plan:
    """Every input checked, for every implementation given, before anything runs. With
    skip_other_devices (the pytest plugin, its device left to the machine), an implementation that
    runs only on other devices than this one (`make.devices`) is left out (Plan.absent) instead of
    a usage error; one not installed is still an error."""
    from harness.budgets import load_budget_file
    from harness.cases.suite import load_suite
    from harness.references.mathclass import parse_math
    device = resolve_device(device)
    impl_list = [as_implementation(i) for i in (impls if isinstance(impls, (list, tuple)) else [impls])]
    if math is not None:
        mc = parse_math(math)
        impl_list = [i.with_math(mc) for i in impl_list]
    names = [i.name for i in impl_list]
    if len(set(names)) != len(names):
        raise UsageError(f"--impl: a name given twice ({', '.join(names)})")
    absent = {}
    for k, i in enumerate(impl_list):
        why = i.skip_reason(device)
        if why and skip_other_devices and not i.unavailable:
            absent[k] = f"{why} (the machine's device; --harness-device to insist)"
        elif why:
            raise UsageError(f"--impl {i.name}: {why}")
    impl_list = [i for k, i in enumerate(impl_list) if k not in absent]
    if reference_backend not in BACKENDS:
        raise UsageError(f"--reference-backend {reference_backend!r}: one of {', '.join(BACKENDS)}")
    if isinstance(cases, str):
        suite = load_suite(cases)
        case_list, suite_ref, suite_name = list(suite.cases), cases, suite.name
    else:
        case_list, suite_ref, suite_name = _case_list(cases), "", "cases"
    if shard_spec:
        case_list = shard(case_list, *shard_spec, by=shard_by)
    overrides = tuple(load_budget_file(budgets)) if budgets else ()
    base = load_baseline(baseline)
    if golden is not None:
        RunDir(golden).create("--golden")
    if repeats is not None and repeats < 0:
        raise UsageError(f"--repeats {repeats}: need 0 or more")
    from harness.impls.source import source_hash
    settings = Settings(device, overrides, budgets or "", Path(golden) if golden else None, reference_backend,
                        suite_ref, {i.name: i.spec for i in impl_list if i.spec},
                        {i.name: source_hash(i) for i in impl_list}, repeats, allow_nondeterministic)
    return Plan(impl_list, case_list, suite_name, settings, base, absent)


def check_run_options(jobs=1, timeout=DEFAULT_TIMEOUT, threads=None, gpus=()) -> None:
    if jobs < 1:
        raise UsageError(f"--jobs {jobs}: need at least 1")
    if not (0 < timeout <= threading.TIMEOUT_MAX):    # what a wait can be given
        raise UsageError(f"--timeout {timeout}: need a positive, finite number of seconds "
                         f"(at most {threading.TIMEOUT_MAX:.3g})")
    if threads is not None and threads < 1:
        raise UsageError(f"--threads {threads}: need at least 1")
    shown = ",".join(map(str, gpus))
    if any(not isinstance(g, int) or g < 0 for g in gpus):
        raise UsageError(f"--gpus {shown}: GPU indices are integers >= 0")
    twice = sorted(g for g, n in Counter(gpus).items() if n > 1)
    if twice:       # worker k goes to GPU k mod N: a repeated index would double one GPU's share
        raise UsageError(f"--gpus {shown}: GPU {', '.join(map(str, twice))} given more than once")
    seen = visible_gpus() if gpus else []
    beyond = sorted(g for g in set(gpus) if g >= len(seen))
    if beyond:      # its workers would see no GPU
        listed = base_env().get("CUDA_VISIBLE_DEVICES")
        where = f"CUDA_VISIBLE_DEVICES={listed!r}" if listed is not None else "the machine's"
        n = len(seen)
        sees = "no GPU" if n == 0 else f"{n} GPU{'s' if n > 1 else ''}, numbered from 0"
        raise UsageError(f"--gpus {shown}: this command sees {sees} ({where}); "
                         f"{', '.join(map(str, beyond))} {'is' if len(beyond) == 1 else 'are'} not among them")


def run_plan(p: Plan, out=None, *, resume=False, jobs=1, timeout=DEFAULT_TIMEOUT, isolate="auto", threads=None,
             gpus=(), progress: Callable | None = None, log: Callable | None = None) -> Results:
    check_run_options(jobs, timeout, threads, gpus)
    tmp = None
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="harness-")
        out = tmp.name
    rd = RunDir(out).create().check_outputs()
    try:
        with rd.lock():
            settings = replace(p.settings, timeout=None if timeout == DEFAULT_TIMEOUT else timeout)
            sw = Sweep(p.cases, p.impls, settings, rd, resume, jobs, timeout, isolate, threads, tuple(gpus))
            res: SweepResult = run_sweep(sw, progress, log)
            frame = res.results
            if p.baseline is not None and len(frame):
                frame = apply_baseline(frame, p.baseline)
                rd.write_results(frame)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return Results(frame, res.planned, res.unfinished, res.timings, p.suite, baseline=p.baseline)


def verify(impl, *, cases="quick", device="auto", budgets=None, baseline=None, out=None, jobs=1,
           timeout=DEFAULT_TIMEOUT, isolate="auto", golden=None, reference_backend="auto", repeats=None,
           allow_nondeterministic=False, math=None) -> Results:
    """Run `cases` (a suite name or .toml path, or a list of Case) for `impl` and gate on the budgets
    (default: derived from the declared rounding model and math class; `budgets`: a budget file)
    and, given one, a baseline results directory. `out`: where results.csv goes (a temporary
    directory if None). `math`: judge at this math class instead of the declared one. An output
    that a later call on the same inputs changes fails unless `allow_nondeterministic`."""
    p = plan(impl, cases, device, budgets, baseline, golden, reference_backend, repeats=repeats,
             allow_nondeterministic=allow_nondeterministic, math=math)
    return run_plan(p, out, jobs=jobs, timeout=timeout, isolate=isolate)


def failure_message(results: Results) -> str:
    """The failure record of every failing check: case id, output, reference, metric, value, budget,
    the worst element's inputs in hex, the replay command."""
    from harness.gate import by_severity
    bad = by_severity(results.failures)
    head = f"{len(bad)} of {len(results.frame)} checks not within budget" if len(bad) else "not every pair finished"
    lines = [head] + [failure_line(r) for _, r in bad.iterrows()]
    if results.unfinished:
        lines.append(f"unfinished pairs: {', '.join(f'{c} {i}' for c, i in results.unfinished[:10])}")
    return "\n".join(lines)


def assert_verified(impl, **kwargs) -> Results:
    """verify(impl, **kwargs); AssertionError listing each failing check unless every check passes."""
    results = verify(impl, **kwargs)
    if not results.ok:
        raise AssertionError(failure_message(results))
    return results
