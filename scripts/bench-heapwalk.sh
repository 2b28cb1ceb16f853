#!/usr/bin/env bash
# The heap walk's speed (issue 12, docs/performance.md "Heap walk"): a CPython process holding
# N Python objects and T objects that own GPU memory takes one snapshot under the shim; prints
# the walk's own time (its companion file's walk.elapsed_s), with the cap raised so that it is
# not cut. MODE standin: T __cuda_array_interface__ objects over a stand-in allocation (no GPU);
# MODE torch: T CUDA tensors (needs a GPU and torch).
# RUNS (default 3) is how many processes are measured. HEAP=containers makes the N objects all lists (default: half lists, half strings).
# Usage: scripts/bench-heapwalk.sh [MODE=standin] [N=1000000] [T=10000] [PYTHON=python3]
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-standin}
N=${2:-1000000}
T=${3:-10000}
PY=$("${4:-python3}" -c 'import sys; print(sys.executable)')
if command -v cargo > /dev/null; then cargo build --release --workspace -q; fi
S=$(find target/release/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' 2>/dev/null | head -n 1 || true)
W=$(mktemp -d /tmp/gpushim-bench-walk.XXXXXX)
trap 'rm -rf "$W"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $("$PY" -V); $(date -u +%F)"
for run in $(seq "${RUNS:-3}"); do
  printf "%s, %d objects (%s), %d GPU objects, run %d: " "$MODE" "$N" "${HEAP:-lists+strings}" "$T" "$run"
  GPUSHIM_OUTPUT="$W" GPUSHIM_COLLECTOR="$PWD/target/release/gpushim" GPUSHIM_HEAP_WALK_MS=60000 \
    LD_PRELOAD="$PWD/target/release/libgpushim.so" \
    "$PY" scripts/bench/heapwalk.py "$MODE" "$N" "$T" "$S/libcudart.so.13" 2> "$W/err.$run" || { cat "$W/err.$run"; exit 1; }
done
