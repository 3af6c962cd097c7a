#!/usr/bin/env bash
# Fourth H200 batch (bench/RESULTS.md, run 4): measure before optimising — the fused exhaustive
# path (timers in its perf counters), the reference benchmark, and one shard of `full` per CUDA
# implementation under cProfile (where a sweep's time goes: compiles, references, mpmath).
O=${OUT:-out/gpu4} RUN_LOG=$O/timing.txt RUN_SKIP='^exhaustive: '
source bench/gpu_lib.sh
run exh_bf16 ${T_BF16:-120} python3 bench/bench_exhaustive.py --dtype bf16 --device cuda --repeat ${REPEAT:-1}
run exh_fp16 ${T_FP16:-60} python3 bench/bench_exhaustive.py --dtype fp16 --device cuda --repeat ${REPEAT:-1}
run ref_bench 40 python3 bench/bench_reference.py --device cuda --tokens 8192 --hidden 4096
for i in ${IMPLS:-torch torch-compile fla}; do
  run "full_$i" ${T_FULL:-100} python3 -m cProfile -o "$O/full_$i.prof" -m harness run --impl "$i" --cases full \
      --shard ${SHARD:-1/8} --device cuda --out "$O/full_$i" --no-report
done
tar czf "$O/prof.tgz" -C "$O" $(cd "$O" && ls -d *.prof full_* 2>/dev/null) 2>/dev/null
rm -rf "$O"/*.prof "$O"/full_*/
ls "$O"
