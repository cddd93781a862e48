#!/usr/bin/env bash
# test_cli_stem.sh: convolutional stems as a user meets them (issue 18): info prints the papers'
# models with their stems and counts; a JSON config goes through info --json and back; traces of
# the stem fixtures place tokens where the convs' arithmetic puts them and give the reference
# logits; a stem model trains, checkpoints its BatchNorm buffers and records; bad stems are
# refused in one line, writing nothing.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_stem stem
TOOLS=$(cd "$(dirname "$0")/../tools" && pwd)
EXP=$(cd "$(dirname "$0")/../experiments" && pwd)

# info: the built-in papers' models, their stems and counts (docs/models.md)
expect 0 "$A" info vit_lsla
has "$T/out" "^19.35 M parameters; 3.30 GMACs per image"
has_wrapped "$T/out" "stem        Conv2d(3->48, k3, s2, p1, no bias) + BN + hardswish -> 112x112; Conv2d(48->96, k3, s2, p1, no bias) + BN + hardswish -> 56x56"
has_wrapped "$T/out" "halved by a Conv2d(k3, s2, p1) + LayerNorm (CSwin's merge)"
has "$T/out" "no relative position bias table in the windows"
has "$T/out" "^3+conv   7x7       768    24      2"
expect 0 "$A" info vit_lsla_np
has "$T/out" "^16.74 M parameters; 2.87 GMACs"
expect 0 "$A" info refined_vit_s
has "$T/out" "^27.39 M parameters; 7.69 GMACs"
has_wrapped "$T/out" "Conv2d(3->32, k7, s2, p3, no bias) + BN + relu -> 112x112"
has_wrapped "$T/out" "Conv2d(128->384, k8, s8, p0) -> 14x14"
has_wrapped "$T/out" "stem stride 16 -> 14x14 grid = 196 patches + 1 prefix token (cls) = 197 tokens"

# the config written back describes the same model (a file of it reads back to the same counts)
expect 0 "$A" info --json vit_lsla
cp "$T/out" "$T/lsla.json"
py 'import json,sys; j=json.load(open(sys.argv[1]))
assert j["downsample"] == "conv" and j["rel_pos_bias"] is False and len(j["stem"]) == 2, j
assert j["stem"][0] == {"out": 48, "kernel": 3, "stride": 2, "padding": 1, "bias": False, "bn": True, "act": "hardswish"}, j["stem"]
assert j["bn_eps"] > 0 and j["patch_norm"] is False' "$T/lsla.json"
expect 0 "$A" info "$T/lsla.json"
has "$T/out" "^19.35 M parameters; 3.30 GMACs per image"

# traces of the fixtures: the reference logits, and token centres from the convs' arithmetic
# (swin_stem: 3/2/1 twice -> every 4 px from 0.5, a 3/2/1 conv merge -> every 8 px from 0.5; the
# monolithic vit_stem's trace gives its grid and total stride: 7/2/3, 3/1/1, 4/4/0 -> 4x4, 8 px)
for m in vit_stem swin_stem; do
    expect 0 "$A" record --model "$FX/$m" --images "$FX/inputs.npy" --out "$T/$m.h5" --dtype f32
done
py 'import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[3]); import safetensors_io as st
for name, want in (("vit_stem", []), ("swin_stem", [(4, 0.5), (4, 0.5), (8, 0.5), (8, 0.5)])):
    f = h5py.File(sys.argv[1] + "/" + name + ".h5", "r")
    e = st.load(sys.argv[2] + "/" + name + "/expected.safetensors")["logits"]
    got = f["images/logits"][:]
    assert np.abs(got - e).max() < 1e-4, (name, np.abs(got - e).max())
    for l, (stride, off) in enumerate(want):
        L = f["layers/%02d" % l]
        assert L.attrs["token_stride_px"] == stride and L.attrs["token_offset_px"] == off, (name, l, dict(L.attrs))
    assert "\"stem\"" in f.attrs["model_config"], name
    if name == "vit_stem":
        assert list(f.attrs["grid"]) == [4, 4] and f.attrs["patch_size"] == 8, dict(f.attrs)' "$T" "$FX" "$TOOLS"

# ViT-LSLA's Fig. 3/4 in a window: the query's window of a shifted block; a window not recorded
# is refused in one line, writing nothing
expect 0 "$A" record --model "$FX/swin_stem" --images "$FX/inputs.npy" --out "$T/sw.h5" --record attn,internals
expect 0 "$A" plot lsla "$T/sw.h5" --layer 1 --head 1 --query 27 -o "$T/lsla.png"
[ -s "$T/lsla.png" ] && ok || bad "no lsla.png"
expect 0 "$A" record --model "$FX/swin_stem" --images "$FX/inputs.npy" --out "$T/sw0.h5" --record attn,internals --windows 0
expect 1 "$A" plot lsla "$T/sw0.h5" --layer 0 --query 63 -o "$T/lsla0.png"
one_line
has "$T/err" "window 3 was not recorded"
[ ! -e "$T/lsla0.png" ] && ok || bad "wrote lsla0.png"

# a stem model trains, its checkpoint keeps the BatchNorm buffers, and it records
expect 0 "$A" train -c "$EXP/models/vit_lsla_shapes.json" -d shapes:96 -e 1 -b 16 --threads 1 -o "$T/tr"
py 'import json, sys
sys.path.insert(0, sys.argv[2]); import safetensors_io as st
c = json.load(open(sys.argv[1] + "/latest/config.json"))
assert c["downsample"] == "conv" and c["rel_pos_bias"] is False and len(c["stem"]) == 2, c
w = st.load(sys.argv[1] + "/latest/model.safetensors")
assert "stem.1.bn.running_var" in w and "layers.1.downsample.conv.weight" in w
assert not any("relative_position_bias_table" in k for k in w), [k for k in w if "relative" in k]' "$T/tr" "$TOOLS"
expect 0 "$A" record --model "$T/tr/latest" --images "$FX/inputs.npy" --out "$T/tr.h5"

# the demo-sized stem models train on CIFAR-format data as on shapes (issue 18: "on the built-in
# shapes data and on CIFAR-format data"): a CIFAR-10 binary folder of 48 + 16 random images
mkdir -p "$T/cifar10"
perl -e 'srand(1); for $i (0..47) { print chr($i % 10); print map { chr(int(rand(256))) } 1..3072 }' >"$T/cifar10/data_batch_1.bin"
perl -e 'srand(2); for $i (0..15) { print chr($i % 10); print map { chr(int(rand(256))) } 1..3072 }' >"$T/cifar10/test_batch.bin"
for m in vit_lsla refined_vit; do
    expect 0 "$A" train -c "$EXP/models/${m}_shapes.json" -d "$T/cifar10" --num-classes 10 -e 1 -b 16 --threads 1 -o "$T/c_$m"
    has "$T/out" "cifar10 (48 train, 16 held out"
done

# H-MaiT's stages: global Swin stages with per-stage MaiT masks train, and the checkpoint's config
# (each block's mask sizes for its own stage's heads) reads back to record
cat >"$T/hm.json" <<'JSON'
{"architecture": "custom", "family": "swin", "img_size": 32, "patch_size": 4, "embed_dim": 24, "depths": [2, 2],
 "num_heads": [3, 6], "mlp_ratio": 2, "num_classes": 6, "scopes": ["global", "global"],
 "attention": [{"blocks": "0-1", "type": "mait", "mask_size": 3, "mask_mode": "zero"},
               {"blocks": "2-3", "type": "mait", "mask_size": [3, 3, 0, 0, 0, 0], "mask_mode": "zero"}]}
JSON
expect 0 "$A" train -c "$T/hm.json" -d shapes:96 -e 1 -b 16 --threads 1 -o "$T/hm"
expect 0 "$A" record --model "$T/hm/latest" --images "$FX/inputs.npy" --out "$T/hm.h5"
expect 0 "$A" info "$T/hm.h5"
has_wrapped "$T/out" "layer 2: stage 1, 4x4 tokens every 8 px, width 48, heads 6; global attention"
# a checkpoint and a trace of it as attnscope wrote them before 33cc1ee (an all-global Swin's
# config with the windows' keys, which a user's config may no longer give) load, analyse and resume
py 'import sys, json, h5py
p = sys.argv[1] + "/hm/latest/config.json"
c = json.load(open(p))
assert "window_size" not in c, c
c.update(window_size=4, pad_order="pad_first", window_clamp="timm")
json.dump(c, open(p, "w"))
with h5py.File(sys.argv[1] + "/hm.h5", "r+") as f:
    m = json.loads(f.attrs["model_config"])
    m.update(window_size=4, pad_order="pad_first", window_clamp="timm")
    f.attrs["model_config"] = json.dumps(m)' "$T"
expect 0 "$A" info "$T/hm/latest"
expect 0 "$A" analyze "$T/hm.h5" --out "$T/hm.analysis.h5" -q --metrics entropy
expect 0 "$A" record --model "$T/hm/latest" --images "$FX/inputs.npy" --out "$T/hm.h5" --resume
expect 1 "$A" info "$T/hm/latest/config.json"; has "$T/err" "window_size\" has no effect"
expect 0 "$A" info hmait_t
has "$T/out" "^28.27 M parameters; 4.49 GMACs"
has "$T/out" "blocks 4-9: mait R=\[3,3,3,3,0,0,0,0,0,0,0,0\] zero"

# an experiment trains each model from its own config: two custom Swins in one process, the first
# with a stem, a conv merge and no relative table, the second with none of them (the second was
# trained with the first's settings while train_run's config started from uninitialised memory)
mkdir -p "$T/x2/models"
cp "$EXP/models/vit_lsla_shapes.json" "$EXP/models/hmait_shapes.json" "$T/x2/models/"
cat >"$T/x2/two.json" <<'JSON'
{"name": "two", "description": "two staged configs of one family, trained in one process",
 "train": {"data": "shapes:64", "epochs": 1, "batch": 32, "seed": 1},
 "images": {"heldout": 4}, "record": "attn",
 "models": [{"name": "a", "config": "models/vit_lsla_shapes.json", "train": true},
            {"name": "b", "config": "models/hmait_shapes.json", "train": true}]}
JSON
expect 0 "$A" experiment "$T/x2/two.json" --out "$T/x2/out" --threads 2
py 'import sys, json, glob
a, = glob.glob(sys.argv[1] + "/trained/vit_lsla_shapes-*/epoch-001/config.json")
b, = glob.glob(sys.argv[1] + "/trained/hmait_shapes-*/epoch-001/config.json")
a, b = json.load(open(a)), json.load(open(b))
assert "stem" in a and a.get("downsample") == "conv", a
assert "stem" not in b and b.get("downsample", "merge") == "merge" and b.get("rel_pos_bias", True), b' "$T/x2"
# a bad config is named as the user wrote it, not as the copy made for training
: >"$T/x2/models/empty.json"
sed 's/hmait_shapes.json/empty.json/' "$T/x2/two.json" >"$T/x2/three.json"
expect 1 "$A" experiment "$T/x2/three.json" --out "$T/x2/out3" --threads 2
has "$T/err" "x2/models/empty.json: not a JSON object"

# bad stems: one line naming the key, nothing written
printf '{"architecture": "custom", "family": "pvt_v2", "stem": [{"out": 64, "kernel": 4, "stride": 4}]}' >"$T/bad1.json"
printf '{"architecture": "refined_vit_s", "stem": [{"out": 32, "kernel": 7, "stride": 2, "pad": 3}]}' >"$T/bad2.json"
printf '{"architecture": "vit_lsla", "bn_eps": 0.001, "stem": [{"out": 96, "kernel": 4, "stride": 4}]}' >"$T/bad3.json"
for b in bad1 bad2 bad3; do
    expect 1 "$A" train -c "$T/$b.json" -d shapes:96 -e 1 -o "$T/$b.out"
    one_line
    [ ! -e "$T/$b.out" ] && ok || bad "$b: wrote $T/$b.out"
done
has "$T/err" "no \"stem\" convolution has \"bn\": true"
t_done
