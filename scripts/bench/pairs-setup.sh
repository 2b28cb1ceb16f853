# Sourced by scripts/bench-cpu.sh and scripts/bench-cpu-ab.sh: builds the release tree, then in a
# fresh directory $W (removed at exit) 100 padding shared objects and the `pairs` benchmark
# (scripts/bench/pairs.c) linked to the stand-in runtime; $S is the stand-ins' directory.
cargo build --release --workspace -q
S=$(find target/release/build -maxdepth 3 -type d -path '*gpushim-tests-*/out/standins' | head -n 1)
W=$(mktemp -d /tmp/gpushim-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
for i in $(seq -w 0 99); do
  echo "int pad_$i(int x) { return x + 1$i; }" > "$W/pad$i.c"
  cc -shared -fPIC -O2 -o "$W/libpad0$i.so" "$W/pad$i.c"
done
cc -O2 -g -o "$W/pairs" scripts/bench/pairs.c -L"$S" -l:libcudart.so.13 -Wl,-rpath,"$S" -ldl
