#!/usr/bin/env bash
# H200 batches (bench/RESULTS.md, run 8 and after), one mode per device call (each fits its 600 s):
#   bash bench/gpu_run8.sh full  — `full` for torch, torch-compile, fla with --jobs 16 --shard-by shape,
#                                  cold caches, then again warm (same machine), with pair timings;
#                                  each sweep's files in $O/NAME.tgz, its output in $O/NAME.txt
#   bash bench/gpu_run8.sh quick — quick for torch, torch-compile, torch-compile-emulate, fla (NOT RUN yet:
#                                  quick on CUDA has not been rerun since the recompile-limit fix of run 5)
#   bash bench/gpu_run8.sh probe — first call vs steady call of fla and torch-compile per shape, in a
#                                  fresh process twice (cold, then warm on-disk caches), autotuning printed
#   bash bench/gpu_run8.sh ref   — the float64 reference kernels against the floor, their GPU tests,
#                                  and the warm exhaustive times after run 7's certification change
#   bash bench/gpu_run8.sh reftests — the reference kernels and their GPU tests only
O=${OUT:-out/gpu8} RUN_SKIP='^exhaustive: \|^\['
source bench/gpu_lib.sh
sweep() { local name=$1 t=$2
  TAILN=4 run "$name" "$t" python3 -m harness run ${IMPLS:---impl torch --impl torch-compile --impl fla} \
    --cases ${SUITE:-full} --device cuda --out "$O/$name" --jobs ${JOBS:-16} --shard-by ${BY:-shape} --no-report
  # one archive a sweep: the device call brings back only a few files (run 9a lost five)
  grep -h "exit\|did not" "$O/$name.txt" | head -40 > "$O/$name/jobs-finished.txt"
  (cd "$O/$name" && tar czf "../$name.tgz" summary.csv timing.csv pair-timing.csv jobs-finished.txt \
     jobs/*/pair-timing.csv jobs/*/log.txt jobs/*/timing.csv 2>/dev/null); rm -rf "$O/$name"; }
# "cold" must not depend on what an earlier call left on a machine kept warm
cold_caches() { rm -rf ~/.triton/cache "/tmp/torchinductor_$(id -un)"; }
case "${1:-}" in
  full) cold_caches; export TRITON_PRINT_AUTOTUNING=1   # the workers' logs say which keys autotuned
        sweep full_cold ${T_COLD:-320}; sweep full_warm ${T_WARM:-230} ;;
  quick) IMPLS="--impl torch --impl torch-compile --impl torch-compile-emulate --impl fla" SUITE=quick sweep quick ${T_QUICK:-240} ;;
  probe) cold_caches; export TRITON_PRINT_AUTOTUNING=1; TAILN=40 run probe_cold 200 python3 bench/bench_first_call.py
        TAILN=40 run probe_warm 150 python3 bench/bench_first_call.py ;;
  ref|reftests) run ref_bench 150 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096 --triton --profile
        python3 -m pytest -q tests/test_triton_reference.py tests/test_fast_reference.py > "$O/gpu_tests.txt" 2>&1; tail -2 "$O/gpu_tests.txt"
        [ "$1" = reftests ] && exit 0
        run exh_bf16 90 python3 bench/bench_exhaustive.py --dtype bf16 --device cuda
        run exh_fp16 80 python3 bench/bench_exhaustive.py --dtype fp16 --device cuda ;;
  *) echo "usage: bash bench/gpu_run8.sh full|quick|probe|ref|reftests"; exit 2 ;;
esac
