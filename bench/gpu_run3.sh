#!/usr/bin/env bash
# Third H200 batch (bench/RESULTS.md): exhaustive bf16/fp16 with results, reference throughput,
# and the full suite for torch + fla under a time limit.
O=${OUT:-out/gpu3} RUN_LOG=$O/timing.txt RUN_SKIP='^exhaustive: ' RUN_TAIL=30
source bench/gpu_lib.sh
run exh_bf16 80 python3 -m harness exhaustive --dtype bf16 --device cuda --chunk 67108864 --out "$O/exb"
run exh_fp16 60 python3 -m harness exhaustive --dtype fp16 --device cuda --chunk 67108864 --out "$O/exf"
run ref_bench 40 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096
[ -n "${FULL_T:-}" ] && run full $FULL_T python3 -m harness run --impl torch --impl fla --cases full --device cuda --out "$O/full" --no-report
tar czf "$O/exh.tgz" -C "$O" exb exf 2>/dev/null; rm -rf "$O/exb" "$O/exf"
