#!/usr/bin/env bash
# CPU benchmark of Python frame capture, with the CUDA stand-ins (no GPU needed).
# A CPython program makes N cudaMalloc+cudaFree pairs (4 KiB) through ctypes from a Python stack
# DEPTH frames deep, each pair timed alone (scripts/bench/python_frames.py). Runs: without the
# shim; with it and GPUSHIM_PYTHON=0 (native frames only); with it and Python frames on; and the
# same from a 2-frame Python stack. The cost of Python frames per allocation is the difference
# between the Python-frames run and the GPUSHIM_PYTHON=0 run at the same depth.
# KIND: recursive (the outer frames are one function calling itself) or distinct (a function, so
# a code object, per frame); see python_frames.py.
# API: sync (cudaMalloc+cudaFree) or async (cudaMallocAsync+cudaFreeAsync on a stream: pool hits).
# Usage: scripts/bench-python.sh [N=200000] [DEPTH=50] [PYTHON=python3] [KIND=recursive] [API=sync]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
DEPTH=${2:-50}
PY=$("${3:-python3}" -c 'import sys; print(sys.executable)')
KIND=${4:-recursive}
API=${5:-sync}
# Without cargo (a GPU host given the built files), the release build already there is used.
if command -v cargo > /dev/null; then cargo build --release --workspace -q; fi
S=$(find target/release/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' | head -n 1)
W=$(mktemp -d /tmp/gpushim-bench-py.XXXXXX)
trap 'rm -rf "$W"' EXIT
run() { # label, depth, env...
  local label=$1 depth=$2; shift 2
  env "$@" GPUSHIM_OUTPUT="$W" GPUSHIM_COLLECTOR="$PWD/target/release/gpushim" \
    "$PY" scripts/bench/python_frames.py "$S/libcudart.so.13" "$N" "$depth" "$KIND" "$API" 2> "$W/$label.err" | tail -n 1
}
SHIM=LD_PRELOAD="$PWD/target/release/libgpushim.so"
base=$(run none "$DEPTH")
off=$(run pyoff "$DEPTH" "$SHIM" GPUSHIM_PYTHON=0)
on=$(run pyon "$DEPTH" "$SHIM")
off2=$(run pyoff2 2 "$SHIM" GPUSHIM_PYTHON=0)
on2=$(run pyon2 2 "$SHIM")
echo "machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
echo "python: $("$PY" -c 'import sys; print(sys.version.split()[0])') ($KIND); pairs ($API): $N x (cudaMalloc[Async] 4 KiB + cudaFree[Async]) through ctypes, stand-in runtime"
printf '%-40s %10s %10s %10s\n' run median_ns p99_ns mean_ns
printf '%-40s %10s %10s %10s\n' "without shim, $DEPTH Python frames" $base
printf '%-40s %10s %10s %10s\n' "shim, GPUSHIM_PYTHON=0, $DEPTH frames" $off
printf '%-40s %10s %10s %10s\n' "shim, Python frames, $DEPTH frames" $on
printf '%-40s %10s %10s %10s\n' "shim, GPUSHIM_PYTHON=0, 2 frames" $off2
printf '%-40s %10s %10s %10s\n' "shim, Python frames, 2 frames" $on2
set -- $on $off $on2 $off2
echo "Python frames add (median): $(( $1 - $4 )) ns at $DEPTH frames, $(( $7 - ${10} )) ns at 2 frames per allocation"
