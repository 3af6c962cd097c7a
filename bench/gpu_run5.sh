#!/usr/bin/env bash
# Fifth H200 batch (bench/RESULTS.md, run 5): the leaner fused reference, `full` on CUDA for the
# three CUDA implementations in one sweep (references shared), and the exhaustive results files.
set -uo pipefail
O=${OUT:-out/gpu5}; mkdir -p "$O"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -c 'import fla; print("fla", getattr(fla, "__version__", "?"))'; date -u; } > "$O/env.txt" 2>&1; cat "$O/env.txt"
run() { local name=$1 t=$2; shift 2; local s=$(date +%s.%N)
  timeout "$t" "$@" > "$O/$name.txt" 2>&1; local rc=$?
  echo "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a "$O/env.txt"; grep -v '^exhaustive: \|^\[' "$O/$name.txt" | tail -${TAILN:-8}; }
run ref_bench 60 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096
TAILN=40 run full ${T_FULL:-330} python3 -m harness run --impl torch --impl torch-compile --impl fla --cases full --device cuda --out "$O/full"
run exh_bf16 75 python3 -m harness exhaustive --dtype bf16 --device cuda --chunk 67108864 --out "$O/exb"
run exh_fp16 60 python3 -m harness exhaustive --dtype fp16 --device cuda --chunk 67108864 --out "$O/exf"
tar czf "$O/res.tgz" -C "$O" full exb exf 2>/dev/null; rm -rf "$O/full" "$O/exb" "$O/exf"
