#!/usr/bin/env bash
# H200 batches (bench/RESULTS.md, runs 8 and 9). One device call runs one or more modes in order:
#   bash bench/gpu_run8.sh MODE [MODE...]
#   full     — `full` for torch, torch-compile, fla with --jobs 16 --shard-by shape: cold caches,
#              then again warm (same machine), Triton's autotuning printed in the workers' logs
#   warm     — `full` once more, caches as the previous mode left them
#   quick    — quick for torch, torch-compile, torch-compile-emulate, fla (--jobs 16)
#   smoke    — quick for torch in one process
#   probe    — first call vs steady call of fla and torch-compile per shape, in a fresh process
#              twice (cold, then warm on-disk caches), autotuning printed
#   ref      — the float64 reference kernels against the floor (bench_reference.py ${REF_ARGS:-
#              --triton --profile}), their GPU tests, and the warm exhaustive times;
#              reftests — the reference kernels and the GPU tests only; tests — the GPU tests only
#   big      — bench/suites/big.toml (cases whose reference goes through the fused pass) for torch,
#              with the Triton pass (the default), then with HARNESS_FUSED_BACKEND=inductor
# The device call brings back only a few files (runs 9a and 9b lost some): after each step its
# files are appended to $OUT/run.tar and removed, so $OUT holds run.tar and the step under way.
# Run 8 (a-d) ran it one mode a call, each step's files loose in $OUT.
O=${OUT:-out/gpu8}/w RUN_SKIP='^exhaustive: \|^\['
source bench/gpu_lib.sh
A="$(cd "$O/.." && pwd)/run.tar"
keep() { (cd "$O" && tar rf "$A" "$@" 2>/dev/null && rm -rf "$@"); }
sweep() { local name=$1 t=$2
  TAILN=4 run "$name" "$t" python3 -m harness run ${IMPLS:---impl torch --impl torch-compile --impl fla} \
    --cases ${SUITE:-full} --device cuda --out "$O/$name" --no-report \
    $([ "${JOBS:-16}" = 1 ] || echo "--jobs ${JOBS:-16} --shard-by ${BY:-shape}")
  (cd "$O/$name" && rm -f jobs/*/results.csv jobs/*/summary.csv && { [ -n "${KEEP_RESULTS:-}" ] || rm -f results.csv; })   # summary.csv holds the findings
  keep "$name" "$name.txt"; }
gpu_tests() { timeout ${T_TESTS:-240} python3 -m pytest -q -rA -p no:cacheprovider "$@" > "$O/gpu_tests.txt" 2>&1
  echo "gpu_tests: exit $?" >> "$O/gpu_tests.txt"; tail -3 "$O/gpu_tests.txt"; keep gpu_tests.txt; }
[ $# -gt 0 ] || { echo "usage: bash bench/gpu_run8.sh full|warm|quick|smoke|probe|ref|reftests|big|tests ..."; exit 2; }
for mode in "$@"; do case "$mode" in
  full) cold_caches; export TRITON_PRINT_AUTOTUNING=1
        sweep full_cold ${T_COLD:-300}; sweep full_warm ${T_WARM:-200} ;;
  warm) export TRITON_PRINT_AUTOTUNING=1; sweep full_warm2 ${T_WARM:-200} ;;
  quick) IMPLS="--impl torch --impl torch-compile --impl torch-compile-emulate --impl fla" SUITE=quick sweep quick ${T_QUICK:-200} ;;
  smoke) IMPLS="--impl torch" SUITE=quick JOBS=1 sweep smoke ${T_QUICK:-120} ;;
  probe) cold_caches; export TRITON_PRINT_AUTOTUNING=1; TAILN=40 run probe_cold 200 python3 bench/bench_first_call.py
         TAILN=40 run probe_warm 150 python3 bench/bench_first_call.py; keep probe_cold.txt probe_warm.txt ;;
  big)  # the cases whose reference goes through the fused pass: the Triton one (default), then Inductor's
        BY=case IMPLS="--impl torch" SUITE=bench/suites/big.toml JOBS=${JOBS:-4} KEEP_RESULTS=1 sweep big_triton ${T_BIG:-240}
        HARNESS_FUSED_BACKEND=inductor BY=case IMPLS="--impl torch" SUITE=bench/suites/big.toml JOBS=${JOBS:-4} KEEP_RESULTS=1 \
          sweep big_inductor ${T_BIG:-240} ;;
  tests) gpu_tests ${GPU_TESTS:-tests/test_triton_reference.py tests/test_analysis_device.py} ;;
  ref|reftests) TAILN=${REF_TAIL:-40} run ref_bench ${T_REF:-200} python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096 ${REF_ARGS:---triton --profile}
        keep ref_bench.txt
        gpu_tests ${GPU_TESTS:-tests/test_triton_reference.py tests/test_analysis_device.py}
        if [ "$mode" = ref ]; then
          run exh_bf16 90 python3 bench/bench_exhaustive.py --dtype bf16 --device cuda
          run exh_fp16 80 python3 bench/bench_exhaustive.py --dtype fp16 --device cuda; keep exh_bf16.txt exh_fp16.txt
        fi ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac; done
keep env.txt
