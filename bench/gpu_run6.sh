#!/usr/bin/env bash
# Sixth H200 batch (bench/RESULTS.md, run 6): the fused reference with one exp, and `full` on CUDA
# for torch, torch-compile and fla in one sweep with --jobs (cold caches, then warm).
set -uo pipefail
O=${OUT:-out/gpu6}; mkdir -p "$O"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  date -u; } > "$O/env.txt" 2>&1; cat "$O/env.txt"
run() { local name=$1 t=$2; shift 2; local s=$(date +%s.%N)
  timeout "$t" "$@" > "$O/$name.txt" 2>&1; local rc=$?
  echo "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a "$O/env.txt"; grep -v '^\[' "$O/$name.txt" | tail -${TAILN:-6}; }
run ref_bench 60 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096
J=${JOBS:-16}
TAILN=12 run full_cold ${T_COLD:-360} python3 -m harness run --impl torch --impl torch-compile --impl fla --cases full --device cuda --out "$O/full" --jobs $J
cp "$O/full/summary.csv" "$O/full-summary.csv" 2>/dev/null; cp "$O/full/timing.csv" "$O/full-timing.csv" 2>/dev/null
TAILN=3 run full_warm ${T_WARM:-120} python3 -m harness run --impl torch --impl torch-compile --impl fla --cases full --device cuda --out "$O/full2" --jobs $J --no-report
cp "$O/full2/timing.csv" "$O/full-warm-timing.csv" 2>/dev/null
tar czf "$O/full.tgz" -C "$O" full 2>/dev/null; rm -rf "$O/full" "$O/full2"
