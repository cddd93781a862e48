#!/usr/bin/env bash
# train_digests.sh: SHA-256 of the weights a few training steps give, for each
# experiments/models/*_shapes.json (or the configs named), for bit-identity tests of the training
# step.
#
#     tools/train_digests.sh BUILD/attnscope > tests/fixtures/train_exact.txt
#     tools/train_digests.sh BUILD/attnscope vit_shapes lavit_pvt_shapes   # just these
#
# Each config trains 1 epoch of the built-in shapes (192 images, 48 held out: 5 steps of 32) at
# 2 threads with seed 0; a line is "CONFIG SHA256" of epoch-001/model.safetensors, after a first
# line "openblas CORE" (OpenBLAS's kernels round differently on other cores). The digests of
# tests/fixtures/train_exact.txt came from the binary of main at d28e7b1, before the training
# speed changes that were to leave every bit as it was; tests/test_train_exact.sh runs this
# script on eight configs and checks that today's binary gives the same bytes. Rerun it only for
# a change that means to change training's rounding, and then re-derive docs/experiments.md's
# figures.
set -eu
A=${1:?usage: tools/train_digests.sh ATTNSCOPE [CONFIG...]}
shift
M="$(cd "$(dirname "$0")/../experiments/models" && pwd)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if [ $# -eq 0 ]; then
    for cfg in "$M"/*_shapes.json; do set -- "$@" "$(basename "$cfg" .json)"; done
fi
core=""
for b in "$@"; do
    if ! "$A" train --config "$M/$b.json" --data shapes:192 --val-fraction 0.25 --epochs 1 --batch 32 --threads 2 \
        --seed 0 --out "$T/$b" >"$T/$b.out" 2>&1; then
        echo "train_digests.sh: $b: attnscope train failed: $(tail -1 "$T/$b.out")" >&2
        exit 1
    fi
    [ -n "$core" ] || core=$(sed -n 's/.*OpenBLAS \([A-Za-z0-9]*\) kernels.*/\1/p' "$T/$b.out" | head -1)
    echo "$b $(sha256sum "$T/$b/epoch-001/model.safetensors" | cut -d' ' -f1)" >>"$T/lines"
done
echo "openblas $core"
cat "$T/lines"
