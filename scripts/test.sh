#!/usr/bin/env bash
# The test command (README, .ci/run): the Rust workspace's formatting, lints, build and tests, then
# the Python files' formatting and lints (ruff, configured in pyproject.toml) and their tests
# (pytest, tests/py/), then the wheel (scripts/test-wheel.sh). Stops at the first failure; no GPU
# needed.
#
# ruff and pytest come from a virtual environment made here on first use, at pinned versions, under
# the cargo target directory (ignored by git, removed by `cargo clean`). PYTHON picks the Python
# that makes it (3.10 or later; default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned, with pytest's own dependencies; changing this list remakes the environment. Playwright
# drives the system's Chromium (no browser download) for the HTML report's test.
PY_TOOLS=(ruff==0.17.6 pytest==9.2.0 iniconfig==2.3.1 packaging==26.4 pluggy==1.7.0 pygments==2.21.0
  playwright==1.65.2 greenlet==3.5.6)
# A real Jupyter kernel for the tests of the Jupyter magic (tests/pyapi.rs, which finds this
# environment; about 10 s to install), pinned with its dependencies.
PY_TOOLS+=(ipykernel==7.4.0 jupyter_client==8.10.0 ipython==9.18.1 comm==0.2.3 debugpy==1.8.22 jupyter_core==5.9.1
  traitlets==5.16.1 tornado==6.6.1 pyzmq==27.3.0 psutil==7.2.2 nest-asyncio2==1.7.4 matplotlib-inline==0.2.2
  python-dateutil==4.0.0 platformdirs==4.14.9 jedi==0.20.1 parso==0.8.7 prompt_toolkit==3.0.53 wcwidth==0.9.4
  stack-data==0.6.3 asttokens==3.0.2 executing==2.3.0 pure_eval==0.2.4 pexpect==4.9.0 ptyprocess==0.7.0
  ipython_pygments_lexers==1.1.1 typing_extensions==4.16.0 tzdata==2026.6)
PYTHON=${PYTHON:-python3}
VENV=${CARGO_TARGET_DIR:-target}/py-tools

step() {
  echo "+ $*" >&2
  "$@"
}

die() {
  echo "scripts/test.sh: $*" >&2
  exit 1
}

# Makes $VENV with PY_TOOLS unless it is there already, working, with the same list.
py_tools() {
  local stamp="$VENV/py-tools.txt"
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c '' 2>/dev/null && [ -x "$VENV/bin/ruff" ] &&
    [ "$(cat "$stamp" 2>/dev/null)" = "${PY_TOOLS[*]}" ]; then
    return 0
  fi
  command -v "$PYTHON" >/dev/null 2>&1 ||
    die "$PYTHON not found: install Python 3.10 or later (Debian: apt-get install python3 python3-venv)"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "$PYTHON is $("$PYTHON" -V 2>&1), ruff and pytest here need 3.10 or later: set PYTHON to one"
  echo "scripts/test.sh: making $VENV (${PY_TOOLS[*]})" >&2
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
    rm -rf "$VENV"
    die "'$PYTHON -m venv' failed: install the venv module (Debian: apt-get install python3-venv)"
  fi
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-virtualenv "${PY_TOOLS[@]}" ||
    die "pip could not install ${PY_TOOLS[*]} into $VENV"
  echo "${PY_TOOLS[*]}" >"$stamp"
}

start=$SECONDS
# The Python tools first, so that a machine without them fails now rather than after the Rust build.
py_tools

# Rust. Formatting follows rustfmt.toml; an unsafe block without a `// SAFETY:` comment fails
# clippy (clippy::undocumented_unsafe_blocks, set in the workspace's Cargo.toml).
step cargo fmt --all --check
step cargo clippy --workspace --all-targets -- -D warnings
step cargo build --workspace
step cargo test --workspace

# Python.
step "$VENV/bin/ruff" format --check
step "$VENV/bin/ruff" check
rc=0
step "$VENV/bin/python" -m pytest || rc=$?
# pytest exits 5 when it collected no test: a fault of the suite's layout, never a pass.
[ "$rc" -ne 5 ] || die "pytest collected no tests (testpaths in pyproject.toml: tests/py/)"
[ "$rc" -eq 0 ] || exit "$rc"

# The wheel: built (manylinux_2_28), installed into a new virtual environment and run on the
# bundled example from there with no cargo on PATH (uses the stand-ins built above).
step bash scripts/test-wheel.sh

echo "scripts/test.sh: all passed in $((SECONDS - start)) s" >&2
