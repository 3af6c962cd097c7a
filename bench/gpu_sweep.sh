#!/usr/bin/env bash
# GPU sweeps, run on the lent H200 through the device tool (see bench/RESULTS.md for the figures):
#   bash bench/gpu_sweep.sh [IMPLS...]     (OUT defaults to ./out/gpu)
# Wheels the device image lacks (fla-core, einops) travel in .whl/ and install to /tmp/site.
set -uo pipefail
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -c 'import fla; print("fla", getattr(fla, "__version__", "?"))'; date -u; } 2>&1 | tee "$OUT/env.txt"
IMPLS=${IMPLS:-"torch torch-compile torch-compile-emulate fla"}
args=(); for i in $IMPLS; do args+=(--impl "$i"); done
for suite in ${SUITES:-quick full}; do
  start=$(date +%s.%N)
  python3 -m harness run "${args[@]}" --cases "$suite" --device cuda --out "$OUT/$suite" > "$OUT/$suite.log" 2>&1
  rc=$?
  echo "$suite: exit $rc, $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" | tee -a "$OUT/timing.txt"
  tail -45 "$OUT/$suite.log"
done
