#!/usr/bin/env bash
# What forked children cost under the shim (issue 30): N short-lived children of a traced
# program, one after another, each allocating once (each gets a collector of its own and a
# report) or making no CUDA call (no collector). docs/performance.md ("Forked children") records
# the results.
#
#   scripts/bench-forks.sh [N]        (default 200)
#
# Rows: without the shim; under the shim (release build); the same with the exit's reachability
# scan off (GPUSHIM_REACHABILITY=0); children that make no CUDA call. Each row gives the wall
# time of the N children and the collectors started (counted by a wrapper of the collector).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
cargo build --release -q -p gpushim-shim -p gpushim-collector --bin gpushim >&2
S=$(find target/release/build target/debug/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' \
    2>/dev/null | head -n 1)
if [ -z "$S" ]; then
    cargo build --release -q -p gpushim-tests --tests >&2
    S=$(find target/release/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' | head -n 1)
fi
W=$(mktemp -d /tmp/gpushim-bench-forks.XXXXXX)
trap 'rm -rf "$W"' EXIT
cc -O2 -g -o "$W/forks" scripts/bench/forks.c -L"$S" -l:libcudart.so.13 -Wl,-rpath,"$S"
# The collector, counted: each start appends a line.
cat > "$W/collector" <<SH
#!/bin/sh
echo x >> "$W/started"
exec "$PWD/target/release/gpushim" "\$@"
SH
chmod +x "$W/collector"

row() {
    local label=$1 kind=$2; shift 2
    rm -rf "$W/out" "$W/started"; mkdir -p "$W/out"; : > "$W/started"
    local line
    line=$(env "$@" GPUSHIM_OUTPUT="$W/out" "$W/forks" "$n" "$kind" 2>/dev/null)
    # The collectors outlive their children by the time their reports take: counted once done.
    local i
    for i in $(seq 600); do pgrep -f "collect --output $W/out" > /dev/null || break; sleep 0.1; done
    printf '%-34s %s; collectors started: %s, reports: %s\n' "$label" "$line" "$(wc -l < "$W/started")" \
        "$(find "$W/out" -maxdepth 1 -name 'gpushim-*.json' ! -name '*.holders.json' ! -name '*.reach.json' | wc -l)"
}
shim=(LD_PRELOAD="$PWD/target/release/libgpushim.so" GPUSHIM_COLLECTOR="$W/collector")
row "no shim" alloc
row "shim" alloc "${shim[@]}"
row "shim, GPUSHIM_REACHABILITY=0" alloc "${shim[@]}" GPUSHIM_REACHABILITY=0
row "shim, children make no CUDA call" none "${shim[@]}"
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%d)"
