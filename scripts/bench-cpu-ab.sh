#!/usr/bin/env bash
# Before/after comparison of the shim's per-call cost (the benchmark of scripts/bench-cpu.sh),
# for a refactor or an optimization: two builds, each a directory holding libgpushim.so and
# gpushim, run alternately R times (A, B, A, B, ...) so that the machine's load falls on both
# alike. Prints each run and the median of the R medians for A and B, and B's change in percent.
# MODE=async compares on issue 18's pool-hit loop (cudaMallocAsync+cudaFreeAsync) instead.
# Usage: [MODE=sync|async] scripts/bench-cpu-ab.sh DIR_A DIR_B [R=5] [N=200000]
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); R=${3:-5}; N=${4:-200000}; MODE=${MODE:-sync}
for d in "$A" "$B"; do
  [ -f "$d/libgpushim.so" ] && [ -x "$d/gpushim" ] || { echo "bench-cpu-ab: $d needs libgpushim.so and gpushim" >&2; exit 2; }
done
. scripts/bench/pairs-setup.sh
one() { # dir -> "median p99 mean"
  env LD_PRELOAD="$1/libgpushim.so" GPUSHIM_COLLECTOR="$1/gpushim" GPUSHIM_OUTPUT="$W" \
    "$W/pairs" "$N" 40 100 "$W" "$MODE" 2> "$W/err" | tail -n 1
}
base=$(env GPUSHIM_OUTPUT="$W" "$W/pairs" "$N" 40 100 "$W" "$MODE" | tail -n 1)
echo "machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%FT%TZ)"
echo "pairs ($MODE): $N x (cudaMalloc[Async] 4 KiB + cudaFree[Async]), 40-frame stack, 100 extra shared objects; without shim: $base (median p99 mean ns)"
ma=(); mb=()
for r in $(seq 1 "$R"); do
  a=$(one "$A"); b=$(one "$B")
  echo "run $r: A $a | B $b"
  ma+=("${a%% *}"); mb+=("${b%% *}")
done
med() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
MA=$(med "${ma[@]}"); MB=$(med "${mb[@]}")
echo "median of $R medians, ns per pair: A $MA, B $MB; B vs A: $(awk -v a="$MA" -v b="$MB" 'BEGIN {printf "%+.1f%%", (b-a)*100/a}')"
