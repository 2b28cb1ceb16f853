#!/usr/bin/env bash
# Builds gpushim and runs `gpushim demo`: the bundled examples (examples/leak.c, and
# examples/leak.py when a python3 is on PATH) against the CUDA stand-ins, so it works on a
# machine without a GPU; each example's report for a person is printed.
# The build goes where cargo puts it: CARGO_TARGET_DIR or the build.target-dir setting are
# honoured (cargo itself is asked where the target directory is). GPUSHIM_OUTPUT, if set, is
# the directory for the reports (default: a new gpushim-demo-* directory in $TMPDIR or /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
if [ -z "$target" ]; then
    echo "demo.sh: cargo metadata named no target directory" >&2
    exit 1
fi
exec "$target/release/gpushim" demo ${GPUSHIM_OUTPUT:+--output "$GPUSHIM_OUTPUT"}
