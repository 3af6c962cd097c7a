"""mpmath certification time per case, on the CPU (where mpmath always runs): the cases a measured
sweep spent its mpmath time on, taken from its pair-timing.csv, rebuilt and certified here.

    python bench/bench_certify.py --pair-timing bench/gpu/full-warm-pair-timing.csv [--cases full] [--min 0.05]

For each case: the float64 references (on the CPU), then the golden of y, dx, dgate, dweight in
their own formats, as a sweep's first implementation does; prints the mpmath seconds per case
next to the sweep's, and the totals. Comparing two commits on the same cases shows what a change
to references/mp.py or references/certify.py saves."""
import argparse
import time

import pandas as pd

from harness.cases.generate import generate
from harness.cases.suite import load_suite
from harness.references.bundle import build
from harness.references.store import output_formats


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pair-timing", required=True, help="a sweep's pair-timing.csv")
    p.add_argument("--cases", default="full", help="the suite that sweep ran")
    p.add_argument("--min", type=float, default=0.05, help="cases with at least this much mpmath there (s)")
    a = p.parse_args()
    pt = pd.read_csv(a.pair_timing, dtype={"case_id": str})
    there = pt.groupby("case_id")["mpmath"].sum()
    suite = load_suite(a.cases)
    cases = [c for c in (suite.cases if hasattr(suite, "cases") else suite) if there.get(c.case_id, 0.0) >= a.min]
    total_here = total_there = total_wall = 0.0
    for c in sorted(cases, key=lambda c: -there[c.case_id]):
        t0 = time.perf_counter()
        inp = generate(c)
        refs = build(inp)
        certs = [refs.certified(out, fmt) for out, fmt in output_formats(inp)]
        mp_s = sum(x.mp_seconds for x in certs)
        wall = time.perf_counter() - t0
        total_here, total_there, total_wall = total_here + mp_s, total_there + there[c.case_id], total_wall + wall
        done = ", ".join(f"{out} {x.certified}/{x.flagged}" for (out, _), x in zip(output_formats(inp), certs))
        print(f"{c.label}: mpmath {mp_s:.2f} s here, {there[c.case_id]:.2f} s in the sweep ({done} certified)")
    print(f"{len(cases)} cases: mpmath {total_here:.1f} s here (references + certification {total_wall:.1f} s), "
          f"{total_there:.1f} s in the sweep")


if __name__ == "__main__":
    main()
