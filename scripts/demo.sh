#!/usr/bin/env bash
# Builds gpushim and runs it on the bundled C example (examples/leak.c) against the CUDA
# stand-ins, so it works on a machine without a GPU; then prints the report for a person.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
standins=$(find target/release/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' | head -n 1)
out=${GPUSHIM_OUTPUT:-$(mktemp -d /tmp/gpushim-demo.XXXXXX)}
mkdir -p "$out"
LD_LIBRARY_PATH=$standins target/release/gpushim run --output "$out" -- "$standins/leak_example" 200
report=$(ls "$out"/gpushim-*.json | grep -v snapshot | head -n 1)
echo
target/release/gpushim report "$report"
