#!/usr/bin/env bash
# Compares the outputs of this tree's build with a baseline's (default: the commit before the
# second house pass, e032b66) over well over a thousand invocations: replays of recorded event
# streams under several collector settings, every report format, the job view, diffs, `gpushim
# run` of the stand-in examples and test programs, and `gpushim snapshot` (scripts/
# compare_outputs.py says which are compared byte for byte and which after normalising what
# differs from run to run). Exits 1 when any output differs.
#
#   scripts/compare-outputs.sh [BASE_REV]
#
# The baseline is built once from `git archive BASE_REV` under the cargo target directory
# (compare/base-src, with its own compare/base-target); BASE_SRC and BASE_TARGET name an
# existing baseline source tree and its built target directory instead. No GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."

rev=${1:-e032b66}
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target/compare"
target=$(cd "$target" && pwd)
base_src=${BASE_SRC:-$target/compare/base-src}
base_target=${BASE_TARGET:-$target/compare/base-target}

if [ -z "${BASE_SRC:-}" ]; then
  want=$(git rev-parse "$rev^{commit}")
  if [ "$(cat "$base_src/.rev" 2>/dev/null)" != "$want" ]; then
    rm -rf "$base_src"
    mkdir -p "$base_src"
    git archive "$want" | tar -x -C "$base_src"
    echo "$want" >"$base_src/.rev"
  fi
fi
echo "+ building the baseline ($rev) in $base_target" >&2
(cd "$base_src" && CARGO_TARGET_DIR=$base_target cargo build --workspace --quiet)
echo "+ building this tree" >&2
cargo build --workspace --quiet
exec python3 scripts/compare_outputs.py --base-target "$base_target" --base-src "$base_src" --new-target "$target" \
  --work "$target/compare/work"
