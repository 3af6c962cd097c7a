"""The pytest plugin (entry-point group pytest11, name `harness`): a kernel repository's whole gate is
one short test file,

    # tests/test_harness.py
    import harness.pytest_plugin as hp
    test_gated_norm = hp.suite("mykernel=mykernel.norm:make", cases="quick")

`suite(impl, cases)` is one pytest test per case (per case and implementation, given a list), its
id the case id and label. Each test runs its pair as `harness run` does (harness.pipeline.Pipeline,
the plan checked by harness.api.plan) and fails with an AssertionError whose message is the failure
record (harness.gate.failure_line: case id, output, reference, metric, value, budget, the worst
element's inputs in hex, the replay command); skip rows are pytest skips with their reason, and so
are the tests of an implementation for other devices than the machine's when the device is left to
it (`auto`; `harness run --device auto` exits 2 for it, as a test asking for the device fails).
`explore(impl)` is one hypothesis test over harness.cases.strategies.cases() under the active
profile (its database, health checks, max_examples ...; only the deadline is set).

Options: --harness-device, --harness-budgets FILE, --harness-out DIR (results.csv, summary.csv,
report.html of every pair the session ran), --harness-regen (writes the measured maxima, never below
the default budgets, to the --harness-budgets file at the end, keeping its lines of implementations
the session measured nothing of; tests over their default budget still fail, as pytest-regressions'
--force-regen does), --harness-isolate. Give paths in one token
(--harness-out=DIR): pytest takes an existing path among the arguments it does not know yet as a
rootdir candidate, and node ids (xdist workers') move with it.

Isolation (--harness-isolate auto, as the CLI): pairs run in one persistent worker per pytest
process and suite (harness.worker: the kernel's calls in one process, the references and checks in
another that never runs its code), so a kernel that crashes, exits, hangs or changes its process's
floating-point state is an error row or judged correctly, and the session goes on; it costs one
worker start (an interpreter importing torch) per pytest process and suite, not per test. `inline`
runs pairs in the pytest process: no start-up, but a kernel's crash or exit ends the session (an
os._exit(0) without xdist: with status 0, as if it had passed), and what it patches in the process
reaches the judging.

Sharding: `pytest -n N --dist loadgroup` (pytest-xdist); the tests of one compile key (hidden size
and dtypes, harness.schedule.compile_key) share an xdist_group, so each compile happens on one worker.
Each xdist worker gets one GPU, set as CUDA_VISIBLE_DEVICES before conftest files are imported:
worker gwK the K-th modulo the count of HARNESS_GPUS (a comma list of devices; "off" leaves
CUDA_VISIBLE_DEVICES alone), else of CUDA_VISIBLE_DEVICES' list, else of torch.cuda.device_count()
(NVML: CUDA stays uninitialised); with fewer than two GPUs nothing is set."""
from __future__ import annotations

import math
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["suite", "explore", "worker_gpu", "gpu_list"]

GPUS_ENV = "HARNESS_GPUS"
PARTS_ENV = "HARNESS_PYTEST_PARTS"      # where each process of a session keeps its rows (xdist workers inherit it)
MARK = "harness_case"
_KEY = pytest.StashKey["_Session"]()


# ---------------------------------------------------------------------------------------------
# One GPU per xdist worker.

def _split(value: str) -> list[str]:
    return [g.strip() for g in value.split(",") if g.strip()]


def gpu_list(env) -> list[str]:
    """The devices the workers share: HARNESS_GPUS, else CUDA_VISIBLE_DEVICES' entries (when set,
    even empty), else 0..torch.cuda.device_count()-1 (counted through NVML, so CUDA stays uninitialised)."""
    if env.get(GPUS_ENV, "").strip():
        return _split(env[GPUS_ENV])
    from harness.worker import visible_gpus
    return visible_gpus(env)


def worker_gpu(env) -> str | None:
    """The CUDA_VISIBLE_DEVICES of xdist worker gwK: the K-th device modulo their count; None outside
    xdist, with HARNESS_GPUS=off, or with fewer than two devices."""
    m = re.fullmatch(r"gw(\d+)", env.get("PYTEST_XDIST_WORKER", ""))
    if m is None or env.get(GPUS_ENV, "").strip().lower() == "off":
        return None
    gpus = gpu_list(env)
    return gpus[int(m[1]) % len(gpus)] if len(gpus) > 1 else None


def _pin_gpu() -> None:
    gpu = worker_gpu(os.environ)          # idempotent: once pinned, one device is visible
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu


# ---------------------------------------------------------------------------------------------
# The tests.

@dataclass(frozen=True, eq=False)           # one per suite() call, keyed by identity
class _Suite:
    impls: tuple
    cases: tuple                 # of Case
    ref: str                     # suite name or .toml path; "" for cases from no suite (replays by JSON)
    device: str | None
    math: str | None = None      # judge at this math class instead of the declared one


def _impl_name(impl) -> str:
    return impl.split("=", 1)[0] if isinstance(impl, str) else getattr(impl, "name", None) or impl.__name__


def case_test_id(case, impl_name: str = "") -> str:
    """The case id and its label, spaces as underscores (a node id usable on a command line)."""
    return f"{case.case_id}-{case.label.replace(' ', '_')}" + (f"-{impl_name}" if impl_name else "")


def group_name(case) -> str:
    """The xdist group of a case: its compile key, as text (h128-bf16-bf16-fp32-g128-norm)."""
    from harness.schedule import compile_key
    hidden, x, gate, weight, group, norm_first = compile_key(case)
    return f"h{hidden}-{x}-{gate}-{weight}-g{group}-{'norm' if norm_first else 'gate'}"


def suite(impl, cases="quick", *, device: str | None = None, math: str | None = None):
    """One test per case of `cases` (a suite name; a .toml path, absolute or relative to the current
    directory; or a list of Case) for `impl` (a built-in name, an entry point's name,
    NAME=MODULE:ATTR, a factory, or a list of these). `device`: the default of --harness-device; `math`:
    a math class ("fast", "accurate+ftz", ...) to judge at instead of the declared one."""
    from harness.cases.suite import load_suite
    ref = str(cases) if isinstance(cases, (str, Path)) else ""
    if ref and (Path(ref).suffix == ".toml" or Path(ref).exists()):
        ref = str(Path(ref).resolve())          # replay commands run from anywhere
    impls = tuple(impl) if isinstance(impl, (list, tuple)) else (impl,)
    s = _Suite(impls, load_suite(ref).cases if ref else tuple(cases), ref, device, math)
    many = len(s.impls) > 1
    params = [pytest.param(c, k, id=case_test_id(c, _impl_name(i) if many else ""),
                           marks=[pytest.mark.xdist_group(group_name(c)), getattr(pytest.mark, MARK)])
              for c in s.cases for k, i in enumerate(s.impls)]

    @pytest.mark.parametrize(("harness_case", "harness_impl"), params)
    def test(harness_case, harness_impl, harness_session):
        __tracebackhide__ = True
        harness_session.check(s, harness_impl, harness_case)
    return test


def explore(impl, strategy=None, *, device: str | None = None, deadline=None):
    """One hypothesis test: cases drawn from `strategy` (default harness.cases.strategies.cases()),
    each run as a suite's case is; a failure shrinks to a minimal case, printed as a suite entry.
    Settings are the active profile's (database, max_examples, health checks ...) except `deadline`
    (None: a pair's first call compiles). Cases the implementation does not support are rejected."""
    from hypothesis import given, note, reject, settings
    from harness.cases.strategies import cases as case_strategy
    s = _Suite((impl,), (), "", device)

    # parametrized, so that hypothesis keys its example database by this test's node id
    @pytest.mark.parametrize("harness_impl", [0], ids=[_impl_name(impl)])
    @settings(deadline=deadline)
    @given(case=strategy if strategy is not None else case_strategy())
    def test(harness_impl, case, harness_session):
        __tracebackhide__ = True
        note("# the case as a suite entry:\n" + case.to_toml())
        if not harness_session.check(s, harness_impl, case, skip=False):
            reject()
    return test


@pytest.fixture(scope="session")
def harness_session(request):
    return request.config.stash[_KEY]


# ---------------------------------------------------------------------------------------------
# The session: plans, pair runners and workers, rows.

class _Session:
    def __init__(self, config: pytest.Config):
        opt = config.getoption
        self.device, self.budgets = opt("harness_device", None), opt("harness_budgets", None)
        self.regen, self.isolate = opt("harness_regen", False), opt("harness_isolate", "auto")
        self.parts = Path(os.environ[PARTS_ENV]) if os.environ.get(PARTS_ENV) else None
        self.out, self.report, self._plans, self._pipes, self._rundir = opt("harness_out", None), [], {}, {}, None

    def plan(self, s: _Suite):
        """The suite's plan (its failure, in one line, in every test of it). With the device left to
        the machine (auto), an implementation that runs only on devices it lacks (`make.devices`)
        is left out of the plan (Plan.absent) and its tests skip, naming why, as CUDA-only tests
        skip on a machine without CUDA; with the device asked for, every test fails as the command
        exits 2."""
        from harness.api import plan
        from harness.references.errors import UsageError
        if s not in self._plans:
            asked = self.device or s.device or "auto"
            try:
                self._plans[s] = plan(list(s.impls), s.ref or list(s.cases), asked, math=s.math,
                                      budgets=None if self.regen else self.budgets, skip_other_devices=asked == "auto")
            except UsageError as e:
                self._plans[s] = e
        if isinstance(self._plans[s], Exception):       # every test of the suite says so, in one line
            pytest.fail(f"harness: {self._plans[s]}", pytrace=False)
        return self._plans[s]

    def rows(self, s: _Suite, k: int, case) -> list[dict]:
        from harness.analysis.check import rows as result_rows
        p = self.plan(s)
        absent = p.absent
        if k in absent:
            pytest.skip(f"harness: {absent[k]}")
        if s not in self._pipes:
            self._pipes[s] = _pipeline(p, self.isolate)
        rows = result_rows(self._pipes[s].run(case, p.impls[k - sum(j < k for j in absent)]))
        if self.parts is not None:
            if self._rundir is None:
                from harness.reports.rundir import RunDir
                self._rundir = RunDir(self.parts / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}").create()
            self._rundir.append_pair(rows)
        return rows

    def check(self, s: _Suite, k: int, case, skip: bool = True) -> bool:
        """Raise the failure record unless every check is within budget; False (or a pytest skip)
        where the implementation declined the case."""
        __tracebackhide__ = True
        import pandas as pd
        from harness.gate import by_severity, failure_line
        rows = self.rows(s, k, case)
        if rows and all(r["status"] == "skip" for r in rows):
            if skip:
                pytest.skip(f"{case.case_id}: {rows[0].get('reason') or 'not supported'}")
            return False
        bad = [r for r in rows if r["status"] in ("fail", "error")]
        if not bad:
            return True
        lines = [f"{case.case_id} [{case.label}]: {len(bad)} of {len(rows)} checks not within budget"]
        lines += [failure_line(r) for _, r in by_severity(pd.DataFrame(bad)).iterrows()]
        if self.regen:
            lines.append(_regen_note(bad, self.budgets))
        raise AssertionError("\n".join(lines))

    def close(self) -> None:
        for pipe in self._pipes.values():
            pipe.close()


def _regen_note(bad: list[dict], path: str) -> str:
    from harness.budgets import REGEN_GROWTH_CAP
    from harness.references.metrics import get
    values = [(float(r.get(get(r["budget_metric"]).column, math.nan)), float(r.get("budget", math.nan)))
              for r in bad if r["status"] == "fail"]
    grown = sum(math.isfinite(v) and v <= REGEN_GROWTH_CAP * b for v, b in values)
    kept = len(bad) - grown
    return (f"--harness-regen: {grown} check(s) over their default budget, their measured maxima go to {path} "
            f"at the end of the session; {kept} cannot be regenerated (error, non-finite, or beyond "
            f"{REGEN_GROWTH_CAP:g} x the default)")


def _threads() -> int:
    from harness.worker import cores
    return max(1, cores() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))


def _pipeline(p, isolate: str):
    """The suite's pipeline: its worker runs with this process's share of the cores and imports
    what the tests import; inline pairs under xdist use that share too."""
    from harness.pipeline.drive import Pipeline, isolated
    from harness.worker import worker_env
    if "PYTEST_XDIST_WORKER" in os.environ and not all(isolated(i, isolate) for i in p.impls):
        import torch
        torch.set_num_threads(_threads())           # N workers on the cores, not N x the cores
    env = worker_env(_threads(), _threads(), None)
    theirs = [q for q in env.get("PYTHONPATH", "").split(os.pathsep) if q]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(_project_paths() + theirs))
    return Pipeline(p.settings, isolate, env=env)


def _project_paths() -> list[str]:
    """This process's sys.path entries that are not the interpreter's own (pytest's rootdir and
    `pythonpath` entries, PYTHONPATH): the worker imports what the tests import."""
    import site
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    user = os.path.realpath(site.getusersitepackages()) if site.ENABLE_USER_SITE else None
    out = []
    for p in sys.path:
        r = os.path.realpath(p) if p else ""
        if r and r != user and not any(r == o or r.startswith(o + os.sep) for o in own):
            out.append(p)
    return out


# ---------------------------------------------------------------------------------------------
# Hooks.

def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("harness", "gated RMSNorm harness (harness.pytest_plugin)")
    g.addoption("--harness-device", choices=("auto", "cpu", "cuda"), help="device of the harness tests (default: the suite's, else auto)")
    g.addoption("--harness-budgets", metavar="FILE", help="budget file overriding the default budgets (with --harness-regen: the file written)")
    g.addoption("--harness-regen", action="store_true", help="write the measured maxima (never below the defaults) to the --harness-budgets file")
    g.addoption("--harness-out", metavar="DIR", help="write results.csv, summary.csv and report.html of the session's pairs here")
    g.addoption("--harness-isolate", choices=("auto", "process", "inline"), default="auto",
                help="pairs in a worker process per pytest process (auto: wherever the implementation can be sent to one) or inline")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    _pin_gpu()                                     # before a conftest could initialise CUDA


def pytest_configure(config: pytest.Config) -> None:
    _pin_gpu()                                     # loaded some other way (-p, pytest_plugins)
    config.addinivalue_line("markers", f"{MARK}: one case of a harness suite (harness.pytest_plugin)")
    config.addinivalue_line("markers", "xdist_group(name): pytest-xdist's --dist loadgroup group")
    if not hasattr(config, "workerinput"):         # the controller, or a run without xdist
        if config.getoption("harness_regen") and not config.getoption("harness_budgets"):
            raise pytest.UsageError("--harness-regen: name the budget file to write with --harness-budgets FILE")
        out = config.getoption("harness_out")
        os.environ.pop(PARTS_ENV, None)
        if out or config.getoption("harness_regen"):
            from harness.references.errors import UsageError
            from harness.reports.rundir import RunDir
            try:
                parts = RunDir(out).create("--harness-out").path / ".parts" if out else \
                    Path(tempfile.mkdtemp(prefix="harness-pytest-"))
            except UsageError as e:
                raise pytest.UsageError(str(e)) from None
            shutil.rmtree(parts, ignore_errors=True)
            parts.mkdir(parents=True)
            os.environ[PARTS_ENV] = str(parts)
    config.stash[_KEY] = _Session(config)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    st = session.config.stash.get(_KEY, None)
    if st is None:
        return
    st.close()
    if hasattr(session.config, "workerinput") or st.parts is None:
        return
    frame = _merge(st.parts)
    if st.out and len(frame):
        from harness.api import Results
        written = Results(frame, planned=len(frame[["case_id", "impl"]].drop_duplicates())).write(st.out)
        st.report.append(f"harness: wrote {', '.join(str(p) for p in written)}")
    if st.regen and len(frame) and _write_budgets(st, frame):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED        # a key that could not grow
    shutil.rmtree(st.parts, ignore_errors=True)


def _merge(parts: Path):
    import pandas as pd
    from harness.reports.rundir import read_results
    frames = [read_results(f) for f in sorted(parts.glob("*/results.csv"))]     # one per process
    return pd.concat(frames, ignore_index=True).sort_values(["case_id", "impl"], kind="stable").reset_index(drop=True) \
        if frames else pd.DataFrame()


def _write_budgets(st: _Session, frame) -> bool:
    """--harness-regen: the budget file from every row of the session, and the lines it had for
    implementations the session measured nothing of (one whose tests skipped for the machine's
    device, or another test file's) as they were; True when a key was refused."""
    from harness.budgets import FILE_COLUMNS, budget_file_text, load_budget_file, refusal, regen
    from harness.references.atomic import atomic_write
    from harness.references.errors import UsageError
    lines, grown, refused = regen(frame)
    measured = set(frame["impl"])
    if Path(st.budgets).is_file():
        try:
            lines += [{c: getattr(o, c) for c in FILE_COLUMNS}
                      for o in load_budget_file(st.budgets) if o.impl != "*" and o.impl not in measured]
        except UsageError as e:                   # a file regen is asked to write anew
            st.report.append(f"harness: {e}: none of its lines kept")
    with atomic_write(st.budgets, "w") as fh:
        fh.write(budget_file_text(lines))
    st.report += [f"harness: grew {','.join(map(str, k))}: {old:.4g} -> {new:.4g}" for k, new, old in grown]
    st.report += [f"harness: {refusal(k, new, old)}" for k, new, old in refused]
    st.report.append(f"harness: wrote {len(lines)} budgets to {st.budgets}")
    return bool(refused)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    st = config.stash.get(_KEY, None)
    lines = list(st.report) if st is not None else []
    ours = [r for rs in terminalreporter.stats.values() for r in rs if MARK in getattr(r, "keywords", {})]
    dist = config.getoption("dist", "no")
    if ours and dist == "load":
        lines.append("harness: add --dist loadgroup to keep the cases of one compile key on one xdist worker")
    if dist == "loadgroup" and any("@" not in r.nodeid for r in ours):
        lines.append("harness: pytest-xdist did not group the harness tests by compile key (pytest-xdist#1386: "
                     "pytest 9.2 with xdist 3.8); verdicts are the same, compiles repeat on every worker")
    for ln in lines:
        terminalreporter.write_line(ln)


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        os.environ.pop(PARTS_ENV, None)
