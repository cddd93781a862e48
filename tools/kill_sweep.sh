#!/usr/bin/env bash
# kill_sweep.sh: the exhaustive crash sweep behind docs/trace-format.md's promise. Kills
# `attnscope record` (then `record --resume`, then `analyze`) at every write call in turn, through
# the LD_PRELOAD shim tests/killshim.c, and checks what each kill left: a trace that h5py opens
# with swmr=True holding whole images, or no file under the name; analyze never changes a byte
# of the trace. A few minutes; the unit suite's cli_robust test runs a handful of the points.
# Usage: bash tools/kill_sweep.sh [BUILD_DIR]   (default build/)
set -u
B=${1:-build}
A=$(readlink -f "$B/attnscope")
SHIM=$(readlink -f "$B/tests/libkillshim.so")
FX=$(readlink -f "$(dirname "$0")/../tests/fixtures")
PY=/usr/bin/python3
T=$(mktemp -d "${TMPDIR:-/tmp}/attnscope-sweep.XXXXXX")
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
$PY -c "import numpy as np; x = np.load('$FX/inputs.npy'); np.save('in12.npy', np.concatenate([x] * 6))"
REC=(record --model "$FX/vit_cls" --images in12.npy --batch 2 --threads 1 -q)
fails=0
check() {   # check FILE WHAT: the leftover of a kill
    [ -e "$1" ] || return 0
    $PY -c "
import h5py, sys
f = h5py.File(sys.argv[1], 'r', swmr=True)
d = f['images/done'][:]
assert d.sum() == len(d) or d[:int(d.sum())].all()" "$1" 2>/dev/null || { echo "FAIL $2: $1 does not open"; fails=$((fails + 1)); }
}
count() { SHIM_MATCH=$1 SHIM_COUNT_FILE=count LD_PRELOAD=$SHIM "${@:2}" >/dev/null 2>&1; cat count; }
killat() { ( SHIM_MATCH=$1 SHIM_KILL_AT=$2 LD_PRELOAD=$SHIM "${@:3}" >/dev/null 2>&1 ) 2>/dev/null; }

N=$(count k.h5 "$A" "${REC[@]}" --out k.h5); rm -f k.h5
echo "record: $N write calls"
for K in $(seq 1 "$N"); do
    rm -f k.h5; killat k.h5 "$K" "$A" "${REC[@]}" --out k.h5; check k.h5 "record killed at $K"
done
# resume of a trace killed half-way, killed in turn at each of its writes
rm -f k.h5; killat k.h5 $((N / 2)) "$A" "${REC[@]}" --out k.h5; cp k.h5 half.h5
M=$(count k.h5 "$A" "${REC[@]}" --out k.h5 --resume)
echo "record --resume: $M write calls"
for K in $(seq 1 "$M"); do
    cp half.h5 k.h5; killat k.h5 "$K" "$A" "${REC[@]}" --out k.h5 --resume; check k.h5 "resume killed at $K"
done
# analyze: the trace never changes
"$A" "${REC[@]}" --out an.h5 --force; cp an.h5 an.orig
M=$(count an. "$A" analyze an.h5 --threads 1)
echo "analyze: $M write calls"
for K in $(seq 1 "$M"); do
    killat an. "$K" "$A" analyze an.h5 --threads 1
    cmp -s an.h5 an.orig || { echo "FAIL analyze killed at $K changed the trace"; fails=$((fails + 1)); }
    "$A" info an.h5 >/dev/null 2>&1 || { echo "FAIL info after analyze killed at $K"; fails=$((fails + 1)); }
done
echo "kill sweep: $fails failures"
[ "$fails" -eq 0 ]
