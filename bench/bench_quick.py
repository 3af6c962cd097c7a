"""The quick suite on the CPU as a user runs it: `harness run --impl torch --cases quick --device cpu`,
start-up to exit, twice (the second with warm file caches), with the default of one OpenMP thread
per worker and with --threads 2; report included.

    python3 bench/bench_quick.py [OUT]"""
import subprocess
import sys
import time

out = sys.argv[1] if len(sys.argv) > 1 else "out/bench-quick"
for threads in ([], ["--threads", "2"]):
    for attempt in (1, 2):
        cmd = [sys.executable, "-m", "harness", "run", "--impl", "torch", "--cases", "quick", "--device", "cpu",
               "--out", out, *threads]
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, capture_output=True, text=True).returncode
        print(f"quick, torch, {' '.join(threads) or 'default threads'}, run {attempt}: "
              f"{time.perf_counter() - t0:.1f} s (exit {rc})")
