"""What several subcommands share: loading the --impl values under a deadline, parsing --shard,
--gpus and the repeatability flags, checking an output file's path before the work, and finishing a
sweep (summary, verdict, files, exit code)."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

from harness.api import Results, as_implementation, check_run_options, resolve_device
from harness.commands import EXIT_USAGE, err
from harness.commands.phases import share_line
from harness.environment import environment
from harness.references.errors import UsageError
from harness.reports.summary import summary_table
from harness.supervise import send
from harness.worker import kill_tree


@contextmanager
def deadline(seconds: float, what: str, hint: str = ""):
    """The block, or — if it has not ended after `seconds` — one line saying that `what` did not
    finish, and the process's end with exit 2: for a step no pair's timeout covers, which the
    command cannot interrupt (an import that hangs holds the main thread). Every process below the
    command ends with it (its workers, what the hanging code started: the exit handlers that would
    end them do not run); nothing has been written yet where this is used."""
    ended = threading.Event()

    def expire():
        if not ended.wait(seconds):
            err(f"harness: {what} did not finish within {seconds:g} s (--timeout){hint}")
            kill_tree(os.getpid(), False)
            send(EXIT_USAGE)
            os._exit(EXIT_USAGE)
    threading.Thread(target=expire, name="deadline", daemon=True).start()
    try:
        yield
    finally:
        ended.set()


def load_impls(specs: list[str], timeout: float, device: str) -> list:
    """The --impl values as Implementations, each loaded within `timeout` seconds: a plug-in's or an
    entry point's module is imported here, in the command's own process, to read its declarations
    (a pair's --timeout covers only what runs in a worker). --timeout and --device are checked
    first: a bad one is said as such, not as the failure of an import that needed it."""
    check_run_options(timeout=timeout)
    resolve_device(device)
    out = []
    for spec in specs:
        with deadline(timeout, f"--impl {spec}: loading it", ": does its module's import hang?"):
            out.append(as_implementation(spec))
    return out


def parse_shard(s: str | None) -> tuple[int, int] | None:
    if not s:
        return None
    try:
        k, n = (int(v) for v in s.split("/"))
    except ValueError:
        raise UsageError(f"--shard {s!r}: expected K/N, e.g. 1/4") from None
    if not (n >= 1 and 1 <= k <= n):
        raise UsageError(f"--shard {s!r}: need 1 <= K <= N")
    return k, n


def parse_gpus(s: str | None) -> tuple[int, ...]:
    """--gpus as indices; which lists are valid is check_run_options' to say (the API's too)."""
    if not s:
        return ()
    try:
        return tuple(int(v) for v in s.split(","))
    except ValueError:
        raise UsageError(f"--gpus {s!r}: expected GPU indices, e.g. 0,1") from None


def nondeterminism(args) -> bool:
    """--allow-nondeterministic; --require-repeatable (the default now) cannot be given with it."""
    if args.allow_nondeterministic and args.require_repeatable:
        raise UsageError("--allow-nondeterministic and --require-repeatable contradict each other: give one")
    return args.allow_nondeterministic


def check_output_file(flag: str, path: str | None) -> None:
    """An output file's path must be writable before the work starts (not a directory)."""
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a directory, expected a file path")
    if not p.parent.exists():
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{flag} {path}: cannot create its directory ({e.strerror or e})") from None
    if not p.parent.is_dir():               # (whether it may be written is the write's to say: ACLs, NFS)
        raise UsageError(f"{flag} {path}: {p.parent} is not a directory")


def timing_line(timings: dict[str, float], impl_names: list[str]) -> str:
    impl = {n: timings.get(f"impl:{n}", 0.0) for n in impl_names}
    return ("harness: time " + ", ".join([
        f"{timings.get('wall', 0.0):.1f} s", f"references {timings.get('references', 0.0):.1f} s",
        f"implementations {sum(impl.values()):.1f} s (" + ", ".join(f"{n} {t:.1f}" for n, t in impl.items()) + ")",
        f"analysis {timings.get('analysis', 0.0):.1f} s (mpmath {timings.get('mpmath', 0.0):.1f} s)"])
        + (f", {int(timings.get('jobs', 1))} workers" if timings.get("jobs", 1) > 1 else ""))


def finish(results: Results, out: Path, device: str, impls, title: str, junit: str | None, no_report: bool,
           backend: str = "auto", clock=None, results_written: bool = False, env: dict | None = None) -> int:
    """Print the summary and verdict, write summary.csv, report.html and JUnit; the exit code.
    `clock` (harness.commands.phases.Clock): marked once the files are written, and again once
    the report is. `results_written`: `out`'s results.csv already holds the results (a sweep's
    run directory), and is not written twice. `env`: environment(device, impls, backend), where
    the caller gathered it already (harness run: while the sweep ran)."""
    results.title, results.env = title, dict(env) if env is not None else environment(device, impls, backend)
    if results.timings:
        results.env["time"] = timing_line(results.timings, [i.name for i in impls]).removeprefix("harness: time ")
        results.env["process-seconds"] = share_line(results.timings)     # a cold run's split: first calls vs harness
    if clock is not None and "swept" in clock.marks:          # the phases known before the files are written
        t = results.timings
        results.env["phases"] = (f"startup {clock.marks['sweep'] - clock.start:.1f} s, worker start "
                                 f"{t.get('worker_start', 0.0):.1f} s, sweep "
                                 f"{t.get('wall', 0.0) - t.get('worker_start', 0.0):.1f} s (the files after it: "
                                 f"timing.csv)")
    print(summary_table(results.frame))
    for line in results.verdict_lines():
        print(line)
    data = results.run_data()                  # the summary once, for the files and the report
    written = results.write(out, report=False, data=data, results_written=results_written)
    unwritable = None
    if junit:
        try:
            written.append(results.write_junit(junit, data))
        except OSError as e:       # checked before the sweep, lost since: the other files still written
            unwritable = UsageError(f"--junit {junit}: cannot write it ({e.strerror or e})")
    if clock is not None:
        clock.mark("written")
    if not no_report:
        written.insert(1, results.write_report(out, data))
        if clock is not None:
            clock.mark("reported")
    print("harness: wrote " + ", ".join(str(p) for p in written))
    if unwritable is not None:
        raise unwritable
    return results.exit_code
