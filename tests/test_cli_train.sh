#!/usr/bin/env bash
# test_cli_train.sh: what `attnscope train` shows and records about its losses (each term on its
# own, warnings when the total goes negative or held-out accuracy stays at chance, LaViT's loss
# reading in state.json and in the traces it writes), and experiments that train their models
# first (budget, reuse, held-out images, index page). Tiny runs: seconds in all.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli-train cli-train
T_SHOW_HAS=600 T_SHOW_LACKS=600
M=$FX/../../experiments/models
TINY=(--data shapes:60 --batch 16 --threads 1)

# the option and its help
expect 0 "$A" train --help;  has "$T/out" "--dp-loss R"; has "$T/out" "Values: squared, hinge, flipped"
expect 2 "$A" train --config "$M/lavit_shapes.json" "${TINY[@]}" --out "$T/x" --dp-loss printed
has "$T/err" "--dp-loss \"printed\""; has "$T/err" "squared"; one_line

# a LaViT model: the epoch line shows the cross-entropy and the diagonality term apart; the
# default reading (squared) is in state.json, log.csv and the traces written during training
expect 0 "$A" train --config "$M/lavit_shapes.json" "${TINY[@]}" --epochs 1 --record-every 1 \
    --record-images 4 --out "$T/lavit"
has "$T/out" "epoch   1/1  train ce [0-9.]* dp [0-9.]* acc"
has "$T/out" "held-out ce [0-9.]* acc"
has "$T/lavit/epoch-001/state.json" '"dp_loss":[[:space:]]*"squared"'
has "$T/lavit/log.csv" "train_ce,train_dp"
if [ "$(awk -F, 'NR == 2 { d = $4 - ($10 + $11); print (d < 1e-5 && d > -1e-5) }' "$T/lavit/log.csv")" = 1 ]; then ok
else bad "log.csv: train_loss is not train_ce + train_dp: $(cat "$T/lavit/log.csv")"; fi
if command -v h5dump >/dev/null; then
    h5dump -a /training "$T/lavit/trace-epoch-001.h5" >"$T/h5" 2>&1
    has "$T/h5" '"dp_loss":"squared"'; has "$T/h5" '"epoch":1}'
fi
# a model without less-attention blocks has no diagonality term to show
expect 0 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" --epochs 1 --out "$T/vit"
has "$T/out" "train ce [0-9.]* acc"; lacks "$T/out" " dp "
# a Swin model trains (windows, shift mask, relative bias, a patch merge): its checkpoint loads
# in record, whose trace holds window maps; the tables take no weight decay (timm's rule)
expect 0 "$A" train --config "$M/swin_shapes.json" "${TINY[@]}" --epochs 1 --record-every 1 --record-images 4 \
    --out "$T/swin"
has "$T/out" "train ce [0-9.]* acc"; has "$T/out" "held-out accuracy"
expect 0 "$A" record --model "$T/swin/latest" --images "$T/swin/heldout" --out "$T/swin.h5"
expect 0 "$A" info "$T/swin.h5"; has "$T/out" "windows 2x2 of 4x4 tokens"
expect 0 "$A" info "$T/swin/trace-epoch-001.h5"; has "$T/out" "state       complete"
# PVT v2 trains (overlapping convs, spatial reduction, MixFFN; gradients: test_train.c's pvt_*)
# and its checkpoint records with its reduced key grids
expect 0 "$A" train --config "$M/pvt_shapes.json" "${TINY[@]}" --epochs 1 --record-every 1 --record-images 4 \
    --out "$T/pvt"
has "$T/out" "held-out accuracy"; lacks "$T/out" " dp "
expect 0 "$A" record --model "$T/pvt/latest" --images "$T/pvt/heldout" --out "$T/pvt.h5"
expect 0 "$A" info "$T/pvt.h5"; has "$T/out" "4x4 keys every 8 px"
# LaViT on PVT v2 trains (less-attention over reduced keys, the attention residual across
# stages); its diagonality term (square maps only: blocks 3-4, stage 1 at R = 1) shows on the
# epoch line, and its traces carry the residual's readings in the model config
expect 0 "$A" train --config "$FX/pvt_lavit/config.json" "${TINY[@]}" --num-classes 6 --epochs 1 --record-every 1 \
    --record-images 2 --out "$T/pvt-lavit"
has "$T/out" "epoch   1/1  train ce [0-9.]* dp [0-9.]* acc"
if command -v h5dump >/dev/null; then
    h5dump -a /model_config "$T/pvt-lavit/trace-epoch-001.h5" >"$T/h5" 2>&1
    has "$T/h5" '"attn_residual":[[:space:]]*true'; has "$T/h5" '"ar_source":[[:space:]]*"scores"'
    has "$T/h5" '"ar_norm":[[:space:]]*"layernorm"'
fi
# CaiT trains (talking heads, class attention, LayerScale; gradients: test_train.c's cait_*) and
# its checkpoint records the class token's maps
expect 0 "$A" train --config "$FX/cait_tiny/config.json" "${TINY[@]}" --num-classes 6 --epochs 1 --record-every 1 \
    --record-images 2 --out "$T/cait"
has "$T/out" "held-out accuracy"
expect 0 "$A" record --model "$T/cait/latest" --images "$T/cait/heldout" --out "$T/cait.h5"
expect 0 "$A" info "$T/cait.h5"; has "$T/out" "cait"
# a CaiT without talking heads, few classes, 4 patches and a batch of 64: the class-attention
# blocks' compact rows once ran past the acts arena here (ASan: heap overflow; plain: a
# corrupted tape)
cat >"$T/cait_small.json" <<'JSON'
{"architecture": "custom", "family": "cait", "img_size": 16, "patch_size": 8, "embed_dim": 64, "depth": 2,
 "depth_token_only": 2, "num_heads": 4, "mlp_ratio": 2, "mlp_ratio_token_only": 2, "num_classes": 6,
 "init_values": 0.1, "talking_heads": false}
JSON
expect 0 "$A" train --config "$T/cait_small.json" --data shapes:200:16 --epochs 1 --batch 64 --out "$T/cait-small"
has "$T/out" "held-out accuracy"
cat >"$T/swin_lsla.json" <<'JSON'
{"architecture": "custom", "family": "swin", "img_size": 32, "patch_size": 4, "embed_dim": 16,
 "depths": [2], "num_heads": [2], "window_size": 4, "num_classes": 6,
 "attention": [{"blocks": "0-1", "type": "lsla"}]}
JSON
# LSLA inside Swin's (shifted) windows trains (gradients: test_train.c's swin_lsla fixtures)
expect 0 "$A" train --config "$T/swin_lsla.json" "${TINY[@]}" --epochs 1 --out "$T/swin-lsla"
has "$T/out" "held-out accuracy"
# LMSA inside Swin's windows trains (gradients: test_train.c's swin_lmsa)
sed 's/"type": "lsla"/"type": "lmsa", "qk_dim": 2/' "$T/swin_lsla.json" >"$T/swin_lmsa.json"
expect 0 "$A" train --config "$T/swin_lmsa.json" "${TINY[@]}" --epochs 1 --out "$T/swin-lmsa"
has "$T/out" "held-out accuracy"
# resuming with another reading is refused, naming it
expect 1 "$A" train --config "$M/lavit_shapes.json" "${TINY[@]}" --epochs 1 --record-every 1 \
    --record-images 4 --out "$T/lavit" --resume --dp-loss flipped
has "$T/err" "started with --dp-loss"; has "$T/err" "squared"; one_line

# the flipped reading at a high weight drives the total loss below zero: a warning says so and
# names the fix; the model stays at chance, and after 3 epochs a second warning says that
expect 0 "$A" train --config "$M/lavit_shapes.json" "${TINY[@]}" --epochs 3 --dp-loss flipped \
    --dp-weight 100 --lr 0.01 --warmup-epochs 0 --out "$T/neg"
has "$T/err" "warning: epoch [0-9]*: the total loss is negative"
has "$T/err" "use --dp-loss squared"
has "$T/err" "warning: held-out accuracy has stayed at chance (16.7%) for 3 epochs"
has "$T/neg/epoch-003/state.json" '"dp_loss":[[:space:]]*"flipped"'
# the bounded readings cannot go negative, whatever their weight
for r in squared hinge; do
    expect 0 "$A" train --config "$M/lavit_shapes.json" "${TINY[@]}" --epochs 2 --dp-weight 100 --lr 0.01 \
        --warmup-epochs 0 --dp-loss $r --out "$T/pos-$r" --quiet
    lacks "$T/err" "negative"
    if awk -F, 'NR > 1 && ($4 < 0 || $11 < 0) { exit 1 }' "$T/pos-$r/log.csv"; then ok; else bad "$r: $(cat "$T/pos-$r/log.csv")"; fi
done

# an experiment that trains its models first: the budget is stated on the index page with the
# held-out accuracy; the held-out images are what it records; a rerun reuses the trained model
mkdir -p "$T/e/models"
cp "$M/vit_shapes.json" "$M/lavit_shapes.json" "$T/e/models/"
cat >"$T/e/x.json" <<'JSON'
{"name": "x", "description": "tiny", "images": {"heldout": 8},
 "train": {"data": "shapes:60", "epochs": 1, "batch": 16, "seed": 3},
 "models": [{"name": "vanilla", "config": "models/vit_shapes.json", "train": true},
            {"name": "lavit", "config": "models/lavit_shapes.json", "train": true}],
 "analyze": {"metrics": "entropy"}, "figures": [{"figure": "entropy", "models": ["vanilla", "lavit"], "formats": ["pdf"]}]}
JSON
expect 0 "$A" experiment "$T/e/x.json" --out "$T/e/out/x" --threads 1
has "$T/out" "train      vanilla      1 epoch on shapes:60"
has "$T/out" "held-out accuracy [0-9.]*% (chance 16.7%)"
has "$T/out" "the first 8 held-out images of shapes:60"
has "$T/e/out/x/index.md" "Training budget"
has "$T/e/out/x/index.md" '`{"data":"shapes:60","epochs":1,"batch":16,"seed":3}`'
has "$T/e/out/x/index.md" "| vanilla | config \`models/vit_shapes.json\`, trained"
has "$T/e/out/x/index.md" "| [0-9.]*% (chance 16.7%, 120 images) |"
check_trained() { [ "$(ls -d "$T"/e/out/trained/vit_shapes-* | wc -l)" -eq "$1" ] && [ -d "$T/e/out/trained/$(ls "$T/e/out/trained" | grep lavit_shapes | head -1)/latest" ]; }
if check_trained 1; then ok; else bad "trained models: $(ls -R "$T/e/out/trained" | head -20)"; fi
[ "$(ls "$T/e/out/x/heldout-8-shapes-60-32"/*/*.png | wc -l)" -eq 8 ] && ok || bad "8 held-out images"
expect 0 "$A" experiment "$T/e/x.json" --out "$T/e/out/x" --threads 1
has "$T/out" "train      vanilla      up to date"; has "$T/out" "record     lavit        up to date"
lacks "$T/out" "drawn"
# another budget trains again, into its own folder; the first stays
sed -i 's/"seed": 3/"seed": 4/' "$T/e/x.json"
expect 0 "$A" experiment "$T/e/x.json" --out "$T/e/out/x" --threads 1
has "$T/out" "train      vanilla      1 epoch on shapes:60"; has "$T/out" "figure     entropy      drawn"
if check_trained 2; then ok; else bad "a second budget: $(ls "$T/e/out/trained")"; fi
# a changed config file retrains that model only
sed -i 's/"mlp_ratio": 2/"mlp_ratio": 1/' "$T/e/models/lavit_shapes.json"
expect 0 "$A" experiment "$T/e/x.json" --out "$T/e/out/x" --threads 1
has "$T/out" "train      vanilla      up to date"; has "$T/out" "train      lavit        1 epoch on"
# errors: one line naming the file and the fix
sed 's/"seed": 4}/"seed": 4, "epoch": 2}/' "$T/e/x.json" >"$T/e/bad1.json"
expect 1 "$A" experiment "$T/e/bad1.json" --out "$T/e/out/bad"
has "$T/err" "bad1.json"; has "$T/err" "unknown key \"epoch\""; one_line
sed 's/"train": {[^}]*},//' "$T/e/x.json" >"$T/e/bad2.json"
expect 1 "$A" experiment "$T/e/bad2.json" --out "$T/e/out/bad"
has "$T/err" "needs the experiment's \"train\" budget"; one_line
sed 's/"train": true}/"train": "yes"}/' "$T/e/x.json" >"$T/e/bad3.json"
expect 1 "$A" experiment "$T/e/bad3.json" --out "$T/e/out/bad"
has "$T/err" "must be true or false"; one_line

t_done
