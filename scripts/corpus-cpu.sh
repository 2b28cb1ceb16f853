#!/usr/bin/env bash
# The stand-in corpus (scripts/gpu/corpus/standin/; issue 29): the leak mechanisms the CPU
# stand-ins for the CUDA libraries can express, labelled and scored like the GPU corpus, with no
# GPU. Builds its C programs against the stand-ins, runs its 28 programs under gpushim and writes
# table.txt, accuracy.md, results.json and corpus-logs.tar.gz to $OUT (default
# target/corpus-cpu-out).
#
# Needs: cargo build --release (or PROFILE=debug after cargo build: the gpushim, libgpushim.so and
# stand-ins of that profile; CARGO_TARGET_DIR is honoured), a C compiler (cc), python3.
# Usage: scripts/corpus-cpu.sh [score.py options]   e.g. --only 'py_*'  --expect-min right=0.9
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
PROFILE=${PROFILE:-release}
# The stand-ins of the newest build of this profile (build.rs writes them under its OUT_DIR).
RT=$(ls -t "$TARGET/$PROFILE"/build/gpushim-tests-*/out/standins/libcudart.so.13 2>/dev/null | head -1 || true)
if [ -z "$RT" ]; then
  echo "corpus-cpu: no stand-ins under $TARGET/$PROFILE: run cargo build$([ "$PROFILE" = release ] && echo ' --release')" >&2
  exit 2
fi
exec python3 "$ROOT/scripts/gpu/corpus/score.py" --manifest "$ROOT/scripts/gpu/corpus/standin/corpus.json" \
  --gpushim "$TARGET/$PROFILE/gpushim" --standins "$(dirname "$RT")" --jobs "${JOBS:-2}" \
  --out "${OUT:-$TARGET/corpus-cpu-out}" "$@"
