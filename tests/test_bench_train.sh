#!/usr/bin/env bash
# bench/train.py's plumbing, not its figures: one tiny alternating round per kind of PyTorch side
# (a ViT with LaViT's less attention and its diagonality term, PVT v2 with less attention, CaiT
# on weights from an attnscope epoch, a Swin stage model) prints its row and ratio. A PyTorch
# side that no longer runs (a reference's changed signature) fails here instead of in a user's
# `--all`. Timings are tiny and never checked. Needs python3-torch, else skipped.
set -u
. "$(dirname "$0")/lib.sh"
t_init bench_train bench
TRAIN="$(dirname "$0")/../bench/train.py"
M="${FIXTURES:-tests/fixtures}/../../experiments/models"
if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "note: python3-torch not installed; skipping" >&2
    t_done
fi
for m in lavit lavit_pvt cait swin; do
    expect 0 "$PY" "$TRAIN" --config "$M/${m}_shapes.json" --threads 1 --batch 8 --steps 2 --repeat 1 --attnscope "$A"
    has "$T/out" "^${m}_shapes  *[0-9]* \[ *[0-9]*-[0-9]* *\]  *[0-9]* \[ *[0-9]*-[0-9]* *\]  *[0-9.]*x$"
done
t_done
