#!/usr/bin/env bash
# Writes the README's pictures: of the HTML report, docs/images/report-1000.png and
# report-1920.png (the browser test of the page's layout, tests/py/test_report_exports.py, run on
# the bundled example with PAGE_SCREENSHOTS set, which it writes its screenshots into), and of a
# notebook's `%gpushim diff`, docs/images/jupyter-diff.png (scripts/jupyter-screenshot.py: a real
# kernel on the stand-ins). Needs what scripts/test.sh makes first (the workspace built,
# target/py-tools) and Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CARGO_TARGET_DIR:-target}/py-tools
[ -x "$VENV/bin/python" ] || { echo "scripts/screenshots.sh: no $VENV: run scripts/test.sh first" >&2; exit 1; }
cargo build --workspace
PAGE_SCREENSHOTS=$PWD/docs/images CI=1 "$VENV/bin/python" -m pytest -q tests/py/test_report_exports.py -k layout
"$VENV/bin/python" scripts/jupyter-screenshot.py "$PWD/target/debug/gpushim" "$PWD/target/debug/standins" \
  docs/images/jupyter-diff.png
ls -l docs/images/report-1000.png docs/images/report-1920.png docs/images/jupyter-diff.png
