#!/usr/bin/env bash
# CPU benchmark of allocations on PyTorch's autograd engine threads, with the CUDA stand-ins (no
# GPU needed). A thread named `pt_autograd_0` (scripts/bench/engine.c) makes stream-ordered pairs
# (cudaMallocAsync + cudaFreeAsync, 4 KiB) while the Python thread that started it waits in
# `_engine_run_backward` with the GIL released (scripts/bench/engine_backward.py), ROUNDS
# backward passes of N pairs each. Runs: without the shim; with it; with GPUSHIM_PYTHON=0; with
# GPUSHIM_BACKTRACE=0. The engine thread's Python frames are the waiting thread's
# (shim/src/python/borrow.rs).
# Usage: scripts/bench-engine.sh [N=20000] [ROUNDS=10] [DEPTH=30] [PYTHON=python3]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
ROUNDS=${2:-10}
DEPTH=${3:-30}
PY=$("${4:-python3}" -c 'import sys; print(sys.executable)')
# Without cargo (a GPU host given the built files), the release build already there is used.
if command -v cargo > /dev/null; then cargo build --release --workspace -q; fi
S=$(find target/release/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' | head -n 1)
W=$(mktemp -d /tmp/gpushim-bench-engine.XXXXXX)
trap 'rm -rf "$W"' EXIT
cc -O2 -shared -fPIC -o "$W/libengine.so" scripts/bench/engine.c -ldl -lpthread
run() { # label, env...
  local label=$1
  shift
  env "$@" GPUSHIM_OUTPUT="$W" GPUSHIM_COLLECTOR="$PWD/target/release/gpushim" \
    "$PY" scripts/bench/engine_backward.py "$S/libcudart.so.13" "$W/libengine.so" "$N" "$ROUNDS" "$DEPTH" \
    2> "$W/$label.err" | tail -n 1 || { cat "$W/$label.err" >&2; exit 1; }
}
SHIM=LD_PRELOAD="$PWD/target/release/libgpushim.so"
bare=$(run bare)
on=$(run shim "$SHIM")
pyoff=$(run pyoff "$SHIM" GPUSHIM_PYTHON=0)
btoff=$(run btoff "$SHIM" GPUSHIM_BACKTRACE=0)
echo "machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
echo "python: $("$PY" -c 'import sys; print(sys.version.split()[0])'); $ROUNDS backward passes x $N pairs (cudaMallocAsync + cudaFreeAsync, 4 KiB) on pt_autograd_0, caller $DEPTH frames deep"
printf '%-34s %10s %10s %10s\n' run median_ns p99_ns mean_ns
printf '%-34s %10s %10s %10s\n' "without shim" $bare
printf '%-34s %10s %10s %10s\n' "shim" $on
printf '%-34s %10s %10s %10s\n' "shim, GPUSHIM_PYTHON=0" $pyoff
printf '%-34s %10s %10s %10s\n' "shim, GPUSHIM_BACKTRACE=0" $btoff
set -- $on $bare
echo "the shim adds (median): $(($1 - $4)) ns a pair on the engine thread"
