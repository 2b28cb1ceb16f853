#!/usr/bin/env bash
# CPU benchmark of the shim's per-call cost, with the CUDA stand-ins (no GPU needed).
# A process with 100 extra shared objects allocates from a 40-frame stack: N cudaMalloc+cudaFree
# pairs of 4 KiB, each pair timed alone. Four runs side by side: without the shim, with it
# (backtraces on, cached unwinder), with GPUSHIM_BACKTRACE=0, and with libgcc's unwinder
# (GPUSHIM_UNWIND=libgcc), which the cached one replaced. Prints median/p99/mean ns per pair and the added
# cost against the run without the shim.
# Then issue 18's pool-hit loop: N pairs of cudaMallocAsync+cudaFreeAsync (4 KiB, an explicit
# stream) from the same 40-frame stack, bare / shim with backtraces / shim without, run R times
# interleaved (bare, on, off, bare, on, off, ...): median of the R medians and the added cost.
# And the Python-frames case (scripts/bench/python_frames.py, 50 Python frames, cudaMalloc+cudaFree
# through ctypes): bare / shim GPUSHIM_PYTHON=0 / shim with Python frames, R times interleaved;
# the cost of Python frames is the third minus the second.
# Usage: scripts/bench-cpu.sh [N=200000] [R=7]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
R=${2:-7}
. scripts/bench/pairs-setup.sh
MODE=sync
run() { # label, env...
  local label=$1; shift
  env "$@" GPUSHIM_OUTPUT="$W" GPUSHIM_COLLECTOR="$PWD/target/release/gpushim" \
    "$W/pairs" "$N" 40 100 "$W" "$MODE" 2> "$W/$label.err" | tail -n 1
}
SHIM=LD_PRELOAD="$PWD/target/release/libgpushim.so"
med() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
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

MODE=async
pb=(); pn=(); pf=()
for r in $(seq 1 "$R"); do
  x=$(run pool_none); pb+=("${x%% *}")
  x=$(run pool_on "$SHIM"); pn+=("${x%% *}")
  x=$(run pool_off "$SHIM" GPUSHIM_BACKTRACE=0); pf+=("${x%% *}")
done
B=$(med "${pb[@]}"); ON=$(med "${pn[@]}"); OFF=$(med "${pf[@]}")
echo
echo "pool-hit loop: $N x (cudaMallocAsync 4 KiB + cudaFreeAsync, explicit stream), 40-frame stack; median of $R interleaved runs' medians, ns per pair"
printf '%-26s %10s %10s   %s\n' run median_ns added runs
printf '%-26s %10s %10s   %s\n' "without shim" "$B" "" "${pb[*]}"
printf '%-26s %10s %10s   %s\n' "shim, backtraces on" "$ON" "$(( ON - B ))" "${pn[*]}"
printf '%-26s %10s %10s   %s\n' "shim, backtraces off" "$OFF" "$(( OFF - B ))" "${pf[*]}"

PYN=$(( N / 2 ))
pyrun() { # label, env...
  local label=$1; shift
  env "$@" GPUSHIM_OUTPUT="$W" GPUSHIM_COLLECTOR="$PWD/target/release/gpushim" \
    python3 scripts/bench/python_frames.py "$S/libcudart.so.13" "$PYN" 50 "${KIND:-recursive}" 2> "$W/$label.err" | tail -n 1
}
qb=(); qf=(); qn=(); df=(); dn=()
for r in $(seq 1 "$R"); do
  x=$(pyrun py_none); qb+=("${x%% *}")
  x=$(pyrun py_off "$SHIM" GPUSHIM_PYTHON=0); qf+=("${x%% *}")
  x=$(pyrun py_on "$SHIM"); qn+=("${x%% *}")
  # The same depth with 47 distinct functions (one code object per frame) instead of recursion.
  x=$(KIND=distinct pyrun pyd_off "$SHIM" GPUSHIM_PYTHON=0); df+=("${x%% *}")
  x=$(KIND=distinct pyrun pyd_on "$SHIM"); dn+=("${x%% *}")
done
QB=$(med "${qb[@]}"); QF=$(med "${qf[@]}"); QN=$(med "${qn[@]}"); DF=$(med "${df[@]}"); DN=$(med "${dn[@]}")
echo
echo "Python frames: $PYN x (cudaMalloc 4 KiB + cudaFree) through ctypes from 50 Python frames, $(python3 -c 'import sys; print(sys.version.split()[0])'); median of $R interleaved runs' medians, ns per pair"
printf '%-34s %10s   %s\n' run median_ns runs
printf '%-34s %10s   %s\n' "without shim" "$QB" "${qb[*]}"
printf '%-34s %10s   %s\n' "shim, GPUSHIM_PYTHON=0" "$QF" "${qf[*]}"
printf '%-34s %10s   %s\n' "shim, Python frames" "$QN" "${qn[*]}"
printf '%-34s %10s   %s\n' "distinct functions, PYTHON=0" "$DF" "${df[*]}"
printf '%-34s %10s   %s\n' "distinct functions, Python frames" "$DN" "${dn[*]}"
echo "Python frames add $(( QN - QF )) ns per allocation at 50 frames ($(( DN - DF )) ns with a code object per frame)"
