#!/usr/bin/env bash
# The training step's bits: a few steps of each experiments/models config that exercises a path
# of the training step (one-pass attention backward with per-thread maps: vit, mait_ls; map work:
# refiner; keys and values that are x: lsla; less attention: lavit; PVT v2's depth-wise gradient,
# im2col and attention residual: lavit_pvt; a stem and windows: vit_lsla; CaiT: masked_cait) give
# the weights whose SHA-256 tests/fixtures/train_exact.txt holds, which came from main at d28e7b1
# (tools/train_digests.sh). Every documented training result rests on these bits: a change that
# alters them must say so and re-derive docs/experiments.md. OpenBLAS's kernels round
# differently on other cores: skipped there.
set -u
. "$(dirname "$0")/lib.sh"
t_init train_exact train_exact
F="${FIXTURES:-tests/fixtures}"
M="$F/../../experiments/models"
want_core=$(awk '$1 == "openblas" { print $2 }' "$F/train_exact.txt")
for b in vit_shapes mait_ls_shapes refiner_shapes lsla_shapes lavit_shapes lavit_pvt_shapes vit_lsla_shapes masked_cait_shapes; do
    expect 0 "$A" train --config "$M/$b.json" --data shapes:192 --val-fraction 0.25 --epochs 1 --batch 32 \
        --threads 2 --seed 0 --out "$T/$b"
    core=$(sed -n 's/.*OpenBLAS \([A-Za-z0-9]*\) kernels.*/\1/p' "$T/out" | head -1)
    if [ "$core" != "$want_core" ]; then
        echo "note: OpenBLAS runs $core kernels here, the digests are of $want_core; skipping" >&2
        t_done
    fi
    got=$(sha256sum "$T/$b/epoch-001/model.safetensors" | cut -d' ' -f1)
    want=$(awk -v b="$b" '$1 == b { print $2 }' "$F/train_exact.txt")
    if [ -n "$want" ] && [ "$got" = "$want" ]; then ok; else bad "$b: weights $got, want ${want:-none} (main at d28e7b1)"; fi
done
t_done
