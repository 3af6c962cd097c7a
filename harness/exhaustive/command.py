"""`harness exhaustive`: arguments checked here, the run, the output files, the exit code."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness.references.errors import UsageError
from harness.exhaustive.enumerate import parse_range
from harness.exhaustive.impls import IMPLS
from harness.exhaustive.results import rows, summary, write_outputs
from harness.exhaustive.run import run_exhaustive


def exhaustive_command(args) -> int:
    if args.impl not in IMPLS:
        raise UsageError(f"--impl {args.impl}: exhaustive mode supports {', '.join(IMPLS)}")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device available")
    xr = parse_range(args.x_range, "--x-range")
    gr = parse_range(args.gate_range, "--gate-range")
    try:
        dy = float(args.dy)
    except ValueError:
        raise UsageError(f"--dy {args.dy!r}: not a number") from None
    if args.chunk < 1:
        raise UsageError("--chunk: must be >= 1")
    res = run_exhaustive(args.dtype, args.impl, device, xr, gr, dy, args.chunk,
                         progress=lambda s: print(s, file=sys.stderr, flush=True))
    out = Path(args.out)
    write_outputs(res, out)
    print(summary(res))
    failed = any(r["status"] != "pass" for r in rows(res))
    print(f"harness: wrote {out / 'results.csv'}, {out / 'histogram.csv'}, {out / 'worst.csv'}")
    return 1 if failed else 0
