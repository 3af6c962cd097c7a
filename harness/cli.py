"""Command line: `harness run|identify|cases|merge|report|replay|budgets|selftest|bisect|exhaustive`.

Thin by design: parse, call the library, and map what escapes to an exit code in one place — a
UsageError is the user's (exit 2, one line, no traceback), so is an OSError the system raised (a
full disk: exit 2, one line), an interrupt 130, a closed stdout (`harness cases quick | head`) a
quiet 0, anything else a bug of the harness (its traceback, exit 3)."""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from harness.commands import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE
from harness.references.errors import UsageError, naming
from harness.worker import DEFAULT_TIMEOUT


class _Parser(argparse.ArgumentParser):
    def error(self, message):          # one line, exit 2, no usage dump
        raise UsageError(f"{self.prog}: {message}")


def _sweep_options(p: argparse.ArgumentParser, one_impl: bool = False) -> None:
    """run's and identify's options; `one_impl`: identify's (one --impl, a suite, no hypothesis)."""
    p.add_argument("--impl", action="append", required=True,
                   help="built-in name, entry point or NAME=MODULE:ATTR" + ("" if one_impl else " (repeatable)")
                        + (", optionally ending in @CLASS (accurate, fast, accurate+ftz, fast+ftz): judged at that "
                           "math class" if not one_impl else ""))
    p.add_argument("--cases", default="quick",
                   help="suite name or suite .toml path" + ("" if one_impl else ", or 'hypothesis'"))
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--out", default="out")
    p.add_argument("--budgets", help="budget file (CSV) overriding the defaults")
    p.add_argument("--jobs", type=int, default=1, help="N isolated workers at once (compiles and autotuning in parallel)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds a pair may run before it is an error (and an --impl's module may take to import)")
    p.add_argument("--threads", type=int, help="OpenMP threads per worker (default: cores / jobs; see README, Threads)")
    p.add_argument("--gpus", help="GPU indices to spread the workers over, each once, e.g. 0,1 (worker k on GPU k mod N)")
    p.add_argument("--isolate", choices=["auto", "process", "inline"], default="auto",
                   help="run each pair in a worker process (auto: wherever the implementation can be sent to one)")
    p.add_argument("--golden", help="golden store directory: reuse certified references across runs")
    p.add_argument("--reference-backend", choices=["auto", "inductor", "eager"], default="auto",
                   help="the float64 reference pass for big CUDA cases")
    p.add_argument("--no-report", action="store_true", help="skip report.html")
    if one_impl:        # identify asks which model the first call's values fit: no timing, no repeat's verdict
        return
    p.add_argument("--repeats", type=int, help="warm timed calls per pair (default 5 on CUDA, 3 on the CPU; 0: no timing)")
    p.add_argument("--allow-nondeterministic", action="store_true",
                   help="pass outputs that a later call on the same inputs changes (default: they fail)")
    p.add_argument("--require-repeatable", action="store_true",
                   help="the default since outputs that differ between calls fail; kept for existing scripts")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="harness", description="Numerical verification harness for gated RMSNorm")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a sweep and gate on the budgets")
    _sweep_options(r)
    r.add_argument("--baseline", help="earlier results directory: fail checks that got worse")
    r.add_argument("--junit", help="also write JUnit XML here")
    r.add_argument("--resume", action="store_true", help="keep the finished pairs in --out, run the rest")
    r.add_argument("--shard", help="K/N: run a deterministic 1/N of the cases (multi-host; see `harness merge`)")
    r.add_argument("--shard-by", choices=["case", "shape"], default=None,
                   help="how --shard splits: by case id (default), or every case of one hidden size and dtype mix together")
    r.add_argument("--max-examples", type=int, help="hypothesis: examples to try (default 50)")
    r.add_argument("--seed", type=int, help="hypothesis: seed (default: hypothesis's own)")

    i = sub.add_parser("identify", help="which built-in rounding model an implementation realises")
    _sweep_options(i, one_impl=True)

    c = sub.add_parser("cases", help="list the named suites, or the cases of one")
    c.add_argument("suite", nargs="?")

    m = sub.add_parser("merge", help="combine shard outputs into one results set and report")
    m.add_argument("dirs", nargs="+")
    m.add_argument("--out", required=True)
    m.add_argument("--cases", help="the suite the shards ran: check that they cover it exactly once")
    m.add_argument("--junit", help="also write JUnit XML of the merged results here")

    rp = sub.add_parser("report", help="re-render summary.csv and report.html from a results dir")
    rp.add_argument("dir")
    rp.add_argument("--baseline")

    rl = sub.add_parser("replay", help="rerun one case and show its worst elements")
    rl.add_argument("case_id")
    rl.add_argument("--impl", required=True)
    rl.add_argument("--cases", default="quick", help="suite, or a results dir/results.csv holding the case")
    rl.add_argument("--case", help="the case itself, as the JSON of its parameters (instead of --cases)")
    rl.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    rl.add_argument("--out")
    rl.add_argument("--top", type=int, default=5)
    rl.add_argument("--budgets", help="the budget file the sweep used")
    rl.add_argument("--isolate", choices=["auto", "process", "inline"], default="auto",
                    help="run the pair in a worker process (auto: wherever the implementation can be sent to one)")
    rl.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help="seconds the pair may run before it is an error (a worker process only), and "
                         "--impl's module may take to import")

    b = sub.add_parser("budgets", help="budget files")
    bsub = b.add_subparsers(dest="budgets_cmd", required=True, parser_class=_Parser)
    bg = bsub.add_parser("regen", help="write measured maxima (rounded up) as a budget file")
    bg.add_argument("--from", dest="src", required=True)
    bg.add_argument("-o", "--output", default="budgets.csv")
    bg.add_argument("--allow-growth", action="store_true")
    bsub.add_parser("show", help="print the default budget derivation table")

    s = sub.add_parser("selftest", help="run the mutant implementations through a suite")
    s.add_argument("--cases", default="quick")
    s.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    s.add_argument("--out", default="out/selftest")
    s.add_argument("--jobs", type=int, default=1)

    bi = sub.add_parser("bisect", help="find the commit where an implementation went over budget")
    bi.add_argument("repo")
    bi.add_argument("good")
    bi.add_argument("bad")
    bi.add_argument("--impl", required=True,
                    help="NAME=MODULE:ATTR or an entry point's name, optionally ending in @CLASS (the math class)")
    bi.add_argument("--cases", default="quick")
    bi.add_argument("--build")
    bi.add_argument("--path", action="append", default=[],
                    help="import root inside REPO, put first on PYTHONPATH (repeatable; default: src/ if present, and REPO)")
    bi.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    bi.add_argument("--budgets", help="budget file (CSV) every commit is judged against, as run's --budgets "
                                      "(this file, as it is now, for every commit)")

    e = sub.add_parser("exhaustive", help="every finite (x, gate) pair of bf16/fp16 through SiLUGate")
    e.add_argument("--dtype", required=True, choices=["bf16", "fp16"])
    e.add_argument("--activation", default="silu", choices=["silu", "sigmoid"],
                   help="the gate's function: silu (default) or sigmoid (y = x * sigmoid(gate))")
    e.add_argument("--impl", default="silugate-eager",
                   help="SiLUGate alone: silugate-eager (the eager chain's ATen kernels) or silugate-silu-lowp (a mutant)")
    e.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    e.add_argument("--x-range", help="LO:HI bit patterns (hex or int) of x, half-open")
    e.add_argument("--gate-range", help="LO:HI bit patterns of the gate, half-open")
    e.add_argument("--dy", default="1.0", help="upstream gradient value (rounded to the dtype)")
    e.add_argument("--out", default="out/exhaustive")
    e.add_argument("--chunk", type=int, help="pairs per tile (default: the device's)")
    e.add_argument("--resume", action="store_true", help="keep the gate blocks finished in --out")
    return p


class _UntilReaderLeaves:
    """A standard stream until its reader closes the pipe (`harness cases | head -1`), then
    nothing: the command goes on — its files written, its exit code its verdict's — instead of
    ending at the next print. Other write errors (a full disk) are raised as before."""

    def __init__(self, stream):
        self._stream, self.gone = stream, False

    def _leave(self) -> None:
        self.gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)      # what the stream still buffers goes nowhere
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def write(self, text: str) -> int:
        self._guarded(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def _guarded(self, op, *args) -> None:
        """op(*args) on the stream until its reader has gone; another write error raised naming the
        stream where it names no file (a full disk)."""
        if self.gone:
            return
        try:
            op(*args)
        except BrokenPipeError:
            self._leave()
        except OSError as e:
            named = naming(e, getattr(self._stream, "name", "the output"))
            if named is None:
                raise
            raise named from e

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (_UntilReaderLeaves(s) if hasattr(s, "fileno") else s for s in streams)
    try:
        code = _main(argv)
        try:
            for s in (sys.stdout, sys.stderr):
                s.flush()                    # a closed pipe here is the wrapper's; anything else is said
        except OSError as e:                 # (a full disk: the command's output was not written)
            print(f"harness: error: {e}", file=streams[1])
            code = EXIT_USAGE
        return code
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        from harness.compile_caches import pin_triton_cache_dir
        pin_triton_cache_dir()                 # before anything compiles (see compile_caches)
        from harness.commands import dispatch
        try:
            return dispatch(args)
        except SystemExit as e:            # plug-in code that called sys.exit where nothing caught it
            print(f"harness: internal error: something called sys.exit({e.code!r}) during the command; "
                  f"the run did not finish", file=sys.stderr)
            return EXIT_INTERNAL
    except UsageError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as e:                       # the system refused a write or read (disk full, EIO): not a bug
        print(f"harness: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:
        traceback.print_exc()
        print("harness: internal error (a bug in the harness, not in your input): please report it",
              file=sys.stderr)
        return EXIT_INTERNAL


def console() -> None:
    """The `harness` command: main()'s exit code, without the interpreter's slow teardown, from a
    process watched by its parent, so that nothing a plug-in runs in it can end it with a code of
    its own (harness.supervise); no process a plug-in detached outlives it
    (harness.worker.end_orphans_at_exit, in both)."""
    from harness.supervise import watched
    from harness.worker import end_orphans_at_exit, exit_now
    exit_now(watched(main, exit_now, end_orphans_at_exit))
