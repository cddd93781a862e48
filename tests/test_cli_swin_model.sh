#!/usr/bin/env bash
# test_cli_swin_model.sh: Swin as a user names it (issue 16 items 3 and 7): built-in names with
# their stages and published counts in info (text and --json), the ref helper's tiny-Swin config
# form, refusals in one line naming the key, and a checkpoint whose relative table is of another
# window. Needs numpy only (tools/safetensors_io.py).
set -u
. "$(dirname "$0")/lib.sh"
t_init test_cli_swin_model swinm
TOOLS=$(cd "$(dirname "$0")/../tools" && pwd)
narrow() {
    if awk 'length($0) > 100 { bad = 1 } END { exit bad }' "$1"; then ok; else bad "$2: lines over 100 columns"; fi
}

# the built-in names, no weights needed: stages, components and the published counts
expect 0 "$A" info swin_tiny_patch4_window7_224
has "$T/out" "^total  *28288354 .* 4\.4906$"; has "$T/out" "4.49 GMACs"; has "$T/out" "^downsample "
lacks "$T/out" "tokens+pos_embed"; has "$T/out" "^stage  *grid  *dim  *heads  *blocks  *window"
has "$T/out" "^0  *56x56  *96  *3  *2 7x7, shift 3 "; has "$T/out" "^3+merge  *7x7  *768  *24  *2 7x7, no shift "
has "$T/out" "^stem .*patch_embed+norm"; has "$T/out" "^head .*norm+pool+fc"
has_wrapped "$T/out" "depths 2,2,6,2, dims 96,192,384,768, heads 3,6,12,24"
has_wrapped "$T/out" "pad order pad_first, window clamp timm"
narrow "$T/out" "info swin_tiny"
expect 0 "$A" info swin_small_patch4_window7_224; has "$T/out" "^total  *49606258 "; has "$T/out" "8.74 GMACs"
expect 0 "$A" info swin_base_patch4_window7_224;  has "$T/out" "^total  *87768224 "; has "$T/out" "15.43 GMACs"
expect 0 "$A" info swin_base_patch4_window12_384.ms_in22k; has "$T/out" "^head  *21841 classes"
has "$T/out" "12x12, shift 6"; has "$T/out" "centre crop 384"
expect 0 "$A" info --list-archs; has "$T/out" "^swin_tiny_patch4_window7_224  *28.3M  *4.49"
# the clamp: at 192 the last grid is 6x6, one window of 6 (timm) or a padded 7 (torchvision)
expect 0 "$A" info swin_tiny_patch4_window7_224 --img-size 192; has "$T/out" "^3+merge  *6x6 .* 6x6 (clamped)"
echo '{"architecture": "swin_tiny_patch4_window7_224", "img_size": 192, "window_clamp": "torchvision"}' >"$T/tv.json"
expect 0 "$A" info "$T/tv.json"; has "$T/out" "^3+merge  *6x6 .* 7x7, no shift"

# --json: the config (what traces store) and the cost per component and stage; read back equal
expect 0 "$A" info swin_tiny_patch4_window7_224 --json; cp "$T/out" "$T/t.json"
py '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["family"] == "swin" and j["depths"] == [2, 2, 6, 2] and j["num_heads"] == [3, 6, 12, 24], j
assert "depth" not in j and "class_token" not in j
c = j["cost"]
assert c["params"] == 28288354 and round(c["macs"] / 1e9, 1) == 4.5, c
assert [s["grid"] for s in c["stages"]] == [56, 28, 14, 7] and [s["window"] for s in c["stages"]] == [7] * 4
assert c["stem"]["params"] + sum(s["params"] for s in c["stages"]) + c["head"]["params"] == c["params"]
assert c["components"]["downsample"]["params"] == 1548288
' "$T/t.json"
expect 0 "$A" info "$T/t.json" --json
py 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); assert a == b, (a, b)' "$T/t.json" "$T/out"

# the ref helper's tiny-Swin fixture config form, and a round trip through --json
cat >"$T/fx.json" <<'J'
{"architecture": "custom", "num_classes": 10, "model_args": {"family": "swin", "img_size": 32, "patch_size": 2, "in_chans": 3, "embed_dim": 16, "depths": [2, 2], "num_heads": [2, 4], "window_size": 4, "mlp_ratio": 4, "qkv_bias": true, "patch_norm": true, "pad_order": "pad_first", "window_clamp": "timm"}, "pretrained_cfg": {"input_size": [3, 32, 32], "crop_pct": 0.875, "interpolation": "bicubic", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}}
J
expect 0 "$A" info "$T/fx.json"; has "$T/out" "^1+merge  *8x8  *32  *4  *2 4x4, shift 2 "
has "$T/out" "^head        10 classes"
expect 0 "$A" info "$T/fx.json" --json; cp "$T/out" "$T/fx2.json"
expect 0 "$A" info "$T/fx2.json" --json
py 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); assert a == b' "$T/fx2.json" "$T/out"

# LSLA in shifted windows: the outer bias skips the pairs the shift mask separates by default
# ("outer_bias_masked", ViT-LSLA's Algorithm 1 per window would give them B_outer); info, the
# config written back and the trace say which; refused when it is not a boolean
lsla() {
cat >"$T/lsla.json" <<J
{"name": "lsla", "description": "outer bias", "images": {"synthetic": 2, "size": 32, "seed": 3}, "record": "attn",
 "models": [{"name": "m", "seed": 1, "config": {"architecture": "custom", "family": "swin", "img_size": 32,
   "patch_size": 4, "in_chans": 3, "embed_dim": 16, "depths": [2], "num_heads": [2], "window_size": 4,
   "mlp_ratio": 2, "num_classes": 3, "attention": {"type": "lsla", "outer_bias": "relative"$1}}}], "figures": []}
J
}
lsla ''; expect 0 "$A" experiment "$T/lsla.json" --out "$T/lsla1"
h5dump -A -g /layers/01 "$T/lsla1/m.h5" >"$T/a" 2>&1; has "$T/a" 'ATTRIBUTE "outer_bias_masked"'
py 'import h5py, sys; f = h5py.File(sys.argv[1]); assert f["layers/01"].attrs["outer_bias_masked"] == 1' "$T/lsla1/m.h5"
lsla ', "outer_bias_masked": false'; expect 0 "$A" experiment "$T/lsla.json" --out "$T/lsla2"
py 'import h5py, sys, numpy as np
a, b = (h5py.File(p)["layers/01/attn"][:].astype(np.float64) for p in sys.argv[1:3])
assert h5py.File(sys.argv[2])["layers/01"].attrs["outer_bias_masked"] == 0
# the shifted block: the maps differ where the shift mask separates pairs (B_outer there or not)
d = np.abs(a - b)
assert d.max() > 1e-4 and (d < 1e-7).mean() > 0.5, (d.max(), (d < 1e-7).mean())
# the unshifted block is the same either way
assert np.array_equal(h5py.File(sys.argv[1])["layers/00/attn"][:], h5py.File(sys.argv[2])["layers/00/attn"][:])' "$T/lsla1/m.h5" "$T/lsla2/m.h5"
echo '{"architecture": "custom", "family": "swin", "img_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [2], "num_heads": [2], "window_size": 4, "attention": {"type": "lsla", "outer_bias_masked": false}}' >"$T/l.json"
expect 0 "$A" info "$T/l.json"; has "$T/out" "lsla DS, inner full, outer full, QXX, outer bias unmasked"
expect 0 "$A" info "$T/l.json" --json; has "$T/out" '"outer_bias_masked":[[:space:]]*false'

# refused in one line, naming the key and the fix
refuse() { echo "$1" >"$T/bad.json"; expect 1 "$A" info "$T/bad.json"; has "$T/err" "$2"; one_line; }
refuse '{"architecture": "swin_tiny_patch4_window7_224", "attention": {"type": "lsla", "outer_bias_masked": "yes"}}' '"outer_bias_masked" must be true or false' 
refuse '{"architecture": "swin_tiny_patch4_window7_224", "depth": 12}' '"depth" is a ViT key.*use "depths"'
refuse '{"architecture": "deit_tiny_patch16_224", "depths": [2, 2]}' '"depths" is a Swin key.*"family": "swin"'
refuse '{"architecture": "swin_tiny_patch4_window7_224", "window_size": 70}' 'window_size" 70 is outside 1..64'
refuse '{"architecture": "swin_tiny_patch4_window7_224", "attention": {"blocks": [3], "type": "refiner", "expanded_heads": 8}}' 'block 3 (stage 1, block 1 there): refiner attention cannot run in window scope: use one of vanilla, lmsa, lsla'
refuse '{"architecture": "swin_tiny_patch4_window7_224", "global_pool": "token"}' 'use "avg"'
refuse '{"architecture": "swin_tiny_patch4_window7_224", "num_heads": [3, 6, 12, 25]}' 'num_heads"\[3\] = 25: stage 3.s width 768 is not divisible'
refuse '{"architecture": "swin_tiny_patch4_window7_224", "pad_ordr": "roll_first"}' 'did you mean "pad_order"'
expect 1 "$A" info swinv2_tiny_window8_256; has "$T/err" "Swin Transformer V2"; one_line

# a checkpoint whose stage-1 relative tables are of a 7x7 window, for a window-4 config
mkdir -p "$T/wrong" && cp "$T/fx.json" "$T/wrong/config.json"
"$PY" - "$T/wrong/model.safetensors" "$TOOLS" <<'P'
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import safetensors_io
t = {"patch_embed.proj.weight": np.zeros((16, 3, 2, 2), np.float32)}
for s, (C, h) in enumerate([(16, 2), (32, 4)]):
    for j in range(2):
        rows = 49 if s == 0 else 169
        t[f"layers.{s}.blocks.{j}.attn.relative_position_bias_table"] = np.zeros((rows, h), np.float32)
        t[f"layers.{s}.blocks.{j}.attn.relative_position_index"] = np.zeros((16, 16), np.int64)
safetensors_io.save(sys.argv[1], t)
P
expect 1 "$A" info "$T/wrong"
has "$T/err" "layers.1.blocks.0.attn.relative_position_bias_table has 169 rows, the table of a 7x7 window"
has "$T/err" 'set "window_size": 7'; one_line

t_done
