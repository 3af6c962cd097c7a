#!/usr/bin/env bash
# Third H200 batch (bench/RESULTS.md): exhaustive bf16/fp16 with results, reference throughput,
# and the full suite for torch + fla under a time limit.
set -uo pipefail
O=${OUT:-out/gpu3}; mkdir -p "$O"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
run() { local name=$1 t=$2; shift 2; local s=$(date +%s.%N)
  timeout "$t" "$@" > "$O/$name.txt" 2>&1; local rc=$?
  echo "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a "$O/timing.txt"; tail -30 "$O/$name.txt" | grep -v '^exhaustive: '; }
run exh_bf16 80 python3 -m harness exhaustive --dtype bf16 --device cuda --chunk 67108864 --out "$O/exb"
run exh_fp16 60 python3 -m harness exhaustive --dtype fp16 --device cuda --chunk 67108864 --out "$O/exf"
run ref_bench 40 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096
[ -n "${FULL_T:-}" ] && run full $FULL_T python3 -m harness run --impl torch --impl fla --cases full --device cuda --out "$O/full" --no-report
tar czf "$O/exh.tgz" -C "$O" exb exf 2>/dev/null; rm -rf "$O/exb" "$O/exf"
