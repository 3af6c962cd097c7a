"""What an implementation's first call on a new shape costs (compiles, autotuning) against its
steady-state call, per shape, in one process — the cost a wide sweep pays once per compile key.

    python bench/bench_first_call.py [--impl fla --impl torch-compile] [--device cuda]

Run it twice: the second process finds Triton's and Inductor's on-disk caches (kernels, fla's
autotuning results) warm, so the difference is what those caches save."""
import argparse
import time

import torch

from harness.cases.case import Case
from harness.cases.generate import generate
from harness.execute import run_impl
from harness.impls.registry import resolve

SHAPES = [("bf16", "bf16", "bf16", (16, 512)), ("bf16", "fp32", "fp32", (16, 512)),
          ("bf16", "fp32", "bf16", (1, 16384)), ("fp16", "fp16", "fp16", (32, 127)),
          ("bf16", "bf16", "bf16", (64, 4096))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", action="append")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    for spec in a.impl or ["fla", "torch-compile"]:
        impl = resolve(spec)
        for dt, gdt, wdt, shape in SHAPES:
            case = Case(dt, gdt, wdt, shape, False, 1e-5, "standard", "normal", "one", 0)
            inp = generate(case).to(a.device)
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                out = run_impl(impl, inp, inp.x.dtype, a.device)
                times.append(time.perf_counter() - t0)
            print(f"{impl.name} {case.label}: first call {times[0]:.2f} s, then {times[1] * 1e3:.1f} ms, "
                  f"{times[2] * 1e3:.1f} ms{'  (' + out.error + ')' if out.error else ''}", flush=True)


if __name__ == "__main__":
    main()
