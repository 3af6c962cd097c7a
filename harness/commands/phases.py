"""The whole command's phases, where the time of `harness run` goes besides its sweep, for
timing.csv (`phase:*` rows) and the command's last line:

  startup       the process's start (the interpreter, imports, the plan) to the sweep's
  worker_start  the sweep's start to its first worker ready (imported, forked, judge ready)
  sweep         the rest of the sweep: every pair run and judged, every worker ended
  write         the summary printed, results.csv, summary.csv (and JUnit) written
  report        report.html
  other         what the phases above do not cover (the lock, a baseline's rows)
  total         the process's start to the last file written

and the process-seconds split (`share:*`): the implementations' (their first calls, factory
included — in a cold run, their compiling and autotuning — and the timed calls) against the
harness's own (references and analysis, which include mpmath): a cold run's total is mostly the
implementations' first calls, and the harness's part of it is what the harness can cut. The process's start is the kernel's (Linux: /proc/self/stat), so the interpreter's
own start and the imports before any harness code count; elsewhere, the first call of `Clock()`."""
from __future__ import annotations

import os
import time


def process_start() -> float:
    """time.monotonic()'s reading at this process's start (Linux; elsewhere: now)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])        # field 22: starttime, in clock ticks
        since = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.monotonic() - since
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic()


class Clock:
    """Marks of the command's phases, read on time.monotonic()."""

    def __init__(self):
        self.start = process_start()
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.marks[name] = time.monotonic()

    def phases(self, timings: dict[str, float]) -> dict[str, float]:
        """Seconds per phase, from the marks `sweep` (the sweep called), `swept` (it returned),
        `written`, `reported`, `end`, and the sweep's own timings (`wall`, `worker_start`)."""
        m = self.marks
        wall, workers = timings.get("wall", 0.0), timings.get("worker_start", 0.0)
        out = {"startup": m["sweep"] - self.start, "worker_start": workers, "sweep": wall - workers,
               "write": m["written"] - m["swept"], "report": m.get("reported", m["written"]) - m["written"],
               "total": m["end"] - self.start}
        out["other"] = out["total"] - sum(v for k, v in out.items() if k != "total")
        return out


def shares(timings: dict[str, float]) -> dict[str, float]:
    """Process-seconds: the implementations' calls (`first_calls`: factory and judged call, where a
    cold run compiles and autotunes; `timed_calls`: the repeats and timings after it) against the
    harness's own (`references`, `analysis`)."""
    first = sum(v for k, v in timings.items() if k.startswith("impl:"))
    timed, refs, analysis = (timings.get(k, 0.0) for k in ("timing", "references", "analysis"))
    return {"implementations": first + timed, "first_calls": first, "timed_calls": timed,
            "harness": refs + analysis, "references": refs, "analysis": analysis}


def rows(phases: dict[str, float], timings: dict[str, float]) -> dict[str, float]:
    """timing.csv's extra rows."""
    return {**{f"phase:{k}": v for k, v in phases.items()}, **{f"share:{k}": v for k, v in shares(timings).items()}}


def share_line(timings: dict[str, float]) -> str:
    """The process-seconds split in words (the command's last line, the report's environment)."""
    s = shares(timings)
    return (f"implementations {s['implementations']:.1f} (first calls {s['first_calls']:.1f}, timed calls "
            f"{s['timed_calls']:.1f}), harness {s['harness']:.1f} (references {s['references']:.1f}, analysis "
            f"{s['analysis']:.1f})")


def line(phases: dict[str, float], timings: dict[str, float]) -> str:
    return (f"harness: whole command {phases['total']:.1f} s: startup {phases['startup']:.1f}, worker start "
            f"{phases['worker_start']:.1f}, sweep {phases['sweep']:.1f}, write {phases['write']:.1f}, report "
            f"{phases['report']:.1f}, other {phases['other']:.1f}; process-seconds: {share_line(timings)}")
