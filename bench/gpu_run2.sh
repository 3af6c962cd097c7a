#!/usr/bin/env bash
# Second H200 batch (bench/RESULTS.md): exhaustive SiLUGate, reference throughput, full sweep.
O=${OUT:-out/gpu2} RUN_LOG=$O/timing.txt RUN_TAIL=25
source bench/gpu_lib.sh
run exh_bench_bf16 150 python3 bench/bench_exhaustive.py --dtype bf16 --device cuda --repeat 2 --summary
run exh_bench_fp16 120 python3 bench/bench_exhaustive.py --dtype fp16 --device cuda --repeat 2 --summary
run exh_bf16 120 python3 -m harness exhaustive --dtype bf16 --device cuda --chunk 67108864 --out "$O/exb"
run exh_fp16 100 python3 -m harness exhaustive --dtype fp16 --device cuda --chunk 67108864 --out "$O/exf"
run ref_bench 60 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096
run full ${FULL_T:-150} python3 -m harness run --impl torch --impl fla --cases full --device cuda --out "$O/full"
