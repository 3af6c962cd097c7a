"""Command line: `harness run|cases|merge|report|replay|budgets|selftest|bisect|exhaustive`.

Thin by design: parse, call the library, map errors to exit codes in one place
(0 within budget, 1 over budget / regressed / not found, 2 usage or input error)."""
from __future__ import annotations

import argparse
import sys

from harness.errors import UsageError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):          # one line, exit 2, no usage dump
        raise UsageError(f"{self.prog}: {message}")


def _parse_shard(s: str) -> tuple[int, int]:
    try:
        k, n = (int(v) for v in s.split("/"))
    except ValueError:
        raise UsageError(f"--shard {s!r}: expected K/N, e.g. 1/4") from None
    if not (n >= 1 and 1 <= k <= n):
        raise UsageError(f"--shard {s!r}: need 1 <= K <= N")
    return k, n


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="harness", description="Numerical verification harness for gated RMSNorm")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a sweep and gate on the budgets")
    r.add_argument("--impl", action="append", required=True,
                   help="built-in name or NAME=MODULE:ATTR (repeatable)")
    r.add_argument("--cases", default="quick", help="suite name, suite .toml path, or 'hypothesis'")
    r.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    r.add_argument("--out", default="out")
    r.add_argument("--budgets", help="budget file (CSV) overriding the defaults")
    r.add_argument("--baseline", help="earlier results directory: fail checks that got worse")
    r.add_argument("--junit", help="also write JUnit XML here")
    r.add_argument("--resume", action="store_true", help="skip finished case x impl pairs in --out")
    r.add_argument("--shard", help="K/N: run a deterministic 1/N of the cases")
    r.add_argument("--shard-by", choices=["case", "shape"], default=None,
                   help="how --shard / --jobs split: by case id (--shard's default), or every case of "
                        "one hidden size and dtype mix in one shard, so each compile and autotuning "
                        "runs once (--jobs's default)")
    r.add_argument("--jobs", type=int, default=1,
                   help="N worker processes (shards K/N merged here): compiles and autotuning in parallel")
    r.add_argument("--max-examples", type=int, default=50, help="hypothesis: examples to try")
    r.add_argument("--seed", type=int, default=0, help="hypothesis: seed")
    r.add_argument("--no-report", action="store_true", help="skip report.html (results.csv only)")
    r.add_argument("--golden", help="golden store directory: reuse certified references across runs")

    c = sub.add_parser("cases", help="list the named suites, or the cases of one")
    c.add_argument("suite", nargs="?")

    m = sub.add_parser("merge", help="combine shard outputs into one results set and report")
    m.add_argument("dirs", nargs="+")
    m.add_argument("--out", required=True)

    rp = sub.add_parser("report", help="re-render summary.csv and report.html from a results dir")
    rp.add_argument("dir")
    rp.add_argument("--baseline")

    rl = sub.add_parser("replay", help="rerun one case and show its worst elements")
    rl.add_argument("case_id")
    rl.add_argument("--impl", required=True)
    rl.add_argument("--cases", default="quick", help="suite, or a results dir/results.csv holding the case")
    rl.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    rl.add_argument("--out")
    rl.add_argument("--top", type=int, default=5)
    rl.add_argument("--budgets", help="the budget file the sweep used")

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

    bi = sub.add_parser("bisect", help="find the commit where an implementation went over budget")
    bi.add_argument("repo")
    bi.add_argument("good")
    bi.add_argument("bad")
    bi.add_argument("--impl", required=True)
    bi.add_argument("--cases", default="quick")
    bi.add_argument("--build")
    bi.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])

    e = sub.add_parser("exhaustive", help="every finite (x, gate) pair of bf16/fp16 through SiLUGate")
    e.add_argument("--dtype", required=True, choices=["bf16", "fp16"])
    e.add_argument("--impl", default="torch")
    e.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    e.add_argument("--x-range", help="LO:HI bit patterns (hex or int) of x, half-open")
    e.add_argument("--gate-range", help="LO:HI bit patterns of the gate, half-open")
    e.add_argument("--dy", default="1.0", help="upstream gradient value (rounded to the dtype)")
    e.add_argument("--out", default="out/exhaustive")
    e.add_argument("--chunk", type=int, default=1 << 22, help="pairs per chunk")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        from harness.compile_caches import pin_triton_cache_dir
        pin_triton_cache_dir()                 # before anything compiles (see compile_caches)
        from harness import commands
        return getattr(commands, f"cmd_{args.cmd}")(args)
    except UsageError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130
