"""float64 reference throughput against the memory-bandwidth floor, and the share of a case's
reference time spent in mpmath certification.

    python bench/bench_reference.py [--device cuda] [--tokens 8192] [--hidden 4096] [--dtype bf16]

Floor: the bytes the closed forms must move at least once — read x, gate, dy (the input dtype) and
weight, write y, dx, dgate in float64 plus dweight — divided by the device's copy bandwidth
(measured here with a device-to-device copy, ~4.3 TB/s on an H200)."""
import argparse
import time

import torch

from cases.case import Case
from cases.generate import generate
from references.bundle import build
from references.exact import exact_outputs
from references.formats import fmt_of


def sync(dev):
    if dev.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, dev, repeat=5):
    fn()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync(dev)
    return (time.perf_counter() - t0) / repeat


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--dtype", default="bf16")
    a = p.parse_args()
    case = Case(a.dtype, a.dtype, a.dtype, (a.tokens, a.hidden), False, 1e-5, "standard", "normal", "one", 0)
    inp = generate(case).to(a.device)
    n = inp.x.numel()
    esize = inp.x.element_size()
    floor_bytes = 3 * n * esize + 3 * n * 8 + 2 * a.hidden * 8
    buf = torch.empty(256 << 20, dtype=torch.uint8, device=a.device)
    bw = 2 * buf.numel() / timed(lambda: buf.clone(), a.device)
    t_ref = timed(lambda: exact_outputs(inp), a.device)
    floor_s = floor_bytes / bw
    print(f"device {a.device} ({torch.cuda.get_device_name() if a.device.startswith('cuda') else 'cpu'}), "
          f"{a.tokens}x{a.hidden} {a.dtype}")
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; floor {floor_bytes / 1e9:.2f} GB -> {floor_s * 1e3:.2f} ms")
    print(f"exact_outputs (float64 closed forms, fwd+bwd): {t_ref * 1e3:.2f} ms = {100 * floor_s / t_ref:.0f}% of the floor")
    # Share of the reference stage spent in mpmath: a full build + certification of every output.
    sync(a.device)
    t0 = time.perf_counter()
    refs = build(inp)
    sync(a.device)
    t_build = time.perf_counter() - t0
    t_cert = t_mp = 0.0
    for out, fmt in (("y", a.dtype), ("dx", a.dtype), ("dgate", a.dtype), ("dweight", a.dtype)):
        t0 = time.perf_counter()
        c = refs.certified(out, fmt_of(fmt))
        sync(a.device)
        dt = time.perf_counter() - t0
        t_cert += dt
        t_mp += c.mp_seconds
        print(f"  certify {out}: {c.flagged} undecided, {c.certified} by mpmath, {c.uncertified} left, {dt * 1e3:.1f} ms")
    total = t_build + t_cert
    print(f"reference stage {1e3 * total:.1f} ms: certification (undecided masks + mpmath) "
          f"{100 * t_cert / total:.0f}%, mpmath alone {100 * t_mp / total:.1f}%")


if __name__ == "__main__":
    main()
