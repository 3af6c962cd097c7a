#!/usr/bin/env bash
# Second H200 batch (bench/RESULTS.md): exhaustive SiLUGate, reference throughput, full sweep.
set -uo pipefail
O=${OUT:-out/gpu2}; mkdir -p "$O"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
run() { local name=$1 t=$2; shift 2; local s=$(date +%s.%N)
  timeout "$t" "$@" > "$O/$name.txt" 2>&1; local rc=$?
  echo "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a "$O/timing.txt"; tail -25 "$O/$name.txt"; }
run exh_bench_bf16 150 python3 bench/bench_exhaustive.py --dtype bf16 --device cuda --repeat 2 --summary
run exh_bench_fp16 120 python3 bench/bench_exhaustive.py --dtype fp16 --device cuda --repeat 2 --summary
run exh_bf16 120 python3 -m harness exhaustive --dtype bf16 --device cuda --chunk 67108864 --out "$O/exb"
run exh_fp16 100 python3 -m harness exhaustive --dtype fp16 --device cuda --chunk 67108864 --out "$O/exf"
run ref_bench 60 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096
run full ${FULL_T:-150} python3 -m harness run --impl torch --impl fla --cases full --device cuda --out "$O/full"
