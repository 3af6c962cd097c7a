#!/usr/bin/env bash
# Seventh H200 batch (bench/RESULTS.md, run 7): exhaustive bf16/fp16 results with the closed forms
# applied before the mpmath cap, and the fused reference's kernels (profile, coordinate descent).
O=${OUT:-out/gpu7} RUN_SKIP='^exhaustive: ' RUN_TAIL=14
source bench/gpu_lib.sh
TAILN=4 run exh_bf16 70 python3 -m harness exhaustive --dtype bf16 --device cuda --chunk 67108864 --out "$O/exb"
TAILN=4 run exh_fp16 60 python3 -m harness exhaustive --dtype fp16 --device cuda --chunk 67108864 --out "$O/exf"
run ref_bench 70 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096 --profile --tune
tar czf "$O/exh.tgz" -C "$O" exb exf 2>/dev/null; rm -rf "$O/exb" "$O/exf"
