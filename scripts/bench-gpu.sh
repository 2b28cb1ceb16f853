#!/usr/bin/env bash
# GPU overhead benchmark, on a machine with an NVIDIA GPU, in one command. Side by side, each
# configuration run REPS times interleaved, the median taken:
#  (a) a tight loop of cudaMalloc/cudaFree of 2 MiB blocks (nvcc, static runtime): time with
#      the shim / without (goal <= 1.10), and under compute-sanitizer --leak-check full;
#  (b) a small transformer training loop in PyTorch: steps/s with the shim / without (goal >= 0.99
#      with the default caching allocator, >= 0.95 with PYTORCH_NO_CUDA_MEMORY_CACHING=1), and
#      with torch.cuda.memory._record_memory_history(stacks="all") instead of the shim.
#  (c) issue 18's pool-hit loop (scripts/gpu/bench_pool.cu): 200,000 pairs of cudaMallocAsync +
#      cudaFreeAsync of 4 KiB on one stream from a 40-frame stack, ns per pair: bare, shim with
#      backtraces, shim with GPUSHIM_BACKTRACE=0 (goals <= 1.10 and <= 1.03). The program starts
#      under `taskset -c 3-15` (the shim's writer thread and the collector inherit that) and pins
#      its measuring thread to CPU 2 after the warm-up;
#  (d) Python frames at pool hits (scripts/bench/python_frames.py ... recursive async, 50 Python
#      frames, cudaMallocAsync+cudaFreeAsync of 4 KiB on a stream the script creates, through
#      ctypes and the real libcudart, pinned the same way with taskset -c 2 for the whole
#      process): shim with GPUSHIM_PYTHON=0 against shim with Python frames (goal: at most 200 ns
#      more per allocation).
# Needs target/release/libgpushim.so and target/release/gpushim. Writes $OUT/bench-gpu.txt.
# Usage: scripts/bench-gpu.sh [REPS=3]
# WORKLOADS (default "pool python alloc train": (c), (d), (a), (b)) and TRAIN_CFGS (default
# "none shim history nocache_none nocache_shim") pick a part; ONLY=pool is WORKLOADS="pool
# python". The table leaves out what was not run.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REL=$ROOT/target/release
OUT=${OUT:-/tmp/gpushim-bench-out}
REPS=${1:-3}
W=$(mktemp -d /tmp/gpushim-bench.XXXXXX)
mkdir -p "$OUT"
export GPUSHIM_OUTPUT=$W/reports PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$GPUSHIM_OUTPUT"
CUDART=${CUDART:-$(dirname "$(dirname "$(command -v nvcc)")")/lib64/libcudart.so}
# ONLY=pool: the pool-hit and Python-frames loops only.
WORKLOADS=${WORKLOADS:-pool python alloc train}
[ "${ONLY:-}" = pool ] && WORKLOADS="pool python"
TRAIN_CFGS=${TRAIN_CFGS:-none shim history nocache_none nocache_shim}
if [[ " $WORKLOADS " == *" alloc "* ]]; then
  nvcc -O2 -o "$W/bench_alloc" "$ROOT/scripts/gpu/bench_alloc.cu" || exit 1
fi
if [[ " $WORKLOADS " == *" pool "* ]]; then
  nvcc -O2 -o "$W/bench_pool" "$ROOT/scripts/gpu/bench_pool.cu" || exit 1
fi
SHIM=(env LD_PRELOAD="$REL/libgpushim.so")
NONE=(env)
SAN=(compute-sanitizer --leak-check full --print-limit 1)
N=20000
STEPS=200

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
declare -A res
for rep in $(seq "$REPS"); do
  [[ " $WORKLOADS " == *" pool "* ]] && for cfg in none shim nobt; do
    case $cfg in none) pre=("${NONE[@]}");; shim) pre=("${SHIM[@]}");; nobt) pre=("${SHIM[@]}" GPUSHIM_BACKTRACE=0);; esac
    v=$("${pre[@]}" taskset -c 3-15 "$W/bench_pool" 200000 2 40 2>>"$W/pool-$cfg.err" | grep -E '^[0-9.]+$' | tail -n 1)
    res[pool_$cfg]+="$v "
  done
  [[ " $WORKLOADS " == *" python "* ]] && for cfg in none pyoff pyon; do
    case $cfg in none) pre=("${NONE[@]}");; pyoff) pre=("${SHIM[@]}" GPUSHIM_PYTHON=0);; pyon) pre=("${SHIM[@]}");; esac
    v=$("${pre[@]}" taskset -c 2 python3 "$ROOT/scripts/bench/python_frames.py" "$CUDART" 100000 50 recursive async 2>>"$W/py-$cfg.err" | tail -n 1 | cut -d' ' -f1)
    res[py_$cfg]+="$v "
  done
  [[ " $WORKLOADS " == *" alloc "* ]] && for cfg in none shim sanitizer; do
    case $cfg in none) pre=("${NONE[@]}");; shim) pre=("${SHIM[@]}");; sanitizer) pre=("${SAN[@]}");; esac
    v=$("${pre[@]}" "$W/bench_alloc" $N 2>>"$W/alloc-$cfg.err" | grep -E '^[0-9.]+$' | tail -n 1)
    res[alloc_$cfg]+="$v "
  done
  [[ " $WORKLOADS " == *" train "* ]] && for cfg in $TRAIN_CFGS; do
    case $cfg in
      none) cmd=("${NONE[@]}" python3 "$ROOT/scripts/gpu/bench_train.py" $STEPS);;
      shim) cmd=("${SHIM[@]}" python3 "$ROOT/scripts/gpu/bench_train.py" $STEPS);;
      history) cmd=("${NONE[@]}" python3 "$ROOT/scripts/gpu/bench_train.py" $STEPS --history);;
      nocache_none) cmd=("${NONE[@]}" PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 "$ROOT/scripts/gpu/bench_train.py" $STEPS);;
      nocache_shim) cmd=("${SHIM[@]}" PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 "$ROOT/scripts/gpu/bench_train.py" $STEPS);;
    esac
    v=$("${cmd[@]}" 2>>"$W/train-$cfg.err" | tail -n 1)
    res[train_$cfg]+="$v "
  done
done
m() { echo ${res[$1]:-} | tr ' ' '\n' | grep -v '^$' | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }'; }
# The median of the per-repetition ratios of configuration $1 to $2: each repetition runs its
# configurations one after another, so a ratio within one repetition is less exposed to the
# host's slow swings than the ratio of the medians (on the H200 host, bare runs of the pool-hit
# loop spread from 759 to 1,446 ns within one invocation).
pratio() {
  paste <(echo ${res[$1]:-} | tr ' ' '\n' | grep -v '^$') <(echo ${res[$2]:-} | tr ' ' '\n' | grep -v '^$') |
    awk '$2 > 0 { printf "%.4f\n", $1 / $2 }' | median | awk '{ printf "%.3f", $1 }'
}
{
  echo "date: $(date -u +%FT%TZ); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); torch $(python3 -c 'import torch; print(torch.__version__)'); reps: $REPS (median)"
  echo
  echo "| workload | configuration | value | ratio to no tool | goal |"
  echo "|---|---|---|---|---|"
  row() { [ -n "${res[$2]:-}" ] && echo "$1"; true; }
  p0=$(m pool_none); p1=$(m pool_shim); p2=$(m pool_nobt)
  row "| 200,000 x cudaMallocAsync+cudaFreeAsync 4 KiB, pool hits, 40 frames (ns per pair) | no tool | $p0 | 1.000 | |" pool_none
  row "| | gpushim, backtraces on | $p1 | $(ratio "$p1" "$p0") (per run: $(pratio pool_shim pool_none)) | <= 1.10 |" pool_shim
  row "| | gpushim, GPUSHIM_BACKTRACE=0 | $p2 | $(ratio "$p2" "$p0") (per run: $(pratio pool_nobt pool_none)) | <= 1.03 |" pool_nobt
  y0=$(m py_none); y1=$(m py_pyoff); y2=$(m py_pyon)
  row "| 100,000 x cudaMallocAsync+cudaFreeAsync 4 KiB via ctypes (pool hits), 50 Python frames (median ns per pair) | no tool | $y0 | 1.000 | |" py_none
  row "| | gpushim, GPUSHIM_PYTHON=0 | $y1 | $(ratio "$y1" "$y0") | |" py_pyoff
  row "| | gpushim, Python frames | $y2 | $(ratio "$y2" "$y0") | Python frames add $(awk -v a="$y2" -v b="$y1" 'BEGIN {print a - b}') ns (<= 200) |" py_pyon
  a0=$(m alloc_none); a1=$(m alloc_shim); a2=$(m alloc_sanitizer)
  row "| $N x cudaMalloc+cudaFree 2 MiB (s) | no tool | $a0 | 1.000 | |" alloc_none
  row "| | gpushim | $a1 | $(ratio "$a1" "$a0") | <= 1.10 |" alloc_shim
  row "| | compute-sanitizer --leak-check full | $a2 | $(ratio "$a2" "$a0") | |" alloc_sanitizer
  t0=$(m train_none); t1=$(m train_shim); t2=$(m train_history); n0=$(m train_nocache_none); n1=$(m train_nocache_shim)
  row "| transformer training, caching allocator (steps/s) | no tool | $t0 | 1.000 | |" train_none
  row "| | gpushim | $t1 | $(ratio "$t1" "$t0") | >= 0.99 |" train_shim
  row "| | _record_memory_history(stacks=\"all\") | $t2 | $(ratio "$t2" "$t0") | |" train_history
  row "| transformer training, PYTORCH_NO_CUDA_MEMORY_CACHING=1 (steps/s) | no tool | $n0 | 1.000 | |" train_nocache_none
  row "| | gpushim | $n1 | $(ratio "$n1" "$n0") | >= 0.95 |" train_nocache_shim
  echo
  echo "raw: $(for k in "${!res[@]}"; do echo -n "$k=[${res[$k]}] "; done)"
} | tee "$OUT/bench-gpu.txt"
tail -n 3 "$W"/*.err > "$OUT/bench-gpu-stderr.txt" 2>/dev/null
