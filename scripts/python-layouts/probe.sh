#!/usr/bin/env bash
# Compiles probe.c against the headers of each given interpreter and prints the offsets
# shim/src/python/layout.rs relies on. Usage: probe.sh /path/to/python3.X [...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for py in "$@"; do
    inc=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("INCLUDEPY"))')
    "${CC:-cc}" -I"$inc" -o "$tmp/probe" "$here/probe.c"
    echo "== $py"
    "$tmp/probe"
done
