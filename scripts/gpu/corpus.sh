#!/usr/bin/env bash
# The labelled leak corpus on a GPU machine (issue 29; scripts/gpu/corpus/README.md): builds its
# CUDA C++ programs with nvcc, runs its 80 programs (then the 10 of scripts/gpu/fresh/, into
# OUT/fresh) under target/release/gpushim, 8 at once, scores
# each report against the labels and writes table.txt, accuracy.md (the table for
# docs/accuracy.md), results.json and corpus-logs.tar.gz (each program's logs and reports) to $OUT
# (default target/corpus-out). The whole corpus takes a few minutes on one H200; the run stops
# at a deadline of 520 s all the same (programs not started by then, or stopped then, are scored
# wrong with the reason), so that its results are written within a device machine's 10 minutes
# per command (another --deadline S replaces it).
#
# Needs: cargo build --release (target/release/gpushim and libgpushim.so; CARGO_TARGET_DIR is
# honoured), nvcc, and python3 with torch, cupy, jax, numba and cuda-bindings.
# Usage: scripts/gpu/corpus.sh [score.py options]
#   e.g. --only 'torch_*' gpt_logits   --jobs 12   --timeout 300   --sanitizer   --expect-min recall=0.95
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
# NVLink multicast stays off on shared hosts (the device machine's README).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The results' directory, as score.py takes it (--out, else $OUT, else target/corpus-out).
out=${OUT:-$ROOT/target/corpus-out}
args=("$@")
fresh=1
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[i]}" = --out ] && out=${args[i + 1]:-$out}
  # --only names the corpus's programs: the fresh ten are left out then.
  [ "${args[i]}" = --only ] && fresh=0
done
python3 "$ROOT/scripts/gpu/corpus/score.py" --manifest "$ROOT/scripts/gpu/corpus/corpus.json" \
  --gpushim "$TARGET/release/gpushim" --deadline 520 "$@" || rc=$?
# The ten programs a reviewer wrote afterwards from public reports (scripts/gpu/fresh/), scored
# the same way into OUT/fresh (about 20 s).
if [ "$fresh" = 1 ]; then
  python3 "$ROOT/scripts/gpu/corpus/score.py" --manifest "$ROOT/scripts/gpu/fresh/fresh.json" \
    --gpushim "$TARGET/release/gpushim" --deadline 120 "$@" --out "$out/fresh" || rc=${rc:-$?}
fi
exit "${rc:-0}"
