#!/usr/bin/env bash
# test_cli_vitfam.sh: the modern ViT family end to end (issue 17 item 3): built-ins in info,
# every prefix token named in the trace, registers treated as prefix tokens by record, analyze
# (against the numpy reference), plot and view; features-only models; refusals.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_vitfam vitfam

# ---- built-ins: info names the options and the prefix tokens --------------------------------
expect 0 "$A" info vit_small_patch14_reg4_dinov2
has "$T/out" "1369 patches + 5 prefix tokens"; has_wrapped "$T/out" "(cls,reg0,reg1,reg2,reg3) = 1374 tokens"
has_wrapped "$T/out" "LayerScale (init 1e-05)"; has "$T/out" "head        none (features only: the 384-d"
expect 0 "$A" info vit_base_patch16_clip_quickgelu_224
has_wrapped "$T/out" "LayerNorm eps 1e-05, quick_gelu, norm_pre"; has "$T/out" "head        512 classes"
expect 0 "$A" info vit_base_patch16_siglip_224.webli
has "$T/out" "0 prefix tokens (none)"; has "$T/out" "pool map"
expect 0 "$A" info deit3_base_patch16_224.fb_in22k_ft_in1k
has "$T/out" "pos_embed over the patches only"; has "$T/out" "crop 224"
expect 0 "$A" info --list-archs
has "$T/out" "^vit_base_patch16_clip_224  *86.2M  *17.56  openai clip mean/std"
has "$T/out" "^vit_base_patch16_siglip_224  *92.9M  *17.71  no head, inception mean/std"
expect 1 "$A" info vit_large_patch14_dinov2; has "$T/err" "not support yet"; has "$T/err" "init_values"; one_line

# ---- a register model's trace: every prefix token named, registers are not patches -----------
expect 0 "$A" record --model "$FX/vf_reg" --images "$FX/inputs.npy" --record all --dtype f32 --out "$T/reg.h5"
py 'import h5py, json, sys
f = h5py.File(sys.argv[1], "r")
a = f.attrs
assert a["format_version"] == 2 and a["num_prefix_tokens"] == 4, dict(a)
assert a["prefix_tokens"] == "cls,reg0,reg1,reg2", a["prefix_tokens"]
assert list(a["grid"]) == [4, 4] and a["num_tokens"] == 20
cfg = json.loads(a["model_config"])
assert cfg["reg_tokens"] == 3 and cfg["no_embed_class"] and cfg["init_values"] > 0, cfg
assert f["layers/01/attn"].shape == (2, 2, 20, 20) and f["layers/01/tokens"].shape == (2, 20, 32)
assert "logits" not in f["images"] and "pred" not in f["images"]  # features only' "$T/reg.h5"
expect 0 "$A" record --model "$FX/vf_reg" --images "$FX/inputs.npy" --query-rows prefix --out "$T/regp.h5"
py 'import h5py, sys
assert h5py.File(sys.argv[1], "r")["layers/00/attn"].shape == (2, 2, 4, 20)  # cls + 3 registers' "$T/regp.h5"
expect 0 "$A" info "$T/reg.h5"; has "$T/out" "20 (4 prefix: cls,reg0,reg1,reg2 + 4x4 patches"
# every metric on the register trace agrees with numpy's, which takes the prefix from the trace:
# a register counted as a patch would break the 4 x 4 grid of every spatial metric
expect 0 "$A" analyze "$T/reg.h5" --out "$T/reg_res.h5"
expect 0 "$PY" "$(dirname "$0")/../tools/analysis_ref.py" compare "$T/reg.h5" "$T/reg_res.h5"
has "$T/out" "^distance"; has "$T/out" "^als"; lacks "$T/out" "MISMATCH"
# the figure draws the register model's map (its note names the registers' share: test_plot)
expect 0 "$A" plot attention "$T/reg.h5" --layer 1 --head 0 --query 0 -o "$T/att.png"
expect 0 "$A" plot grid "$T/reg.h5" -o "$T/grid.png"
printf 'key c\nstatus\n' >"$T/view.txt"
SDL_VIDEODRIVER=dummy expect 0 "$A" view "$T/reg.h5" --layer 1 --script "$T/view.txt"
has "$T/out" "query class token"
# registers without a class token: rollout starts from the mean of all tokens, as numpy's
expect 0 "$A" record --model "$FX/vf_regavg" --images "$FX/inputs.npy" --record attn --out "$T/ra.h5"
expect 0 "$A" analyze "$T/ra.h5" --metrics rollout,distance --out "$T/ra_res.h5"
expect 0 "$PY" "$(dirname "$0")/../tools/analysis_ref.py" compare "$T/ra.h5" "$T/ra_res.h5"
has "$T/out" "^rollout"; lacks "$T/out" "MISMATCH"
py 'import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert f.attrs["prefix_tokens"] == "reg0,reg1" and f.attrs["num_prefix_tokens"] == 2
assert "mean of all" in h5py.File(sys.argv[2], "r")["analysis/rollout"].attrs["parameters"]' "$T/ra.h5" "$T/ra_res.h5"

# ---- features only, MAP pooling ---------------------------------------------------------------
expect 0 "$A" record --model "$FX/vf_map" --images "$FX/inputs.npy" --out "$T/map.h5"
py 'import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert f.attrs["num_prefix_tokens"] == 0 and f.attrs["prefix_tokens"] == ""
assert f["images/logits"].shape == (2, 4)' "$T/map.h5"

# ---- refusals: one line with the option and the fix ------------------------------------------
expect 1 "$A" train --config "$FX/vf_map/config.json" --data shapes:64 --num-classes 6 --out "$T/tr" --epochs 1
has "$T/err" 'global_pool "map"'; has "$T/err" "not supported yet"; one_line
if [ ! -e "$T/tr" ]; then ok; else bad "a refused run left $T/tr"; fi
# the rest of the family trains (gradients: test_train.c's vf_*): LayerScale, registers, pre_norm
expect 0 "$A" train --config "$FX/vf_deit3/config.json" --data shapes:64 --num-classes 6 --epochs 1 --batch 16 \
    --out "$T/tr3"
has "$T/out" "held-out accuracy"
expect 0 "$A" train --config "$FX/vf_p14/config.json" --data shapes:64:42 --num-classes 6 --epochs 1 --batch 16 \
    --out "$T/trp"
has "$T/out" "held-out accuracy"
echo '{"architecture": "deit_tiny_patch16_224", "distilled": true, "reg_tokens": 4}' >"$T/dr.json"
expect 1 "$A" info "$T/dr.json"; has "$T/err" "reg_tokens"; one_line
echo '{"architecture": "vit_base_patch16_clip_224", "act_layer": "gelu_tanh"}' >"$T/tanh.json"
expect 1 "$A" info "$T/tanh.json"; has "$T/err" "not supported yet"; has "$T/err" "quick_gelu"; one_line

t_done
