#!/usr/bin/env bash
# On a GPU machine: the wheel as a PyTorch user installs it. pip-installs WHEEL (carried over;
# built by scripts/build-wheel.sh) into a fresh virtual environment that sees the system's
# packages (torch), with no index and no dependencies (no network there), then traces a small
# PyTorch script that leaks 40 tensors of 4 MiB with `gpushim run` from that environment.
# Prints one line: "wheel-check: PASS ..." or "wheel-check: FAIL <why>" (exit 0 or 1); the logs
# stay in $OUT (default /tmp/gpushim-wheel-check).
#
#   bash scripts/gpu/wheel-check.sh dist/gpushim-0.1.0-py3-none-manylinux_2_28_x86_64.whl
#
# PASS needs: the install; `gpushim` and `gpushim preload-path` from the venv; exit status 0;
# suspect #1 at the script's leaking line (leak.py:LEAK_LINE); the report's live device bytes
# at least the 160 MiB of tensors still held (the caching allocator rounds segments up).
set -u
wheel=${1:?usage: wheel-check.sh WHEEL}
wheel=$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")
OUT=${OUT:-/tmp/gpushim-wheel-check}
rm -rf "$OUT"
mkdir -p "$OUT/run"
PYTHON=${PYTHON:-python3}

fail() {
  echo "wheel-check: FAIL $*"
  exit 1
}

pip=("$OUT/venv/bin/python" -m pip)
if ! "$PYTHON" -m venv --system-site-packages "$OUT/venv" >"$OUT/venv.log" 2>&1; then
  # No ensurepip there: a venv without pip, filled by the system's pip (22.3 or later).
  rm -rf "$OUT/venv"
  "$PYTHON" -m venv --system-site-packages --without-pip "$OUT/venv" >>"$OUT/venv.log" 2>&1 ||
    fail "venv: $(tail -1 "$OUT/venv.log")"
  pip=("$PYTHON" -m pip --python "$OUT/venv/bin/python")
fi
# The base Python's module directories that a venv leaves out (its user site, other paths): on
# the GPU machine torch is installed there (the run of 2026-12-01 02:05 found no torch without).
sp=$("$OUT/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PYTHON" -c 'import os, sys; print("\n".join(p for p in sys.path[1:] if os.path.isdir(p)))' >"$sp/_base_python.pth"
"${pip[@]}" install --no-index --no-deps --disable-pip-version-check "$wheel" >"$OUT/pip.log" 2>&1 ||
  fail "pip install: $(tail -1 "$OUT/pip.log")"
"$OUT/venv/bin/python" -c 'import torch; assert torch.cuda.is_available()' 2>"$OUT/torch.log" ||
  fail "torch with CUDA not importable from the venv: $(tail -1 "$OUT/torch.log")"
lib=$("$OUT/venv/bin/gpushim" preload-path) || fail "gpushim preload-path"
case $lib in
"$OUT"/venv/lib*/site-packages/gpushim/libgpushim.so) ;;
*) fail "gpushim preload-path printed '$lib', not the venv's package" ;;
esac

cat >"$OUT/run/leak.py" <<'PY'
import torch

held = []
for step in range(40):
    held.append(torch.empty(4 << 20, dtype=torch.uint8, device="cuda"))  # LEAK
    # The step's own work, as in a training loop, with no memory of its own (a kernel that spins
    # about 10 ms): allocations spread over the run are not a warm-up burst.
    torch.cuda._sleep(20_000_000)
    torch.cuda.synchronize()
print("held", sum(t.numel() for t in held))
PY
leak_line=$(grep -n '# LEAK' "$OUT/run/leak.py" | cut -d: -f1)

rc=0
(cd "$OUT/run" && PATH="$OUT/venv/bin:$PATH" gpushim run -- python leak.py) >"$OUT/run.out" 2>"$OUT/run.err" || rc=$?
[ "$rc" -eq 0 ] || fail "gpushim run exited $rc: $(tail -3 "$OUT/run.err" | tr '\n' ' ')"
grep -q '^held 167772160$' "$OUT/run.out" || fail "the script did not run to its end: $(cat "$OUT/run.out")"
suspect=$(grep -m1 '^gpushim: suspect #1 ' "$OUT/run.err")
case $suspect in
*"leak.py:$leak_line)"*) ;;
*) fail "suspect #1 is not leak.py:$leak_line: '${suspect:-none}'" ;;
esac
report=$(ls "$OUT"/run/gpushim-*.json 2>/dev/null | grep -v -e snapshot -e holders | head -n 1)
[ -n "$report" ] || fail "no report in $OUT/run"
live=$("$OUT/venv/bin/python" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["kinds"]["device"]["live_bytes"])' "$report") || fail "cannot read $report"
[ "$live" -ge $((160 << 20)) ] || fail "live device bytes $live < 160 MiB"
echo "wheel-check: PASS $(basename "$wheel"): suspect #1 at leak.py:$leak_line, $((live >> 20)) MiB device live at exit"
