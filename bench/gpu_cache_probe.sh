#!/usr/bin/env bash
# Why did a warm `full` rerun autotune fla again (run 9a)? One compile key, each run in a fresh
# process, Triton's autotuning printed; counts of autotuning lines and of cache files after each.
#   bash bench/gpu_cache_probe.sh      (on the device; everything lands in $OUT/probe.tgz + probe.txt)
O=${OUT:-out/cache-probe}/p RUN_LOG=${OUT:-out/cache-probe}/probe.txt RUN_TAIL=0
source bench/gpu_lib.sh
export TRITON_PRINT_AUTOTUNING=1
S=bench/suites/one-key.toml U=$(id -un)
clear() { cold_caches; rm -rf /tmp/tcd; }
count() { echo "  $1: autotuned $(cat "$O/$1.txt" "$O/$1"/jobs/*/log.txt 2>/dev/null | grep -c 'autotuning for function'), " \
  "files: ~/.triton/cache $(find ~/.triton/cache -type f 2>/dev/null | wc -l), inductor triton $(find /tmp/torchinductor_$U/triton -type f 2>/dev/null | wc -l), " \
  "/tmp/tcd $(find /tmp/tcd -type f 2>/dev/null | wc -l), autotune.json $(find ~/.triton /tmp/torchinductor_$U /tmp/tcd -name '*.autotune.json' 2>/dev/null | wc -l)" | tee -a "$RUN_LOG"; }
h() { local name=$1; shift; run "$name" 150 python3 -m harness run --cases $S --device cuda --out "$O/$name" --no-report "$@"; count "$name"; }
clear
h both_cold --impl torch-compile --impl fla
h both_warm --impl torch-compile --impl fla
h fla_only_warm --impl fla
h jobs2_warm --impl torch-compile --impl fla --jobs 2 --shard-by case
python3 - >> "$RUN_LOG" 2>&1 <<'PY'
import os, torch
from harness.impls.registry import resolve
from harness.execute import run_impl
from cases.case import Case
from cases.generate import generate
import triton
print("  before torch-compile: TRITON_CACHE_DIR =", os.environ.get("TRITON_CACHE_DIR"), "knobs:", triton.knobs.cache.dir)
inp = generate(Case("bf16", "bf16", "bf16", (32, 127), False, 1e-5, "standard", "normal", "one", 0)).to("cuda")
run_impl(resolve("torch-compile"), inp, inp.x.dtype, "cuda")
print("  after torch-compile:  TRITON_CACHE_DIR =", os.environ.get("TRITON_CACHE_DIR"), "knobs:", triton.knobs.cache.dir)
PY
clear
export TRITON_CACHE_DIR=/tmp/tcd
h fixed_dir_cold --impl torch-compile --impl fla
h fixed_dir_warm --impl torch-compile --impl fla
tar czf "${OUT:-out/cache-probe}/probe.tgz" -C "$O" . ; cat "$RUN_LOG"
