# Sourced by the bench/gpu_run*.sh batches (run on the device machine through the device tool):
# the wheels the device image lacks (.whl/ -> /tmp/site), the environment, the machine and its
# versions appended to $O/env.txt, and
#   cold_caches             — remove Triton's and Inductor's on-disk caches
#   run NAME SECONDS CMD...  — CMD under a time limit, its output in $O/NAME.txt, a line
#                              "NAME: exit RC, S s" on screen and in $RUN_LOG, then the last
#                              ${TAILN:-$RUN_TAIL} lines of the output that do not match $RUN_SKIP.
# Set before sourcing: O; optionally RUN_LOG (default $O/env.txt), RUN_SKIP, RUN_TAIL (default 6).
set -uo pipefail
mkdir -p "$O"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
RUN_LOG=${RUN_LOG:-$O/env.txt}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -c 'import fla; print("fla", getattr(fla, "__version__", "?"))'
  python3 -c 'import mpmath; print("mpmath", mpmath.__version__, "backend", mpmath.libmp.BACKEND)'; date -u; } >> "$O/env.txt" 2>&1
run() { local name=$1 t=$2; shift 2; local s=$(date +%s.%N)
  timeout "$t" "$@" > "$O/$name.txt" 2>&1; local rc=$?
  echo "$name: exit $rc, $(python3 -c "print(round($(date +%s.%N)-$s,1))") s" | tee -a "$RUN_LOG"
  if [ -n "${RUN_SKIP:-}" ]; then grep -v "$RUN_SKIP" "$O/$name.txt"; else cat "$O/$name.txt"; fi | tail -${TAILN:-${RUN_TAIL:-6}}; }
# "cold" must not depend on what an earlier call left on a machine kept warm: Triton's and
# Inductor's on-disk caches removed
cold_caches() { rm -rf ~/.triton/cache "/tmp/torchinductor_$(id -un)"; }
