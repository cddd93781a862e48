#!/bin/sh
# rows_ab.sh BUILD_A BUILD_B [ROUNDS]: bench/rows.c built against two builds' core libraries
# (BUILD/libattnscope_core.a, headers from this checkout's core/), run on one thread in
# alternating rounds; prints per shape the median and range of each side's ns per element and
# the ratio of the medians (A over B: above 1, B is faster), and whether every output has the
# same bits (rows.c hashes them). Benchmarks are not tests: nothing here asserts a time.
#
#     # BASE: the commit before the change, e.g. b39261d for ddec9f6's rows together
#     git worktree add /tmp/base BASE && (cd /tmp/base && meson setup build && ninja -C build)
#     sh bench/rows_ab.sh /tmp/base/build build 5
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BUILD_A BUILD_B [ROUNDS]" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${3:-5}
case $rounds in ''|*[!0-9]*|0) echo "$0: ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for side in a b; do
    build=$1; [ $side = b ] && build=$2
    [ -f "$build/libattnscope_core.a" ] || { echo "$0: no $build/libattnscope_core.a (build it with ninja -C $build)" >&2; exit 1; }
    gcc -O2 -fopenmp -I"$here/core" "$here/bench/rows.c" "$build/libattnscope_core.a" -lopenblas -lm -o "$tmp/rows_$side"
done
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}; $rounds alternating rounds, 1 thread"
i=0
while [ $i -lt "$rounds" ]; do
    OMP_NUM_THREADS=1 "$tmp/rows_a" >> "$tmp/a.txt"
    OMP_NUM_THREADS=1 "$tmp/rows_b" >> "$tmp/b.txt"
    i=$((i + 1))
done
python3 - "$tmp/a.txt" "$tmp/b.txt" <<'EOF'
import re, statistics, sys
def read(path):
    out = {}
    for line in open(path):
        m = re.match(r"(.*): ([0-9.]+) ns per element \(bits (.*)\)", line.strip())
        out.setdefault(m.group(1), []).append((float(m.group(2)), m.group(3)))
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
for shape in a:
    ta, tb = [t for t, _ in a[shape]], [t for t, _ in b[shape]]
    same = {c for _, c in a[shape]} == {c for _, c in b[shape]}
    ma, mb = statistics.median(ta), statistics.median(tb)
    print(f"{shape:36s} A {ma:.3f} [{min(ta):.3f}-{max(ta):.3f}]  B {mb:.3f} [{min(tb):.3f}-{max(tb):.3f}] ns/element"
          f"  A/B {ma / mb:.2f}x  {'same bits' if same else 'OTHER BITS'}")
EOF
