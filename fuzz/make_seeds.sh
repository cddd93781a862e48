#!/usr/bin/env bash
# make_seeds.sh ATTNSCOPE OUT [STAMP]: seed corpora for the fuzz harnesses, made by attnscope
# itself: a tiny model trained for one epoch (its model.safetensors and config.json), the held-out
# PNGs and the attention trace that training records, its analysis results, built-in configs
# (info --json), and the experiment files in experiments/. attnscope writes no JPEG, .npy,
# CIFAR or MNIST files: those seeds are the test fixtures (tools/make_fixtures.py) and small
# CIFAR/MNIST files laid out here from attnscope's own images.
set -eu
A=$1 OUT=$2
SRC=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$OUT"
mkdir -p "$OUT"/{safetensors,config,png,jpeg,npy,traindata,experiment,trace}
W=$(mktemp -d "${TMPDIR:-/tmp}/attnscope-seeds.XXXXXX")
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
"$A" train --config "$SRC/experiments/models/vit_shapes.json" --data shapes:64 --out "$W/run" \
    --epochs 1 --batch 32 --threads 1 --record-every 1 --record-images 2 --quiet >/dev/null
ckpt=$(ls -d "$W"/run/epoch-* | head -1)
cp "$ckpt/model.safetensors" "$OUT/safetensors/trained.safetensors"
cp "$ckpt/config.json" "$OUT/config/trained.json"
for a in deit_tiny_patch16_224 deit_small_distilled_patch16_224 vit_base_patch16_224; do
    "$A" info "$a" --json >"$OUT/config/$a.json"
done
for m in "$SRC"/experiments/models/*.json; do cp "$m" "$OUT/config/"; done
i=0
for p in $(find "$W/run" -name '*.png' | sort | head -4); do cp "$p" "$OUT/png/heldout$i.png"; i=$((i + 1)); done
tr=$(ls "$W"/run/trace-epoch-*.h5 | head -1)
cp "$tr" "$OUT/trace/trace.h5"
"$A" analyze "$tr" --threads 1 >/dev/null 2>&1 || true
side="${tr%.h5}.analysis.h5"
[ -f "$side" ] && cp "$side" "$OUT/trace/results.h5"
cp "$SRC/tests/fixtures/img.jpg" "$OUT/jpeg/"
cp "$SRC/tests/fixtures/inputs.npy" "$OUT/npy/"
cp "$SRC"/experiments/*.json "$OUT/experiment/"
# CIFAR-10 (selector byte 0) and MNIST (1) files holding two of the held-out images' bytes
python3 - "$OUT/traindata" "$OUT/png/heldout0.png" <<'PY'
import struct, sys
out, src = sys.argv[1], open(sys.argv[2], 'rb').read()
px = (src * (2 * 784 // len(src) + 1))[:2 * 784]
imgs = struct.pack('>IIII', 0x803, 2, 28, 28) + px
labs = struct.pack('>II', 0x801, 2) + bytes([3, 5])
open(out + '/mnist', 'wb').write(bytes([1]) + struct.pack('>H', len(imgs)) + imgs + labs)
body = b''.join(bytes([k]) + (src * (3072 // len(src) + 1))[:3072] for k in (3, 7))
open(out + '/cifar10', 'wb').write(bytes([0]) + body)
PY
[ $# -ge 3 ] && touch "$3"
echo "seeds in $OUT: $(find "$OUT" -type f | wc -l) files"
