#!/usr/bin/env bash
# Before/after comparison of builds of the shim on issue 18's pool-hit loop, on a GPU machine
# (scripts/gpu/bench_pool.cu: 200,000 pairs of cudaMallocAsync + cudaFreeAsync of 4 KiB from a
# 40-frame stack, pinned as in scripts/bench-gpu.sh). Each build runs with backtraces and with
# GPUSHIM_BACKTRACE=0, interleaved with bare runs, REPS times; prints each configuration's
# median ns per pair and the median of its per-repetition ratios to the bare run of the same
# repetition (the GPU machine's host swings between fast and slow periods of tens of seconds).
# A build whose name starts with "probe" is one made with `--features probe`: the last run's
# table of laps through the hot path follows (shim/src/probe.rs).
# Usage: scripts/bench-gpu-ab.sh REPS NAME=DIR [NAME=DIR ...]   (DIR holds libgpushim.so)
# The collector is $GPUSHIM_COLLECTOR, else target/release/gpushim. Ends with what the hot
# path's primitives cost on the machine (scripts/bench/primitives.c). Writes $OUT/bench-gpu-ab.txt.
# A probe build: cargo build --release -p gpushim-shim --features probe --target-dir target/probe
# Each build is also timed by scripts/bench/paired.c (PAIRED=0 leaves it out): hooked and bare
# chunks of the driver's pool-hit pair alternate inside one process, so the host's slow swings
# fall on both; the median per-chunk difference is the ns the shim adds per pair. The same
# harness times scripts/bench/floor.c's hooks (floor-0 to floor-3: forwarding only; a stamp and a
# sequence number; and a 64-byte event handed to another thread): the least a recorder costs.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/gpushim-bench-out}
REPS=${1:?usage: bench-gpu-ab.sh REPS NAME=DIR ...}
shift
export GPUSHIM_COLLECTOR=${GPUSHIM_COLLECTOR:-$ROOT/target/release/gpushim}
W=$(mktemp -d /tmp/gpushim-ab.XXXXXX)
mkdir -p "$OUT" "$W/reports"
export GPUSHIM_OUTPUT=$W/reports
nvcc -O2 -o "$W/bench_pool" "$ROOT/scripts/gpu/bench_pool.cu" || exit 1
cc -O2 -o "$W/primitives" "$ROOT/scripts/bench/primitives.c" -lpthread || exit 1
PAIRED=${PAIRED:-1}
if [ "$PAIRED" = 1 ]; then
  LIBCUDA=$(ldconfig -p | awk '$1 == "libcuda.so.1" { print $NF; exit }')
  cc -O2 -o "$W/paired" "$ROOT/scripts/bench/paired.c" "${LIBCUDA:?no libcuda.so.1}" -ldl -lpthread || exit 1
  cc -O2 -shared -fPIC -o "$W/libfloor.so" "$ROOT/scripts/bench/floor.c" -ldl -lpthread || exit 1
fi
declare -A padded pratio_
paired() { # configuration name, env...
  local name=$1 line
  shift
  line=$(env "$@" taskset -c 3-15 "$W/paired" 400000 2 40 200 2>>"$W/$name.paired.err" | grep '^paired:' | tail -n 1)
  padded[$name]+="$(echo "$line" | awk '{print $7}') "
  pratio_[$name]+="$(echo "$line" | awk '{print $9}') "
}
declare -A res
names=()
run() { # configuration name, env...
  local name=$1 v
  shift
  v=$(env "$@" taskset -c 3-15 "$W/bench_pool" 200000 2 40 2>"$W/$name.err" | grep -E '^[0-9.]+$' | tail -n 1)
  res[$name]+="${v:-0} "
}
for _ in $(seq "$REPS"); do
  run none
  for b in "$@"; do
    n=${b%%=*} d=${b#*=}
    run "$n" LD_PRELOAD="$d/libgpushim.so"
    run "$n-nobt" LD_PRELOAD="$d/libgpushim.so" GPUSHIM_BACKTRACE=0
    if [ "$PAIRED" = 1 ]; then
      paired "$n" LD_PRELOAD="$d/libgpushim.so"
      paired "$n-nobt" LD_PRELOAD="$d/libgpushim.so" GPUSHIM_BACKTRACE=0
    fi
  done
  if [ "$PAIRED" = 1 ]; then
    paired none
    for m in 0 1 2 3; do paired "floor-$m" LD_PRELOAD="$W/libfloor.so" FLOOR_MODE=$m; done
  fi
done
for b in "$@"; do names+=("${b%%=*}" "${b%%=*}-nobt"); done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
pratio() { paste <(echo ${res[$1]} | tr ' ' '\n') <(echo ${res[none]} | tr ' ' '\n') | awk '$2 > 0 { printf "%.4f\n", $1 / $2 }' | median; }
padd() { paste <(echo ${res[$1]} | tr ' ' '\n') <(echo ${res[none]} | tr ' ' '\n') | awk '$2 > 0 { printf "%.1f\n", $1 - $2 }' | median; }
{
  echo "date: $(date -u +%FT%TZ); kernel $(uname -r); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(nproc) CPUs; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo
  echo "| configuration | ns per pair (median of $REPS) | per-run ratio to bare (median) | per-run ns added (median) | runs |"
  echo "|---|---|---|---|---|"
  echo "| none | $(echo "${res[none]}" | median) | 1.000 | 0 | ${res[none]}|"
  for k in "${names[@]}"; do
    echo "| $k | $(echo "${res[$k]}" | median) | $(pratio "$k") | $(padd "$k") | ${res[$k]}|"
  done
  if [ "$PAIRED" = 1 ]; then
    echo
    echo "In one process (scripts/bench/paired.c, driver calls, 200 chunk pairs of 1,000 pairs; medians of $REPS runs' medians):"
    echo
    echo "| configuration | ns added per pair | ratio to the driver's own pair | runs (ns added) |"
    echo "|---|---|---|---|"
    for k in none floor-0 floor-1 floor-2 floor-3 "${names[@]}"; do
      echo "| $k | $(echo "${padded[$k]}" | median) | $(echo "${pratio_[$k]}" | median) | ${padded[$k]}|"
    done
  fi
  for k in "${names[@]}"; do
    case $k in probe*)
      echo
      echo "$k, last run (gpushim probe):"
      grep '^gpushim probe' "$W/$k.err" | sed 's/^gpushim probe: //' | grep -v calibration;;
    esac
  done
  echo
  "$W/primitives" 2 3
} | tee "$OUT/bench-gpu-ab.txt"
