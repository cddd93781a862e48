#!/usr/bin/env bash
# test_cli_config.sh: configs and names as a user gives them (issue 14 items 6-10, issue 21's
# hostile numbers and --threads): refused in one line naming the key, nothing written.
set -u
. "$(dirname "$0")/lib.sh"
t_init test_cli_config cfg

# item 10: a tag's own classes and mean/std; unknown names list the known ones and the families
# not supported yet instead of "no such file or folder"
expect 0 "$A" info vit_small_patch16_224.dino
has "$T/out" "head        none (features only"; has "$T/out" "mean (0.485, 0.456, 0.406)"
expect 1 "$A" info vit_small_patch16_224.made_up;  has "$T/err" "pretrained tag"; one_line
for n in swinv2_tiny_window8_256 beit_base_patch16_224 deit3_large_patch16_224 vit_large_patch14_dinov2; do
    expect 1 "$A" info "$n"; has "$T/err" "not support yet"; has "$T/err" "deit_tiny_patch16_224"
    lacks "$T/err" "no such file"; one_line
done
expect 1 "$A" info vit_smal_patch16_224;  has "$T/err" "did you mean \"vit_small_patch16_224\""

# item 6: attention inside model_args is used; a typo or an unimplemented timm key is refused
echo '{"architecture": "deit_tiny_patch16_224", "model_args": {"attention": {"type": "mait", "mask_size": 3}}}' >"$T/ma.json"
expect 0 "$A" info "$T/ma.json";          has "$T/out" "mait R=\[3,3,3\]"
echo '{"architecture": "custom", "embed_dim": 64, "depth": 2, "num_heads": 2, "mlp_ratoi": 2}' >"$T/typo.json"
expect 1 "$A" info "$T/typo.json";        has "$T/err" "did you mean \"mlp_ratio\""; one_line
echo '{"architecture": "deit_tiny_patch16_224", "qk_norm": true}' >"$T/qkn.json"
expect 1 "$A" info "$T/qkn.json";         has "$T/err" "qk_norm"; has "$T/err" "not supported yet"

# item 7: the MLP width follows embed_dim
echo '{"architecture": "custom", "img_size": 32, "patch_size": 4, "embed_dim": 64, "depth": 2, "num_heads": 2}' >"$T/d64.json"
expect 0 "$A" info "$T/d64.json";         has "$T/out" "mlp 256)"

# issue 21: an infinite std never reaches a trace; the checkpoint's folder config is refused
cp -r "$FX/vit_cls" "$T/inf"
sed -i 's/0\.224,/1e999,/' "$T/inf/config.json"
grep -q 1e999 "$T/inf/config.json" || bad "the test could not edit the fixture's std"
expect 1 "$A" record --model "$T/inf" --images "$FX/inputs.npy" --out "$T/inf.h5"
has "$T/err" "std"; one_line
if [ -e "$T/inf.h5" ]; then bad "a trace was written with an infinite std"; else ok; fi

# issue 21: --threads far above the core count is capped with a note, and runs as fast
expect 0 timeout 60 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/t.h5" --threads 1000
has "$T/err" "more than the"

# a Swin config whose image is smaller than one patch: refused, where reading its "attention"
# once divided by a zero window (fuzz_config's crash input)
printf '{"architecture": "custom", "family": "swin", "img_size": 2, "patch_size": 4, "embed_dim": 48, "depths": [2, 2], "num_heads": [3, 6], "window_size": 4, "num_classes": 6, "attention": [{"blocks": "0-1", "type": "lmsa", "qk_dim": 24}]}\n' >"$T/tiny.json"
expect 1 "$A" info "$T/tiny.json"; has "$T/err" "img_size 2 is not a multiple of patch_size 4"; one_line

t_done
