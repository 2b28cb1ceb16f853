#!/usr/bin/env bash
# Builds the gpushim wheel to hand out: the `gpushim` executable and libgpushim.so, linked with
# zig against glibc 2.28 and tagged manylinux_2_28, so that it installs on any Linux x86_64 with
# glibc 2.28 or later (`pip install gpushim-*.whl`). Prints the wheel's path on stdout; says on
# stderr what `auditwheel show` found.
#
#   scripts/build-wheel.sh [DIR]     # the wheel goes to DIR (default: TARGET/wheels)
#
# The build tools (maturin, zig, cargo-zigbuild, auditwheel; pinned) come from a virtual
# environment made here on first use under the cargo target directory; `pip install .` needs none
# of this (it builds for the machine it runs on). Needs cargo, a Python 3.10+ with venv, and the
# network once. The build itself goes to TARGET/x86_64-unknown-linux-gnu/release.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL_TOOLS=(maturin==1.16.0 ziglang==0.17.1 cargo-zigbuild==0.24.1 auditwheel==6.8.2)
PYTHON=${PYTHON:-python3}
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || { echo "build-wheel.sh: cargo metadata named no target directory" >&2; exit 1; }
venv=$target/wheel-tools
out=${1:-$target/wheels}

stamp="$venv/wheel-tools.txt"
if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c '' 2>/dev/null ||
  [ "$(cat "$stamp" 2>/dev/null)" != "${WHEEL_TOOLS[*]}" ]; then
  echo "build-wheel.sh: making $venv (${WHEEL_TOOLS[*]})" >&2
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${WHEEL_TOOLS[@]}"
  echo "${WHEEL_TOOLS[*]}" >"$stamp"
fi

mkdir -p "$out"
rm -f "$out"/gpushim-*.whl
# The tools' venv first on PATH: the backend (python/gpushim_build.py) finds cargo-zigbuild and
# zig there. No build isolation: the pinned tools above are the build's requirements.
PATH="$venv/bin:$PATH" MATURIN_PEP517_ARGS="--zig --compatibility manylinux_2_28" \
  "$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps \
  --wheel-dir "$out" . >&2
wheel=$(ls "$out"/gpushim-*.whl)
show=$("$venv/bin/auditwheel" show "$wheel")
echo "$show" | tr '\n' ' ' | sed 's/  */ /g' >&2
echo >&2
if ! echo "$show" | tr '\n' ' ' | grep -q '"manylinux_2_28_x86_64"'; then
  echo "build-wheel.sh: auditwheel does not find $wheel consistent with manylinux_2_28" >&2
  exit 1
fi
echo "$wheel"
