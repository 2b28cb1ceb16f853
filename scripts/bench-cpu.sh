#!/usr/bin/env bash
# CPU benchmark of the shim's per-call cost, with the CUDA stand-ins (no GPU needed).
# A process with 100 extra shared objects allocates from a 40-frame stack: N cudaMalloc+cudaFree
# pairs of 4 KiB, each pair timed alone. Four runs side by side: without the shim, with it
# (backtraces on, cached unwinder), with GPUSHIM_BACKTRACE=0, and with libgcc's unwinder
# (GPUSHIM_UNWIND=libgcc), which the cached one replaced. Prints median/p99/mean ns per pair and the added
# cost against the run without the shim. Usage: scripts/bench-cpu.sh [N=200000]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
. scripts/bench/pairs-setup.sh
run() { # label, env...
  local label=$1; shift
  env "$@" GPUSHIM_OUTPUT="$W" GPUSHIM_COLLECTOR="$PWD/target/release/gpushim" \
    "$W/pairs" "$N" 40 100 "$W" 2> "$W/$label.err" | tail -n 1
}
base=$(run none)
on=$(run shim LD_PRELOAD="$PWD/target/release/libgpushim.so")
off=$(run shim_nobt LD_PRELOAD="$PWD/target/release/libgpushim.so" GPUSHIM_BACKTRACE=0)
gcc_uw=$(run shim_libgcc LD_PRELOAD="$PWD/target/release/libgpushim.so" GPUSHIM_UNWIND=libgcc)
echo "machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
echo "pairs: $N x (cudaMalloc 4 KiB + cudaFree), 40-frame stack, 100 extra shared objects, stand-in runtime"
printf '%-26s %10s %10s %10s %14s %14s\n' run median_ns p99_ns mean_ns added_median added_p99
for row in "without shim:$base" "shim, backtraces on:$on" "shim, backtraces off:$off" "shim, libgcc unwinder:$gcc_uw"; do
  label=${row%%:*}; set -- ${row#*:}
  set -- "$@" $base
  printf '%-26s %10s %10s %10s %14s %14s\n' "$label" "$1" "$2" "$3" "$(( $1 - $4 ))" "$(( $2 - $5 ))"
done
