#!/usr/bin/env bash
# Fifth H200 batch (bench/RESULTS.md, run 5): the leaner fused reference, `full` on CUDA for the
# three CUDA implementations in one sweep (references shared), and the exhaustive results files.
O=${OUT:-out/gpu5} RUN_SKIP='^exhaustive: \|^\[' RUN_TAIL=8
source bench/gpu_lib.sh
run ref_bench 60 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096
TAILN=40 run full ${T_FULL:-330} python3 -m harness run --impl torch --impl torch-compile --impl fla --cases full --device cuda --out "$O/full"
run exh_bf16 75 python3 -m harness exhaustive --dtype bf16 --device cuda --chunk 67108864 --out "$O/exb"
run exh_fp16 60 python3 -m harness exhaustive --dtype fp16 --device cuda --chunk 67108864 --out "$O/exf"
tar czf "$O/res.tgz" -C "$O" full exb exf 2>/dev/null; rm -rf "$O/full" "$O/exb" "$O/exf"
