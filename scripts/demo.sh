#!/usr/bin/env bash
# Builds gpushim and runs it on the bundled C example (examples/leak.c) against the CUDA
# stand-ins, so it works on a machine without a GPU; then prints the report for a person.
# The build goes where cargo puts it: CARGO_TARGET_DIR or the build.target-dir setting are
# honoured (cargo itself is asked where the target directory is).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
if [ -z "$target" ]; then
    echo "demo.sh: cargo metadata named no target directory" >&2
    exit 1
fi
bin=$target/release
standins=$(find "$bin/build" -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' | head -n 1)
out=${GPUSHIM_OUTPUT:-$(mktemp -d /tmp/gpushim-demo.XXXXXX)}
mkdir -p "$out"
LD_LIBRARY_PATH=$standins "$bin/gpushim" run --output "$out" -- "$standins/leak_example" 200
report=$(ls "$out"/gpushim-*.json | grep -v snapshot | head -n 1)
echo
"$bin/gpushim" report "$report"
