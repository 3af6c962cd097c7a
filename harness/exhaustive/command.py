"""`harness exhaustive`: arguments checked first (a bad one costs no computation), then the run into
the output directory (held by its lock; progress kept per gate block for --resume), the output
files, the summary and the exit code (0 every check within budget, 1 otherwise).

Start-up is most of a full run's time on a GPU (importing torch and creating the CUDA context take
seconds; the sweep about one), so on CUDA the context and the tile pass (the Triton kernel, from
Triton's on-disk cache after the first run) are prepared in a thread while this one sets up the
output directory and imports what writes the results. `run_params` is the one place the
command's defaults are resolved; the bench calls it too."""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from harness.references.errors import UsageError


@dataclass(frozen=True)
class RunParams:
    dtype: str
    impl: str
    device: str
    x_range: tuple[int, int]
    gate_range: tuple[int, int]
    dy: float
    chunk: int
    activation: str = "silu"


def check_out(out: str) -> Path:
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise UsageError(f"--out {out}: is a file, expected a directory")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise UsageError(f"--out {out}: {parent} is a file, expected a directory")
    return p


def run_params(args) -> RunParams:
    """The run the command's arguments ask for, every default resolved (device, chunk)."""
    from harness.exhaustive.enumerate import default_chunk, parse_range
    xr = parse_range(args.x_range, "--x-range")
    gr = parse_range(args.gate_range, "--gate-range")
    try:
        dy = float(args.dy)
    except ValueError:
        raise UsageError(f"--dy {args.dy!r}: not a number") from None
    if args.chunk is not None and args.chunk < 1:
        raise UsageError("--chunk: must be >= 1")
    import torch
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device available")
    chunk = default_chunk(device) if args.chunk is None else int(args.chunk)
    return RunParams(args.dtype, args.impl, device, xr, gr, dy, chunk, args.activation)


class _Prepare(threading.Thread):
    """run.warm_up in the background; its error, if any, is the run's to meet again (it falls back)."""

    def __init__(self, dtype: str, device: str):
        super().__init__(daemon=True)
        self.dtype, self.device, self.error = dtype, device, None

    def run(self) -> None:
        try:
            from harness.exhaustive.run import warm_up
            warm_up(self.dtype, self.device)
        except Exception as e:                         # noqa: BLE001 - reported by the main run
            self.error = e


def exhaustive_command(args) -> int:
    out = check_out(args.out)
    p = run_params(args)
    from harness.exhaustive.enumerate import setup
    su = setup(p.dtype, p.impl, "cpu", p.x_range, p.gate_range, p.dy, activation=p.activation)   # every check, on the CPU
    import harness.exhaustive.run  # noqa: F401 - imported here, not in both threads at once
    prep = None
    if p.device == "cuda":
        prep = _Prepare(p.dtype, p.device)
        prep.start()
    from harness.exhaustive.enumerate import case_hash
    from harness.exhaustive.progress import open_checkpoint, progress_path, run_key
    from harness.exhaustive.results import rows, summary, write_outputs
    from harness.exhaustive.run import run_exhaustive
    from harness.reports.rundir import RunDir
    import pandas  # noqa: F401 - imported while the device gets ready (the results writer needs it)
    rd = RunDir(out).create()
    with rd.lock():
        ppath = progress_path(out, p.dtype, p.impl, case_hash(p.dtype, p.x_range, p.gate_range, su.dy_bits,
                                                              p.activation))
        ck = open_checkpoint(ppath, run_key(p.dtype, p.impl, p.x_range, p.gate_range, su.dy_bits, p.activation),
                             args.resume, su.block_spans())
        if ck.done:
            print(f"exhaustive: resuming: {len(ck.done)} of {len(su.block_spans())} gate blocks done "
                  f"({ppath.name})", file=sys.stderr)
        if prep is not None:
            prep.join()
        try:
            res = run_exhaustive(p.dtype, p.impl, p.device, p.x_range, p.gate_range, p.dy, p.chunk,
                                 progress=lambda s: print(s, file=sys.stderr, flush=True), checkpoint=ck,
                                 activation=p.activation)
        except KeyboardInterrupt:
            print(f"exhaustive: interrupted; {len(ck.done)} of {len(su.block_spans())} gate blocks kept in "
                  f"{ppath}: rerun with --resume to continue", file=sys.stderr)
            raise
        paths = write_outputs(res, out)
    print(summary(res))
    failed = any(r["status"] != "pass" for r in rows(res))
    print(f"harness: wrote {', '.join(str(x) for x in paths)}")
    return 1 if failed else 0
