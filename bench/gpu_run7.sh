#!/usr/bin/env bash
# Seventh H200 batch (bench/RESULTS.md, run 7): exhaustive bf16/fp16 results with the closed forms
# applied before the mpmath cap, and the fused reference's kernels (profile, coordinate descent).
set -uo pipefail
O=${OUT:-out/gpu7}; mkdir -p "$O"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u > "$O/env.txt"
run() { local name=$1 t=$2; shift 2; local s=$(date +%s.%N)
  timeout "$t" "$@" > "$O/$name.txt" 2>&1; local rc=$?
  echo "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a "$O/env.txt"; grep -v '^exhaustive: ' "$O/$name.txt" | tail -${TAILN:-14}; }
TAILN=4 run exh_bf16 70 python3 -m harness exhaustive --dtype bf16 --device cuda --chunk 67108864 --out "$O/exb"
TAILN=4 run exh_fp16 60 python3 -m harness exhaustive --dtype fp16 --device cuda --chunk 67108864 --out "$O/exf"
run ref_bench 70 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096 --profile --tune
tar czf "$O/exh.tgz" -C "$O" exb exf 2>/dev/null; rm -rf "$O/exb" "$O/exf"
