#!/usr/bin/env bash
# Measures how long a traced program's exit takes, whatever the run's length (issue 14: "the
# program's exit is released within 50 ms"). docs/performance.md ("What the program's exit
# waits for") records the results.
#
#   scripts/bench-exit.sh [RUNS] [N...]        (default 5 runs of 1000000 and 10000000 pairs)
#
# scripts/bench/exit.c makes N cudaMalloc + cudaFree pairs against the CUDA stand-ins, then
# prints CLOCK_MONOTONIC as its last act; scripts/bench/exit_time.py takes the same clock when
# waitpid returns, and reports the median of RUNS runs of the difference: without the shim,
# under the shim (collector spawned by it, release build), and under the shim with
# GPUSHIM_REACHABILITY=1 (the reachability scan at exit runs inside the program, before the
# stream ends: the exit waits for it by design). It also says when the report appeared.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000000 10000000)

cargo build --release -q -p gpushim-shim -p gpushim-collector --bin gpushim >&2
S=$(find target/release/build target/debug/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' \
    2>/dev/null | head -n 1)
if [ -z "$S" ]; then
    cargo build --release -q -p gpushim-tests --tests >&2
    S=$(find target/release/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' | head -n 1)
fi
W=$(mktemp -d /tmp/gpushim-bench-exit.XXXXXX)
trap 'rm -rf "$W"' EXIT
cc -O2 -g -o "$W/exit" scripts/bench/exit.c -L"$S" -l:libcudart.so.13 -Wl,-rpath,"$S"

shim=(LD_PRELOAD="$PWD/target/release/libgpushim.so" GPUSHIM_COLLECTOR="$PWD/target/release/gpushim")
for n in "${sizes[@]}"; do
    python3 scripts/bench/exit_time.py "no shim" "$runs" "$W/exit" "$n"
    python3 scripts/bench/exit_time.py "shim" "$runs" "$W/exit" "$n" "${shim[@]}"
    python3 scripts/bench/exit_time.py "shim, GPUSHIM_REACHABILITY=1" "$runs" "$W/exit" "$n" "${shim[@]}" \
        GPUSHIM_REACHABILITY=1
done
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%d)"
