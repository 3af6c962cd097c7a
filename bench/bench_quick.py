"""The quick suite on the CPU as a user runs it: `harness run --impl torch --cases SUITE --device cpu`,
start-up to exit, report included, timed REPEATS times. With --against, another installation's
`harness` (say, a worktree of an earlier commit with its own venv) runs the same suite file in
alternation with this one, so that both are measured in one session on the same machine load.
--inline adds this checkout with --isolate inline: the cost of running every pair in a worker.

    python3 bench/bench_quick.py [--cases quick] [--repeats 5] [--against OLD/.venv/bin/harness] [--inline]

Prints every wall time and, per variant, the minimum and the median."""
import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - t0, rc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="quick", help="suite name or .toml (give a file both versions can read)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--against", help="another installation's harness executable")
    ap.add_argument("--inline", action="store_true", help="also time --isolate inline")
    a = ap.parse_args()
    this = [sys.executable, "-m", "harness"]
    variants = {"this": this + ["run"]}
    if a.inline:
        variants["this --isolate inline"] = this + ["run", "--isolate", "inline"]
    if a.against:
        variants["against"] = [a.against, "run"]
    out = tempfile.mkdtemp(prefix="bench-quick-")
    times: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for _ in range(a.repeats):
            for name, cmd in variants.items():
                t, rc = timed(cmd + ["--impl", "torch", "--cases", a.cases, "--device", "cpu", "--out", f"{out}/o"])
                times[name].append(t)
                print(f"{name}: {t:.2f} s (exit {rc})", flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    for name, ts in times.items():
        print(f"{name:24s} min {min(ts):.2f} s  median {statistics.median(ts):.2f} s  ({len(ts)} runs)")
    if a.against:
        print(f"this / against: min {min(times['this']) / min(times['against']):.2f}, "
              f"median {statistics.median(times['this']) / statistics.median(times['against']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
