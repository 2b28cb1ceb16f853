#!/usr/bin/env bash
# Measures the collector on a long synthetic event stream: wall time, events per second and
# peak resident memory (docs/performance.md, "Collector", records the results).
#
#   scripts/bench-collector.sh [EVENTS] [STACKS] [LIVE]     (default 10000000 1000 10000)
#   BENCH_MODE=pipe BENCH_MAX_RSS_MIB=256 scripts/bench-collector.sh 1000000000 10000
#                                    (issue 14's bound: 1 billion events over 10,000 stacks)
#
# BENCH_MODE=pipe skips the file (1e9 events would take about 30 GB) and the events/s goal,
# and measures only the generator piped into the collector; BENCH_MAX_RSS_MIB sets the memory
# goal (default 200 MiB, the goal of docs/performance.md for 10 M events over 1,000 stacks).
#
# The stream comes from collector/examples/gen_stream.rs: EVENTS allocation and free events
# over STACKS distinct stacks, at most LIVE allocations live at once plus a slow leak. It is
# written to a file first, then read by `gpushim collect --input FILE`, so that the time is the
# collector's alone; a second run pipes the generator straight into `--input -` (both share
# the machine's cores then). Needs GNU time (/usr/bin/time); installs it with apt-get if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

events=${1:-10000000}
stacks=${2:-1000}
live=${3:-10000}
# Goals (docs/performance.md): at least this many events per second, at most this much memory.
min_events_per_s=2000000
max_rss_kib=$((${BENCH_MAX_RSS_MIB:-200} * 1024))
mode=${BENCH_MODE:-both}
case $mode in both | pipe) ;; *) echo "bench: BENCH_MODE is both or pipe" >&2; exit 2 ;; esac

if [ ! -x /usr/bin/time ]; then
    echo "bench: installing GNU time" >&2
    apt-get update -qq && apt-get install -y -qq time >/dev/null
fi

cargo build --release -p gpushim-collector --bin gpushim --example gen_stream >&2
gpushim=target/release/gpushim
gen=target/release/examples/gen_stream

work=$(mktemp -d /tmp/gpushim-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
stream=$work/stream.bin
mkdir "$work/out"

if [ "$mode" = both ]; then
    "$gen" --events "$events" --stacks "$stacks" --live "$live" > "$stream"
    echo "stream: $events events, $stacks stacks, at most $live live; $(du -m "$stream" | cut -f1) MiB"
fi

# measure LABEL CMD...: runs CMD under GNU time, prints wall time, events/s and peak RSS.
measure() {
    local label=$1
    shift
    rm -rf "$work/out" && mkdir "$work/out"
    /usr/bin/time -v -o "$work/time.txt" "$@" 2>"$work/stderr.txt" >/dev/null || {
        cat "$work/stderr.txt" >&2
        return 1
    }
    local wall rss
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/time.txt" |
        awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
    local rate
    rate=$(awk -v n="$events" -v s="$wall" 'BEGIN { if (s > 0) printf "%.0f", n / s; else print 0 }')
    printf '%-28s wall %6.2f s  %9s events/s  peak RSS %4d MiB\n' "$label" "$wall" "$rate" $((rss / 1024))
    grep -h 'suspect #1' "$work/stderr.txt" | cut -c1-120 || true
    echo "$rate $rss" > "$work/last.txt"
}

if [ "$mode" = both ]; then
    measure "collect --input FILE" "$gpushim" collect --input "$stream" --output "$work/out"
    read -r rate rss < "$work/last.txt"
fi
# rss_samples: while the piped collector runs, prints its resident memory and how much of the
# stream it has read every BENCH_RSS_EVERY seconds (default 10), so that a flat RSS over the
# run shows (the peak alone does not).
rss_samples() {
    local every=${BENCH_RSS_EVERY:-10} start pid="" t
    start=$(date +%s)
    while [ -z "$pid" ] && [ ! -s "$work/last.txt" ]; do
        sleep 0.2
        [ -s "$work/sh.pid" ] && pid=$(pgrep -P "$(cat "$work/sh.pid")" -x gpushim | head -n 1 || true)
    done
    while [ -n "$pid" ] && [ -r "/proc/$pid/status" ]; do
        t=$(($(date +%s) - start))
        awk -v t="$t" -v io="$(awk '/^rchar/ {print $2}' "/proc/$pid/io" 2>/dev/null)" \
            '/^VmRSS/ {printf "  sample t=%ds read=%d MiB rss=%d MiB\n", t, io / 1048576, $2 / 1024}' \
            "/proc/$pid/status" 2>/dev/null || true
        sleep "$every"
    done
}
rm -f "$work/last.txt" "$work/sh.pid"
rss_samples &
sampler=$!
measure "gen_stream | collect --input -" sh -c \
    "echo \$\$ > '$work/sh.pid'; '$gen' --events $events --stacks $stacks --live $live | '$gpushim' collect --input - --output '$work/out'"
wait "$sampler" 2>/dev/null || true
if [ "$mode" = pipe ]; then
    read -r rate rss < "$work/last.txt"
    min_events_per_s=0
fi

echo "report: $(du -m "$work"/out/*.json | cut -f1 | head -n 1) MiB"
echo "machine: $(nproc) cores, $(awk '/model name/ {sub(/.*: /, ""); print; exit}' /proc/cpuinfo); $(date -u +%Y-%m-%d)"
status=0
if [ "$rate" -lt "$min_events_per_s" ]; then
    echo "bench: below the goal of $min_events_per_s events/s" >&2
    status=1
fi
if [ "$rss" -gt "$max_rss_kib" ]; then
    echo "bench: peak RSS above the goal of $((max_rss_kib / 1024)) MiB" >&2
    status=1
fi
exit $status
