#!/usr/bin/env bash
# The reachability scan's speed (issue 17, docs/performance.md "Reachability scan"): a process
# with GIB GiB of host heap (every block reachable) and ALLOCS stand-in device allocations, half
# of them dropped (so the scan makes both passes), exits under the release shim with the cap
# raised; prints the final report's reachability: bytes read, time, rate, classes.
# FILL: random (default), pointers (every word a heap address: the worst case), zero.
# Usage: scripts/bench-reach.sh [GIB=4] [FILL=random] [ALLOCS=1000]   (RUNS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
GIB=${1:-4}
FILL=${2:-random}
ALLOCS=${3:-1000}
if [ -z "${NO_BUILD:-}" ] && command -v cargo > /dev/null; then cargo build --release --workspace -q; fi
S=$(find target/release/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' 2>/dev/null | head -n 1)
W=$(mktemp -d /tmp/gpushim-bench-reach.XXXXXX)
trap 'rm -rf "$W"' EXIT
cc -O2 -o "$W/reach" scripts/bench/reach.c -L"$S" -l:libcudart.so.13 -Wl,-rpath,"$PWD/$S"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
for run in $(seq "${RUNS:-3}"); do
  rm -f "$W"/gpushim-*.json
  # The stand-in driver first: on a GPU machine the real libcuda.so.1 would otherwise be found.
  LD_LIBRARY_PATH="$PWD/$S${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  STANDIN_DEVICE_VA=1 GPUSHIM_OUTPUT="$W" GPUSHIM_COLLECTOR="$PWD/target/release/gpushim" \
    GPUSHIM_REACHABILITY_MS=600000 LD_PRELOAD="$PWD/target/release/libgpushim.so" \
    "$W/reach" "$GIB" "$FILL" "$ALLOCS" > "$W/out" 2> "$W/err" || { cat "$W/err"; exit 1; }
  python3 - "$W" "$run" "$(cat "$W/out")" <<'PY'
import glob, json, os, sys
w, run, what = sys.argv[1:4]
r = json.load(open([p for p in glob.glob(w + "/gpushim-*.json") if os.path.basename(p).count("-") == 1][0]))["reachability"]
print(f"run {run}: {what}: read {r['scanned_bytes'] / 2**30:.2f} GiB in {r['elapsed_ms']:.0f} ms "
      f"({r['bytes_per_s'] / 1e9:.2f} GB/s), {r['cpu_ms']:.0f} ms of CPU ({r['bytes_per_cpu_s'] / 1e9:.2f} GB/s "
      f"per core); {r['status']}, {r['definitely_lost_count']} lost, {r['reachable_count']} reachable")
PY
done
