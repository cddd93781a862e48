#!/usr/bin/env bash
# The training step's bits: a few steps of each experiments/models config that exercises a path
# of the training step (one-pass attention backward with per-thread maps: vit, mait_ls; map work:
# refiner; keys and values that are x: lsla; less attention: lavit; PVT v2's depth-wise gradient,
# im2col and attention residual: lavit_pvt; a stem and windows: vit_lsla; CaiT: masked_cait) give
# the weights whose SHA-256 tests/fixtures/train_exact.txt holds, which came from main at d28e7b1
# (tools/train_digests.sh, which this runs). Every documented training result rests on these
# bits: a change that alters them must say so and re-derive docs/experiments.md. OpenBLAS's
# kernels round differently on other cores: skipped there.
set -u
. "$(dirname "$0")/lib.sh"
t_init train_exact train_exact
F="${FIXTURES:-tests/fixtures}"
expect 0 bash "$(dirname "$0")/../tools/train_digests.sh" "$A" vit_shapes mait_ls_shapes refiner_shapes lsla_shapes \
    lavit_shapes lavit_pvt_shapes vit_lsla_shapes masked_cait_shapes
cp "$T/out" "$T/digests"
want_core=$(awk '$1 == "openblas" { print $2 }' "$F/train_exact.txt")
core=$(awk '$1 == "openblas" { print $2 }' "$T/digests")
if [ "$core" != "$want_core" ]; then
    echo "note: OpenBLAS runs ${core:-unknown} kernels here, the digests are of $want_core; skipping" >&2
    t_done
fi
check_lines=0
while read -r b got; do
    [ "$b" = openblas ] && continue
    check_lines=$((check_lines + 1))
    want=$(awk -v b="$b" '$1 == b { print $2 }' "$F/train_exact.txt")
    if [ -n "$want" ] && [ "$got" = "$want" ]; then ok; else bad "$b: weights $got, want ${want:-none} (main at d28e7b1)"; fi
done <"$T/digests"
if [ "$check_lines" -eq 8 ]; then ok; else bad "$check_lines digests compared, want 8"; fi
t_done
