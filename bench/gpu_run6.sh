#!/usr/bin/env bash
# Sixth H200 batch (bench/RESULTS.md, run 6): the fused reference with one exp, and `full` on CUDA
# for torch, torch-compile and fla in one sweep with --jobs (cold caches, then warm).
O=${OUT:-out/gpu6} RUN_SKIP='^\['
source bench/gpu_lib.sh
run ref_bench 60 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096
J=${JOBS:-16}
TAILN=12 run full_cold ${T_COLD:-360} python3 -m harness run --impl torch --impl torch-compile --impl fla --cases full --device cuda --out "$O/full" --jobs $J
cp "$O/full/summary.csv" "$O/full-summary.csv" 2>/dev/null; cp "$O/full/timing.csv" "$O/full-timing.csv" 2>/dev/null
TAILN=3 run full_warm ${T_WARM:-120} python3 -m harness run --impl torch --impl torch-compile --impl fla --cases full --device cuda --out "$O/full2" --jobs $J --no-report
cp "$O/full2/timing.csv" "$O/full-warm-timing.csv" 2>/dev/null
tar czf "$O/full.tgz" -C "$O" full 2>/dev/null; rm -rf "$O/full" "$O/full2"
