#!/usr/bin/env bash
# The Jupyter check on the GPU machine (issue 15): a kernel installed with `gpushim kernel install`
# reports a cell that leaks CUDA tensors when re-run (scripts/gpu/jupyter_check.py says what is
# checked; one PASS/FAIL line each, exit 1 if any failed).
#
# The GPU machine has no network: ipykernel and jupyter_client come as wheels from WHEELHOUSE,
# made on a machine with network (for its Python 3.12, manylinux x86_64):
#   python3 -m pip download --only-binary=:all: --python-version 3.12 --implementation cp \
#     --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux_2_5_x86_64 \
#     -d wheelhouse ipykernel==7.4.0 jupyter_client==8.10.0
# (29 wheels, 16 MB). torch comes from the machine's python3 (the venv sees its site-packages).
#
# Needs: target/release/gpushim and libgpushim.so (cargo build --release --workspace), or GPUSHIM
# set to an installed `gpushim` (the wheel's). Usage: scripts/gpu/jupyter-check.sh WHEELHOUSE
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WHEELHOUSE=${1:?usage: scripts/gpu/jupyter-check.sh WHEELHOUSE}
GPUSHIM=${GPUSHIM:-$ROOT/target/release/gpushim}
[ -x "$GPUSHIM" ] || { echo "jupyter-check: $GPUSHIM is missing: cargo build --release --workspace" >&2; exit 2; }
WORK=$(mktemp -d /tmp/gpushim-jupyter.XXXXXX)
OUT=${OUT:-$WORK}
mkdir -p "$OUT"

python3 -m venv --system-site-packages "$WORK/venv"
# The base Python's module directories that a venv leaves out (its user site, other paths): on
# the GPU machine torch is installed there.
sp=$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -c 'import os, sys; print("\n".join(p for p in sys.path[1:] if os.path.isdir(p)))' >"$sp/_base_python.pth"
"$WORK/venv/bin/python" -m pip install --quiet --no-index --find-links "$WHEELHOUSE" ipykernel jupyter_client
"$GPUSHIM" kernel install --name gpushim-check --prefix "$WORK/prefix" --python "$WORK/venv/bin/python"

# The kernel inherits this environment plus the spec's LD_PRELOAD and GPUSHIM_COLLECTOR; the
# package comes from the checkout unless the wheel is installed in python3's site-packages.
rc=0
env JUPYTER_PATH="$WORK/prefix/share/jupyter" JUPYTER_RUNTIME_DIR="$WORK/runtime" IPYTHONDIR="$WORK/ipython" \
  GPUSHIM_OUTPUT="$OUT" PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" \
  timeout 600 "$WORK/venv/bin/python" "$ROOT/scripts/gpu/jupyter_check.py" gpushim-check || rc=$?
ls "$OUT"
exit "$rc"
