#!/usr/bin/env bash
# The GPU verification matrix: runs every framework case and leak scenario under libgpushim.so on
# a machine with an NVIDIA GPU, compares each report with the framework's own counters, and
# prints a table (also written to $OUT/table.md, with all logs and reports in
# $OUT/matrix-logs.tar.gz).
#
# Needs: target/release/libgpushim.so, target/release/gpushim and target/release/cudarc-leak
# (cargo build --release --workspace), nvcc, python3 with torch, cupy, jax and numba.
# Usage: scripts/gpu-matrix.sh [CASE...]   (default: every case)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REL=$ROOT/target/release
SHIM=$REL/libgpushim.so
OUT=${OUT:-/tmp/gpushim-matrix-out}
WORK=$(mktemp -d /tmp/gpushim-matrix.XXXXXX)
mkdir -p "$OUT" "$WORK/bin"
for f in "$SHIM" "$REL/gpushim"; do
  [ -x "$f" ] || [ -f "$f" ] || { echo "gpu-matrix: $f is missing: run cargo build --release --workspace" >&2; exit 2; }
done
export PYTHONUNBUFFERED=1
# NVLink multicast stays off on shared hosts (device README).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
  python3 - <<'PY'
import importlib, platform
print("python", platform.python_version())
for m in ("torch", "cupy", "jax", "numba"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "unavailable:", e)
PY
} > "$WORK/versions.txt" 2>&1

SELECTED=("$@")
selected() {
  [ ${#SELECTED[@]} -eq 0 ] && return 0
  local c; for c in "${SELECTED[@]}"; do [ "$c" = "$1" ] && return 0; done; return 1
}

# nvcc builds (default static runtime, shared runtime, S7: examples/leak.c as CUDA code), when
# a selected case needs one.
needs_nvcc() {
  [ ${#SELECTED[@]} -eq 0 ] && return 0
  local c; for c in "${SELECTED[@]}"; do case $c in cxx_*|S7|S7_cuda_data|fault_*|reach_lost|reach_kept|reach_cublas|reach_shared|reach_registered|reach_stack|reach_lost_cuda_data) return 0 ;; esac; done; return 1
}
if needs_nvcc; then
  nvcc -g -O1 -o "$WORK/bin/alloc_static" "$ROOT/scripts/gpu/alloc_matrix.cu" -lpthread > "$WORK/nvcc.log" 2>&1
  nvcc -g -O1 --cudart shared -o "$WORK/bin/alloc_shared" "$ROOT/scripts/gpu/alloc_matrix.cu" -lpthread >> "$WORK/nvcc.log" 2>&1
  nvcc -g -O0 -x cu -o "$WORK/bin/s7_leak" "$ROOT/examples/leak.c" >> "$WORK/nvcc.log" 2>&1
  nvcc -g -O1 -o "$WORK/bin/faults" "$ROOT/scripts/gpu/faults.cu" -lcuda -lpthread >> "$WORK/nvcc.log" 2>&1
  nvcc -g -O1 --cudart shared -o "$WORK/bin/faults_shared" "$ROOT/scripts/gpu/faults.cu" -lcuda -lpthread >> "$WORK/nvcc.log" 2>&1
  nvcc -g -O1 -o "$WORK/bin/vendor_threads" "$ROOT/scripts/gpu/vendor_threads.cu" -lcublas -lpthread -ldl >> "$WORK/nvcc.log" 2>&1
  nvcc -g -O1 -o "$WORK/bin/reach" "$ROOT/scripts/gpu/reach.cu" -lcublas -lpthread >> "$WORK/nvcc.log" 2>&1
fi

# run_case NAME [VAR=VALUE...] -- COMMAND...
run_case() {
  local name=$1; shift
  selected "$name" || return 0
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local d="$WORK/$name"
  mkdir -p "$d"
  local t0=$(date +%s%N)
  ( cd "$d" && env "${envs[@]}" GPUSHIM_OUTPUT="$d" LD_PRELOAD="$SHIM" timeout 300 "$@" > "$d/stdout" 2> "$d/stderr" )
  local rc=$? t1=$(date +%s%N)
  printf "%-18s rc=%-3s %6d ms\n" "$name" "$rc" "$(( (t1 - t0) / 1000000 ))" | tee -a "$WORK/runs.txt"
}

PY="python3 $ROOT/scripts/gpu/cases.py"
T=truth.json
run_case torch_default -- $PY torch_default $T
run_case torch_expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- $PY torch_expandable $T
run_case torch_async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- $PY torch_async $T
run_case torch_nocache PYTORCH_NO_CUDA_MEMORY_CACHING=1 -- $PY torch_nocache $T
run_case torch_pinned -- $PY torch_pinned $T
run_case cupy -- $PY cupy $T
run_case jax_platform XLA_PYTHON_CLIENT_ALLOCATOR=platform -- $PY jax_platform $T
run_case jax_default -- $PY jax_default $T
run_case numba -- $PY numba $T
run_case cxx_static -- "$WORK/bin/alloc_static"
run_case cxx_shared -- "$WORK/bin/alloc_shared"
run_case cudarc -- "$REL/cudarc-leak" 100
run_case S1 -- $PY S1 $T
run_case S2 -- $PY S2 $T
run_case S3 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- $PY S3 $T
run_case S4 -- $PY S4 $T
run_case S5 XLA_PYTHON_CLIENT_ALLOCATOR=platform -- $PY S5 $T
run_case S6 -- $PY S6 $T
run_case S7 -- "$WORK/bin/s7_leak" 300
run_case S8 -- $PY S8 $T
# Issue 13: lines of code, owners and untraced memory.
run_case stream_linear_20 -- $PY stream_linear_20 $T
run_case stream_linear_100 -- $PY stream_linear_100 $T
run_case jax_recompile -- $PY jax_recompile $T
run_case cupy_managed_pool -- $PY cupy_managed_pool $T
run_case numba_deferred_free -- $PY numba_deferred_free $T
run_case async_pool_keeps PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- $PY async_pool_keeps $T
# Who holds it (issue 12): the heap walk's companion files.
run_case H_hook -- $PY H_hook $T
run_case H_optimizer -- $PY H_optimizer $T
run_case H_cupy -- $PY H_cupy $T
run_case H_jax XLA_PYTHON_CLIENT_ALLOCATOR=platform -- $PY H_jax $T
run_case H_torch_cached -- $PY H_torch_cached $T
run_case H_train -- $PY H_train $T
# The Python API (issue 15): gpushim.snapshot(label) under PyTorch.
run_case P_api -- $PY P_api $T
# Issue 16: our torch-snapshot export of a training run against torch's own snapshot of it.
run_case torch_snapshot GPUSHIM_BIN="$REL/gpushim" -- python3 "$ROOT/scripts/gpu/torch-snapshot-check.py" $T
# Cases of the fault review (scripts/gpu/faults.cu).
run_case fault_exit -- "$WORK/bin/faults" exit-cleanup
run_case fault_snapshot -- "$WORK/bin/faults" slow-free
run_case fault_arrays -- "$WORK/bin/faults" arrays
run_case fault_arrays_shared -- "$WORK/bin/faults_shared" arrays
# The static runtime's cudaDeviceReset reaches the driver through no function the shim sees
# (docs/cuda-memory-api.md): the reset case runs with the shared runtime, and with the driver API.
run_case fault_reset -- "$WORK/bin/faults_shared" reset
run_case fault_reset_driver -- "$WORK/bin/faults" reset-driver
run_case fault_stream_device -- "$WORK/bin/faults" stream-device
run_case fault_contexts -- "$WORK/bin/faults" contexts
run_case fault_reset_static -- "$WORK/bin/faults" reset
run_case fault_pool_device -- "$WORK/bin/faults" pool-device
run_case fault_oom_device -- "$WORK/bin/faults" oom-device
run_case fault_vmm -- "$WORK/bin/faults" vmm
run_case fault_graph -- "$WORK/bin/faults" graph
# Issue 18: pool hits from two call paths, with the hot path's per-thread caches on and off.
run_case fault_pool_paths -- "$WORK/bin/faults" pool-paths
run_case fault_pool_paths_nocache GPUSHIM_UNWIND_CACHE=0 -- "$WORK/bin/faults" pool-paths
run_case fault_graph_shared -- "$WORK/bin/faults_shared" graph
# Issue 14: Prometheus metrics, scraped by the program itself from its collector (a free port).
run_case fault_metrics GPUSHIM_METRICS=127.0.0.1:0 -- "$WORK/bin/faults" metrics
# Issue 18: no capture-state query outside captures; captures begun every way still make graph nodes.
run_case fault_capture_paths -- "$WORK/bin/faults" capture-paths
run_case fault_capture_paths_shared -- "$WORK/bin/faults_shared" capture-paths
run_case fault_ring_threads -- "$WORK/bin/faults" ring-threads
# Issue 13: whose code a stack is, one suspect per cause, threads.
run_case fault_cublas_threads -- "$WORK/bin/vendor_threads" cublas-per-thread 100
# NCCL from PyTorch's nvidia-nccl wheel (the GPU machine has no system NCCL).
NCCL_LIB=${NCCL_LIB:-$(python3 -c 'import glob, nvidia; print((sorted(f for p in nvidia.__path__ for f in glob.glob(p + "/nccl/lib/libnccl.so*")) or [""])[0])' 2>/dev/null || true)}
run_case fault_nccl_cycles NCCL_LIB="$NCCL_LIB" -- "$WORK/bin/vendor_threads" nccl-per-cycle 20
run_case fault_logits -- $PY T13_logits $T
run_case fault_logits_compiled -- $PY T13_logits_compiled $T
# Issue 29: no torch._inductor import because of the shim, after a snapshot and at exit.
run_case no_import SNAP=1 -- python3 "$ROOT/scripts/gpu/no_import_check.py"
run_case fault_autograd_cycle -- $PY T13_autograd_cycle $T
run_case fault_devices_per_thread -- "$WORK/bin/faults" devices-per-thread
run_case fault_exit_time -- "$WORK/bin/faults" exit-time 1000000
# Whole jobs (issue 14): two ranks started by torchrun under `gpushim run`, then the job view.
# They need two GPUs; on one, each writes {"gpus": N} and compare.py says "not run".
# run_job_case NAME [VAR=VALUE...]
run_job_case() {
  local name=$1; shift
  selected "$name" || return 0
  local d="$WORK/$name"
  mkdir -p "$d"
  local gpus
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$gpus" -lt 2 ]; then
    echo "{\"gpus\": $gpus}" > "$d/truth.json"
    printf "%-18s skipped: %s GPU(s)\n" "$name" "$gpus" | tee -a "$WORK/runs.txt"
    return 0
  fi
  local t0=$(date +%s%N)
  ( cd "$d" && env "$@" timeout 300 "$REL/gpushim" run --output "$d" -- \
      python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
      "$ROOT/scripts/gpu/job_cases.py" "${name#job_}" "$d" > "$d/stdout" 2> "$d/stderr" )
  local rc=$? t1=$(date +%s%N)
  "$REL/gpushim" report "$d" --format json > "$d/job.json" 2>> "$d/stderr"
  printf "%-18s rc=%-3s %6d ms\n" "$name" "$rc" "$(( (t1 - t0) / 1000000 ))" | tee -a "$WORK/runs.txt"
}
run_job_case job_ddp
run_job_case job_gpu0_before_set_device
run_job_case job_leak_one_rank PYTORCH_NO_CUDA_MEMORY_CACHING=1
# Containers and schedulers (issue 30). A PyTorch program as PID 1 of a PID namespace of its own
# (`docker run` without --init): its report, and the untraced figure marked unknown there (NVML
# lists the machine's pids). Without root, a user namespace makes the PID namespace.
UNSHARE=(unshare --pid --fork --mount-proc)
unshare --pid --fork --mount-proc true 2>/dev/null || UNSHARE=(unshare --user --map-root-user --pid --fork --mount-proc)
run_case container_pid1 -- "${UNSHARE[@]}" $PY torch_default $T
# A torchrun job with one process under `gpushim run`, stopped mid-run with SIGTERM to every
# process of the job at once (the collector included, whatever its session), as `scancel`,
# `systemctl stop` or a pod's teardown do: the worker's report says it was stopped.
run_stop_case() {
  local name=torchrun_sigterm
  selected "$name" || return 0
  local d="$WORK/$name" tag="gpushim-stop-$$-$RANDOM"
  mkdir -p "$d"
  local t0=$(date +%s%N)
  ( cd "$d" && exec env STOP_CHECK_TAG="$tag" timeout 300 "$REL/gpushim" run --output "$d" -- \
      python3 -m torch.distributed.run --standalone --nproc_per_node=1 \
      "$ROOT/scripts/gpu/stop_check.py" "$d" > "$d/stdout" 2> "$d/stderr" ) &
  local bg=$! i
  for i in $(seq 1200); do [ -e "$d/started" ] && break; sleep 0.1; done
  # The job's processes found first, then signalled by one kill, as a cgroup stop signals them.
  local pids
  pids=$(grep -lzx "STOP_CHECK_TAG=$tag" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | tr '\n' ' ')
  kill -TERM $pids 2>/dev/null
  local stopped=$(echo $pids | wc -w)
  wait "$bg"
  local rc=$? t1=$(date +%s%N)
  echo "{\"signalled\": $stopped, \"started\": $([ -e "$d/started" ] && echo true || echo false)}" > "$d/truth.json"
  printf "%-18s rc=%-3s %6d ms (SIGTERM to %d processes)\n" "$name" "$rc" "$(( (t1 - t0) / 1000000 ))" "$stopped" | tee -a "$WORK/runs.txt"
}
run_stop_case
# Reachability (issue 17): definitely lost vs reachable (scripts/gpu/reach.cu, cases.py R_torch;
# S7 above gets its class too).
run_case reach_lost -- "$WORK/bin/reach" lost
run_case reach_kept -- "$WORK/bin/reach" kept
run_case reach_cublas -- "$WORK/bin/reach" cublas
# Issue 29, item 5: pointers in shared anonymous memory, in a block the driver also points to,
# below a blocked thread's given stack.
run_case reach_shared -- "$WORK/bin/reach" shared
run_case reach_registered -- "$WORK/bin/reach" registered
run_case reach_stack -- "$WORK/bin/reach" stack
# The same with the CUDA libraries' data read as the program's roots: what leaving it out does.
run_case reach_lost_cuda_data GPUSHIM_REACHABILITY_CUDA_DATA=1 -- "$WORK/bin/reach" lost
run_case S7_cuda_data GPUSHIM_REACHABILITY_CUDA_DATA=1 -- "$WORK/bin/s7_leak" 300
run_case reach_torch -- $PY R_torch $T

python3 "$ROOT/scripts/gpu/compare.py" "$WORK" > "$WORK/table.md" 2> "$WORK/compare.err"
cp "$WORK/table.md" "$WORK/versions.txt" "$OUT/"
tar -C "$WORK" -czf "$OUT/matrix-logs.tar.gz" . 2>/dev/null
cat "$WORK/versions.txt" "$WORK/runs.txt"
cat "$WORK/compare.err"
cat "$WORK/table.md"
