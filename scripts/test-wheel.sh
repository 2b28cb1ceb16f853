#!/usr/bin/env bash
# The wheel as a user gets it (run by scripts/test.sh, after the cargo build that makes the CUDA
# stand-ins): builds the manylinux_2_28 wheel (scripts/build-wheel.sh), installs it into a fresh
# virtual environment, and there, with no cargo on PATH and nothing of the checkout but the
# stand-ins, runs the bundled leaky example (examples/leak.c) under it:
# - `gpushim run -- leak_example 200` must name render (examples/leak.c) as suspect #1, and
#   `gpushim run -- python leak.py 200` render (examples/leak.py), held by its global 'history';
# - `LD_PRELOAD=$(gpushim preload-path) leak_example` (no `gpushim run`, no GPUSHIM_COLLECTOR:
#   the library finds the collector in the environment's bin/) must write a report;
# - `gpushim demo`, with no stand-ins on any search path, must run both examples with the
#   wheel's own stand-ins (gpushim/_demo/) and find both leaks, which nothing else loads;
# - `python -m gpushim` must be the same executable (version, exit status);
# - the versions of the executable and of the Python package must be the workspace's.
# Prints "test-wheel.sh: N passed, 0 failed" at the end; stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "test-wheel.sh: FAILED: $*" >&2
  exit 1
}

start=$SECONDS
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
version=$(cargo metadata --format-version 1 --no-deps |
  grep -o '"name":"gpushim-collector","version":"[^"]*"' | sed 's/.*"version":"\([^"]*\)"/\1/')
[ -n "$target" ] && [ -n "$version" ] || die "cargo metadata named no target directory or version"
# The stand-ins the last cargo build made (build.rs links PROFILE/standins to them), debug's first.
standins=
for d in "$target/debug/standins" "$target/release/standins"; do
  [ -x "$d/leak_example" ] && { standins=$(cd "$d" && pwd -P); break; }
done
[ -x "$standins/leak_example" ] || die "no stand-ins built: run 'cargo build' first"

work=$target/wheel-check
rm -rf "$work"
mkdir -p "$work/out" "$work/preload"
wheel=$(bash scripts/build-wheel.sh "$work/dist")
echo "test-wheel.sh: built $(basename "$wheel") ($(stat -c %s "$wheel") bytes) in $((SECONDS - start)) s" >&2

python=$(command -v "${PYTHON:-python3}")
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps "$wheel"

# The user's environment: the venv's bin and the system's, no cargo, no rustc; only what a
# shell has (HOME, a locale) and the stand-in CUDA libraries.
user_env=(env -i HOME="$work" LANG=C.UTF-8 PATH="$work/venv/bin:/usr/local/bin:/usr/bin:/bin"
  LD_LIBRARY_PATH="$standins")
passed=0
ok() {
  passed=$((passed + 1))
  echo "test-wheel.sh: ok: $*" >&2
}

# shellcheck disable=SC2016
"${user_env[@]}" sh -c '! command -v cargo && ! command -v rustc' >/dev/null || die "cargo is on the user's PATH"
[ "$("${user_env[@]}" sh -c 'command -v gpushim')" = "$work/venv/bin/gpushim" ] || die "gpushim is not the venv's"
ok "installed with no Rust toolchain on PATH"

# gpushim run on the bundled example.
cp "$standins/leak_example" "$work/leak_example" # nothing of the checkout is run but the stand-ins
rc=0
(cd "$work/out" && "${user_env[@]}" gpushim run -- "$work/leak_example" 200) 2>"$work/run.err" || rc=$?
cat "$work/run.err" >&2
[ "$rc" -eq 0 ] || die "gpushim run exited $rc"
grep -E '^gpushim: suspect #1 site [0-9]+: .* at render \(examples/leak\.c:[0-9]+\)$' "$work/run.err" >/dev/null ||
  die "no suspect #1 at render (examples/leak.c) in gpushim run's summary"
report=$(ls "$work"/out/gpushim-*.json)
"${user_env[@]}" gpushim report "$report" | grep -q 'render' || die "gpushim report $report names no render"
ok "gpushim run -- leak_example 200: suspect #1 at render (examples/leak.c)"

# gpushim run on the bundled Python example (examples/leak.py: buffers kept in a global list).
mkdir -p "$work/py-out"
cp examples/leak.py "$work/leak.py"
rc=0
(cd "$work/py-out" && "${user_env[@]}" gpushim run -- python "$work/leak.py" 200) 2>"$work/py.err" || rc=$?
cat "$work/py.err" >&2
[ "$rc" -eq 0 ] || die "gpushim run -- python leak.py exited $rc"
grep -E '^gpushim: suspect #1 site [0-9]+: .* at render \(.*leak\.py:[0-9]+\)' "$work/py.err" >/dev/null ||
  die "no suspect #1 at render (leak.py) in gpushim run's summary"
grep -q "leak.py global 'history'" "$work"/py-out/gpushim-*.holders.json || die "the heap walk names no 'history'"
ok "gpushim run -- python leak.py 200: suspect #1 at render (leak.py), held by global 'history'"

# gpushim demo: the wheel's stand-ins, found by the executable in its package; no
# LD_LIBRARY_PATH (the user's environment without the checkout's stand-ins).
demo_env=(env -i HOME="$work" LANG=C.UTF-8 PATH="$work/venv/bin:/usr/local/bin:/usr/bin:/bin")
package=$("${demo_env[@]}" python -c 'import gpushim, os; print(os.path.dirname(gpushim.__file__))')
# shellcheck disable=SC2016
demo_files=$("$python" -c 'import sys, zipfile
print(" ".join(sorted(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.startswith("gpushim/_demo/"))))' "$wheel")
[ "$demo_files" = "gpushim/_demo/leak.py gpushim/_demo/leak_example gpushim/_demo/libcuda.so.1 gpushim/_demo/libcudart.so.13" ] ||
  die "the wheel's gpushim/_demo/ holds '$demo_files', not the demo's 4 files"
c_line=$(grep -n 'cudaMalloc((void \*\*)&s' examples/leak.c | cut -d: -f1)
py_line=$(grep -n 'check(rt.cudaMalloc(ctypes.byref(p), MIB)' examples/leak.py | cut -d: -f1)
rc=0
(cd "$work" && "${demo_env[@]}" gpushim demo -o "$work/demo") >"$work/demo.out" 2>"$work/demo.err" || rc=$?
cat "$work/demo.err" >&2
[ "$rc" -eq 0 ] || die "gpushim demo exited $rc"
grep -qxF "gpushim demo: the stand-in CUDA libraries of $package/_demo; reports go to $work/demo" "$work/demo.err" ||
  die "gpushim demo did not use the wheel's $package/_demo"
grep -qE "^gpushim: suspect #1 site [0-9]+: .* at render \(examples/leak\.c:$c_line\)\$" "$work/demo.err" ||
  die "gpushim demo: no suspect #1 at render (examples/leak.c:$c_line)"
grep -qE '^gpushim: pid [0-9]+: definitely lost: [0-9.]+ MiB in (19[0-9]|20[01]) allocations' "$work/demo.err" ||
  die "gpushim demo: no 'definitely lost' line of the C example's 200 to 201 allocations"
grep -qE "^gpushim demo: examples/leak\.c: found the leak: suspect #1 is render \(examples/leak\.c:$c_line\), 200 allocations live, (19[0-9]|200) definitely lost\$" "$work/demo.err" ||
  die "gpushim demo: no verdict that found the C example's leak"
grep -qE "^gpushim demo: examples/leak\.py: found the leak: suspect #1 is render \(examples/leak\.py:$py_line\), 200 allocations live" "$work/demo.err" ||
  die "gpushim demo: no verdict that found the Python example's leak"
grep -q "render (examples/leak.c:$c_line)" "$work/demo.out" || die "gpushim demo printed no report naming render"
grep -q "examples/leak.py global 'history'" "$work/demo.out" || die "gpushim demo's Python report names no holder 'history'"
ok "gpushim demo: the wheel's stand-ins; render (examples/leak.c:$c_line) and render (examples/leak.py:$py_line) found"

# Nothing but the demo loads them: a program under gpushim run that asks for the CUDA libraries
# by name gets none of the wheel's.
# shellcheck disable=SC2016
(cd "$work" && "${demo_env[@]}" gpushim run -- python -c '
import ctypes
for name in ("libcudart.so.13", "libcuda.so.1"):
    try:
        ctypes.CDLL(name)
    except OSError:
        pass
print(open("/proc/self/maps").read())') >"$work/maps.out" 2>"$work/maps.err" ||
  die "gpushim run -- python (loading the CUDA libraries by name) failed: $(cat "$work/maps.err")"
grep -q libgpushim.so "$work/maps.out" || die "the shim was not loaded in the program that looked for CUDA"
! grep -q /_demo/ "$work/maps.out" || die "a program under gpushim run loaded the demo's stand-ins: $(grep /_demo/ "$work/maps.out")"
ok "gpushim run: a program that loads libcudart.so.13 and libcuda.so.1 by name gets none of _demo/"

# LD_PRELOAD by hand: the library, in site-packages/gpushim/, starts bin/gpushim.
lib=$("${user_env[@]}" gpushim preload-path)
case $lib in
"$work"/venv/lib*/python3*/site-packages/gpushim/libgpushim.so) ;;
*) die "gpushim preload-path printed '$lib', not the venv's package" ;;
esac
(cd "$work/preload" && "${user_env[@]}" LD_PRELOAD="$lib" "$work/leak_example" 20) 2>"$work/preload.err" ||
  die "leak_example under LD_PRELOAD=\$(gpushim preload-path) failed: $(cat "$work/preload.err")"
# The program may exit before its collector has written the report (the collector confirms
# that it read the whole stream, then writes): wait for the file, at most 30 s.
for _ in $(seq 300); do
  ls "$work"/preload/gpushim-*.json >/dev/null 2>&1 && break
  sleep 0.1
done
ls "$work"/preload/gpushim-*.json >/dev/null 2>&1 ||
  die "LD_PRELOAD=\$(gpushim preload-path): no report ($(cat "$work/preload.err"))"
ok "LD_PRELOAD=\$(gpushim preload-path): the library started the venv's collector and wrote a report"

# python -m gpushim is the same executable: same version line, exit status passed on.
[ "$("${user_env[@]}" gpushim --version)" = "gpushim $version" ] || die "gpushim --version is not 'gpushim $version'"
[ "$("${user_env[@]}" python -m gpushim --version)" = "gpushim $version" ] || die "python -m gpushim --version"
rc=0
"${user_env[@]}" python -m gpushim run -- sh -c 'exit 7' 2>/dev/null || rc=$?
[ "$rc" -eq 7 ] || die "python -m gpushim run -- sh -c 'exit 7' exited $rc"
ok "python -m gpushim: the same executable, exit status passed on"

# The Python package: its version is the workspace's, its paths are the installed files.
# shellcheck disable=SC2016
got=$("${user_env[@]}" python -c '
import gpushim, gpushim._paths as p
print(gpushim.__version__, p.collector_path(), p.preload_path())')
[ "$got" = "$version $work/venv/bin/gpushim $lib" ] || die "gpushim.__version__ and _paths gave '$got'"
ok "gpushim.__version__ is $version; _paths finds the installed executable and library"

echo "test-wheel.sh: done in $((SECONDS - start)) s" >&2
echo "test-wheel.sh: $passed passed, 0 failed" >&2
