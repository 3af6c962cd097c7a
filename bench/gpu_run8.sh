#!/usr/bin/env bash
# Eighth H200 batch — NOT RUN YET (prepared 2026-11-29 for the next session with device time):
# the hand-written Triton reference against the floor, the warm exhaustive time after run 7's
# certification change, and `full` with --shard-by shape (each compile / autotuning in one worker).
set -uo pipefail
O=${OUT:-out/gpu8}; mkdir -p "$O"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u > "$O/env.txt"
run() { local name=$1 t=$2; shift 2; local s=$(date +%s.%N)
  timeout "$t" "$@" > "$O/$name.txt" 2>&1; local rc=$?
  echo "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a "$O/env.txt"; grep -v '^exhaustive: \|^\[' "$O/$name.txt" | tail -${TAILN:-6}; }
run ref_bench 90 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096 --triton --profile
python3 -m pytest -q tests/test_triton_reference.py tests/test_fast_reference.py > "$O/gpu_tests.txt" 2>&1; tail -2 "$O/gpu_tests.txt"
run exh_bf16 90 python3 bench/bench_exhaustive.py --dtype bf16 --device cuda
run exh_fp16 80 python3 bench/bench_exhaustive.py --dtype fp16 --device cuda
TAILN=4 run full ${T_FULL:-300} python3 -m harness run --impl torch --impl torch-compile --impl fla --cases full --device cuda --out "$O/full" --jobs 16 --shard-by shape --no-report
cp "$O/full/summary.csv" "$O/full-summary.csv" 2>/dev/null; cp "$O/full/timing.csv" "$O/full-timing.csv" 2>/dev/null; rm -rf "$O/full"
