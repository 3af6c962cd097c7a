"""Time the quick suite on the CPU for all built-in CPU implementations, report included.
Target (issue 4): <= 60 s on the 2-core CI machine. Usage: python bench/bench_quick.py [OUT]"""
import subprocess
import sys
import time

out = sys.argv[1] if len(sys.argv) > 1 else "out/bench-quick"
impls = ["torch", "torch-fused", "torch-compile", "torch-compile-emulate"]
cmd = [sys.executable, "-m", "harness", "run", "--cases", "quick", "--device", "cpu", "--out", out]
for i in impls:
    cmd += ["--impl", i]
t0 = time.perf_counter()
rc = subprocess.run(cmd, capture_output=True, text=True).returncode
print(f"quick x {len(impls)} CPU built-ins, report included: {time.perf_counter() - t0:.1f} s (exit {rc})")
