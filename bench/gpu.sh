#!/usr/bin/env bash
# The GPU batch: run on the device machine (one H200) through the device tool, from the repository
# root, with the wheels the image lacks in .whl/ (fla-core, and mamba_ssm's pure wheel built as the
# README says; see bench/RESULTS.md):
#   bash bench/gpu.sh STAGE...
# Stages (each logs to $OUT/log.txt with its command, exit code and wall time, the whole command
# timed as a user types it):
#   tests       the test files with CUDA paths (the references' passes and rounding, the adapters, exhaustive,
#               the inputs' rounding on the GPU,
#               the GPU time and the bandwidth floor's bytes, CUDA's driver started before a worker's fork)
#   exhaustive  `harness exhaustive` bf16 and fp16, the whole command cold and warm (bench_exhaustive.py)
#   quick       quick on CUDA for torch, torch-compile, fla, fla-gated, mamba and the HF adapters
#   identify    `harness identify` for every CUDA built-in and adapter (model and math class)
#   mamba       the Triton kernels (mamba, fla-gated, fla) through quick and full at their declared
#               class (fast), then at `accurate` (expected to fail, naming the float32 outputs next to
#               large gates)
#   full-cold   full for torch, torch-compile, fla, --jobs 16, caches emptied first; full-warm: again
#   speed       speed beside accuracy at 8192x4096 bf16 (bench/bench_speed.py: the harness's GPU time
#               against wall, profiler and CUDA-graph timings made outside it), three times for the spread
#   quick-cost  quick for the CUDA implementations (CUDA_IMPLS), caches emptied, then again warm, report
#               included: the whole command as typed against timing.csv's phases (issue 29)
#   reference   the float64 reference pass against the bandwidth floor (bench/bench_reference.py)
#   hf-full     full on CUDA for the four HF adapters
#   hf          full on CUDA for the HF adapters of issue 28 (HF_NEW: silu and sigmoid), then identify for
#               every HF adapter at once, one process each (identify runs quick against every model, the
#               declared one included); they need transformers 5.24.0 and its dependencies in .whl/ (the
#               image's 5.17.0 lacks LaraMini and NemotronH, and Bamba/GraniteMoeHybrid have no groups there)
#   selftest    `harness selftest --device cuda`
#   big         bench/suites/big.toml for torch: 16.8-33.6 M-element cases, whose references and checks
#               run on the GPU in each worker's judge, the outputs sent there from the implementation's
#               process (89-91 s in run 12h, docs/performance.md §1)
#   sigmoid-exhaustive  `harness exhaustive --activation sigmoid` bf16 and fp16 on CUDA (the Triton tile pass
#               over the sigmoid tables; dgate's saturated regime reported)
#   sigmoid-fla `fla` (FusedRMSNormGated, activation="sigmoid" on the sigmoid cases) through quick and full
#               at its declared class (fast), and identify (keyed by activation); fla-gated runs them as skips
#   serve       the serving stacks' forward-only Triton gated norms (SERVE below: sglang-gated, sglang-fused,
#               vllm-gated) through quick and full on CUDA and identify each, and their CUDA tests. It needs
#               only .whl-serve/ (carry it without .whl/): sglang's cp312 wheel, installed --no-deps when
#               sglang is not installed, and vLLM 0.26.0's one file, layernorm_guard.py, extracted into a
#               folder laid out as the package (vllm/third_party/flash_linear_attention/ops/), put on
#               PYTHONPATH; besides, the image's torch, triton and einops (README, "Serving stacks")
set -uo pipefail
# The device image sets PYTHONDONTWRITEBYTECODE=1, so every process there compiled torch's Python
# sources again (~2.25 s of a warm `harness exhaustive`); a user's machine keeps bytecode (pip
# writes it at install, Python on first import), and so does this batch.
unset PYTHONDONTWRITEBYTECODE
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
export PYTHONUNBUFFERED=1
if ! python3 -c "import harness.references" 2>/dev/null; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl || exit 1
  fi
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null || exit 1
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; date -u
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -c 'import sys; print("dont_write_bytecode", sys.dont_write_bytecode)'
  python3 -c 'import importlib.metadata as m; print(*[f"{p} {m.version(p)}" for p in ("fla-core", "mamba_ssm", "einops", "transformers", "mpmath", "gmpy2")])' 2>&1
} >> "$LOG"

step() {  # step NAME SECONDS CMD...: the command's output to the log, its exit code and wall time
  local name=$1 t=$2; shift 2
  echo "== $name: $*" >> "$LOG"
  local s; s=$(date +%s.%N)
  timeout "$t" "$@" >> "$LOG" 2>&1; local rc=$?
  echo "== $name: exit $rc, $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s" | tee -a "$LOG"
}
timings() { for d in "$@"; do echo "== $d/timing.csv" >> "$LOG"; cat "$OUT/$d/timing.csv" >> "$LOG" 2>&1; done; }
cold() { rm -rf ~/.triton/cache "/tmp/torchinductor_$(id -un)"; }
CUDA_IMPLS="--impl torch --impl torch-compile --impl fla --impl fla-gated --impl mamba --impl hf-qwen3next --impl hf-falconh1 --impl hf-mamba2 --impl hf-zamba2"
HF_FIELD="hf-qwen35 hf-qwen4exp hf-olmohybrid hf-laramini hf-nemotronh hf-granitemoehybrid hf-bamba"
SERVE="sglang-gated sglang-fused vllm-gated"
HF_NEW="$HF_FIELD hf-kimilinear hf-bailinghybrid hf-glm5next"
HF_ALL="hf-qwen3next hf-falconh1 hf-mamba2 hf-zamba2 $HF_NEW"

identify_all() {  # identify_all IMPL...: one identify per implementation, all at once (16 cores), each
  # to its own log, then the verdict lines into the batch's log
  local s; s=$(date +%s.%N)
  for i in "$@"; do
    timeout 300 python3 -m harness identify --impl "$i" --cases quick --device cuda --jobs 1 --out "$OUT/id-$i" \
      --no-report > "$OUT/id-$i.log" 2>&1 &
  done
  wait
  for i in "$@"; do echo "== identify-$i: $(grep -E 'realises' "$OUT/id-$i.log" || tail -1 "$OUT/id-$i.log")"; done | tee -a "$LOG"
  echo "== identify ($*): $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s for all" | tee -a "$LOG"
}
TRITON_IMPLS="--impl mamba --impl fla-gated --impl fla"
TRITON_ACCURATE="--impl mamba@accurate --impl fla-gated@accurate --impl fla@accurate"

for stage in "$@"; do
  case $stage in
    tests) step tests 300 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_accel.py tests/test_adapters.py \
             tests/test_exhaustive.py tests/test_gputime.py tests/test_formats.py tests/test_speed_columns.py \
             tests/test_cudafork.py tests/test_generate.py ;;
    exhaustive) step exhaustive 400 python3 bench/bench_exhaustive.py --device cuda --cli ;;
    exhaustive-profile) step exhaustive-profile 120 python3 -m cProfile -s cumtime -m harness exhaustive --dtype bf16 \
             --device cuda --out "$OUT/ex-prof" ;;
    quick) step quick 600 python3 -m harness run $CUDA_IMPLS --cases quick --device cuda --jobs 8 \
             --out "$OUT/quick" --no-report ;;
    identify) for i in torch torch-compile torch-compile-emulate fla fla-gated mamba hf-qwen3next hf-falconh1 hf-mamba2 hf-zamba2; do
        step "identify-$i" 300 python3 -m harness identify --impl $i --cases quick --device cuda --jobs 4 \
             --out "$OUT/id-$i" --no-report
      done ;;
    mamba) step mamba-quick 600 python3 -m harness run $TRITON_IMPLS --cases quick --device cuda --jobs 8 \
             --out "$OUT/mamba-quick" --no-report
      step mamba-quick-accurate 600 python3 -m harness run $TRITON_ACCURATE --cases quick --device cuda --jobs 8 \
             --out "$OUT/mamba-quick-accurate" --no-report
      step mamba-full 600 python3 -m harness run $TRITON_IMPLS --cases full --device cuda --jobs 16 \
             --out "$OUT/mamba-full" --no-report --repeats 0
      step mamba-full-accurate 600 python3 -m harness run $TRITON_ACCURATE --cases full --device cuda --jobs 16 \
             --out "$OUT/mamba-full-accurate" --no-report --repeats 0 ;;
    full-cold) cold
      step full-cold 600 python3 -m harness run --impl torch --impl torch-compile --impl fla --cases full \
           --device cuda --jobs 16 --out "$OUT/full" --no-report --repeats 0; timings full ;;
    full-warm) step full-warm 600 python3 -m harness run --impl torch --impl torch-compile --impl fla --cases full \
           --device cuda --jobs 16 --out "$OUT/full-warm" --no-report --repeats 0; timings full-warm ;;
    speed) for k in 1 2 3; do step "speed-$k" 240 python3 bench/bench_speed.py --out "$OUT/speed-$k"; done ;;
    quick-cost) cold
      step quick-cold 600 python3 -m harness run $CUDA_IMPLS --cases quick --device cuda --jobs 8 --out "$OUT/quick-cold"
      step quick-warm 300 python3 -m harness run $CUDA_IMPLS --cases quick --device cuda --jobs 8 --out "$OUT/quick-warm"
      timings quick-cold quick-warm ;;
    reference) step reference 300 python3 bench/bench_reference.py --repeat 50 ;;
    hf-full) step hf-full 600 python3 -m harness run --impl hf-qwen3next --impl hf-falconh1 --impl hf-mamba2 \
             --impl hf-zamba2 --cases full --device cuda --jobs 16 --out "$OUT/hf-full" --no-report --repeats 0 ;;
    hf) step hf-new-full 600 python3 -m harness run $(printf -- '--impl %s ' $HF_NEW) --cases full --device cuda \
             --jobs 16 --out "$OUT/hf-new-full" --no-report --repeats 0
      identify_all $HF_ALL ;;
    selftest) step selftest 600 python3 -m harness selftest --device cuda --jobs 8 --out "$OUT/selftest" ;;
    big) step big 600 python3 -m harness run --impl torch --cases bench/suites/big.toml --device cuda --jobs 4 \
             --out "$OUT/big" --no-report --repeats 0 ;;
    sigmoid-exhaustive) for dt in bf16 fp16; do
        step "exhaustive-sigmoid-$dt" 400 python3 -m harness exhaustive --dtype $dt --activation sigmoid --device cuda \
             --out "$OUT/ex-sigmoid-$dt"
      done ;;
    sigmoid-fla) step sigmoid-fla-quick 600 python3 -m harness run --impl fla --impl fla-gated --cases quick --device cuda \
             --jobs 8 --out "$OUT/sigmoid-fla-quick" --no-report
      step sigmoid-fla-full 600 python3 -m harness run --impl fla --cases full --device cuda --jobs 16 \
           --out "$OUT/sigmoid-fla-full" --no-report --repeats 0
      step identify-fla-sigmoid 300 python3 -m harness identify --impl fla --cases quick --device cuda --jobs 4 \
           --out "$OUT/id-fla-sigmoid" --no-report ;;
    serve) if ! python3 -c 'import importlib.util as u, sys; sys.exit(u.find_spec("sglang") is None)'; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl-serve/*.whl || exit 1
      fi
      export PYTHONPATH="$PWD/.whl-serve${PYTHONPATH:+:$PYTHONPATH}"
      python3 -c 'import importlib.metadata as m; print("sglang", m.version("sglang"))' >> "$LOG" 2>&1
      python3 -c 'from harness.impls.registry import builtins; b = builtins()
print(*[f"{n}: {b[n].unavailable or b[n].notes}" for n in "'"$SERVE"'".split()], sep="\n")' >> "$LOG" 2>&1
      step serve-tests 300 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_serve_adapters.py \
           tests/test_forward_only.py
      step serve-quick 600 python3 -m harness run $(printf -- '--impl %s ' $SERVE) --cases quick --device cuda \
           --jobs 8 --out "$OUT/serve-quick" --no-report
      step serve-full 600 python3 -m harness run $(printf -- '--impl %s ' $SERVE) --cases full --device cuda \
           --jobs 16 --out "$OUT/serve-full" --no-report --repeats 0
      for i in $SERVE; do
        step "identify-$i" 300 python3 -m harness identify --impl $i --cases quick --device cuda --jobs 4 \
             --out "$OUT/id-$i" --no-report
      done ;;
    *) echo "unknown stage $stage" | tee -a "$LOG"; exit 2 ;;
  esac
done
