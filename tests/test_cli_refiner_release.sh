#!/usr/bin/env bash
# test_cli_refiner_release.sh: Refined-ViT as released (docs/models.md, "Refined-ViT as released")
# through the program. The fixture's maps, softmax internals and block outputs, as `record` writes
# them, against tools/refiner_release_ref.py (PyTorch, written from the release's definition);
# the carried map as each shared block's scores; the parameter counts of the built-in models
# against a count written here from the release's module list; the trace's record of the carry;
# ALS's refusals and notes; the one-line refusals of configs the release cannot mean; a short
# training of the demo model that records.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_refiner_release refrel
TOOLS=$(cd "$(dirname "$0")/../tools" && pwd)
EXP=$(cd "$(dirname "$0")/../experiments" && pwd)

# Each fixture's records against the reference's, and each shared block's internals against
# the definition applied to the recorded maps and the weights (docs/models.md): attn_expanded =
# relu6(bn1(conv_exp C)), attn_convolved = relu6(bn2(dw_k attn_expanded)), attn = s adapt_bn(C +
# bn3(conv_pro attn_convolved)), BatchNorm from its running statistics, eps 1e-5.
check_fixture() { # NAME KINDS CARRIED (comma lists; - for none)
    local M="$FX/$1"
    expect 0 "$A" record --model "$M" --images "$FX/inputs.npy" --out "$T/$1.h5" --record attn,scores,tokens,internals --dtype f32 -q
    py '
import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[3])
import safetensors_io as st
f, want, w = h5py.File(sys.argv[1], "r"), st.load(sys.argv[2] + "/expected.safetensors"), st.load(sys.argv[2] + "/model.safetensors")
kinds = sys.argv[4].split(",")
carried = [None if c == "-" else int(c) for c in sys.argv[5].split(",")]   # the block whose attn each receives
def bn(x, p):   # x (N, C, T, T), BatchNorm2d in eval mode
    sh = (1, -1, 1, 1)
    return (x - w[p + ".running_mean"].reshape(sh)) / np.sqrt(w[p + ".running_var"].reshape(sh) + 1e-5) \
        * w[p + ".weight"].reshape(sh) + w[p + ".bias"].reshape(sh)
def mix(W, x):  # a 1 x 1 convolution across the map channels
    return np.einsum("oc,ncij->noij", W[:, :, 0, 0].astype(np.float64), x)
def dw(K, x):   # depth-wise k x k, zero padding k // 2
    k = K.shape[-1]; h = k // 2; T = x.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (h, h), (h, h)))
    return sum(K[None, :, 0, u, v, None, None] * xp[:, :, u:u + T, v:v + T] for u in range(k) for v in range(k))
relu6 = lambda x: np.clip(x, 0, 6)
for l, kind in enumerate(kinds):
    g = f["layers/%02d" % l]
    assert g.attrs["mechanism"] == kind, (l, g.attrs["mechanism"])
    a = g["attn"][:]
    assert np.abs(a - want["attn.%d" % l]).max() < 1e-5, (l, np.abs(a - want["attn.%d" % l]).max())
    assert np.abs(g["tokens"][:] - want["tokens.%d" % l]).max() < 1e-4, l
    if carried[l] is None:
        assert "carried_from" not in g.attrs, l
    else:
        assert int(g.attrs["carried_from"]) == carried[l], (l, dict(g.attrs))
    s = float(g.attrs["scale"])
    if kind == "refiner_release":
        assert np.abs(g["attn_softmax"][:] - want["soft.%d" % l]).max() < 1e-5, l
        c = f["layers/%02d/attn" % carried[l]][:] if carried[l] is not None else 0
        assert np.abs(a - (g["attn_softmax"][:] + s * c)).max() < 1e-5, l   # A = P + s C
        continue
    # no scores of its own: the recorded scores are the map it refines
    C = f["layers/%02d/attn" % carried[l]][:].astype(np.float64)
    assert np.array_equal(g["scores"][:], C), l
    p = "blocks.%d.attn." % l
    e1 = relu6(bn(mix(w[p + "DLA.conv_exp.weight"], C), p + "DLA.bn1"))
    e2 = relu6(bn(dw(w[p + "DLA.depth_sep_conv.weight"], e1), p + "DLA.bn2"))
    A = s * bn(C + bn(mix(w[p + "DLA.conv_pro.weight"], e2), p + "DLA.bn3"), p + "adapt_bn")
    for name, ref in (("attn_expanded", e1), ("attn_convolved", e2), ("attn", A)):
        got = g[name][:]
        assert got.shape == ref.shape, (l, name, got.shape, ref.shape)
        assert np.abs(got - ref).max() < 1e-5 * max(1, np.abs(ref).max()), (l, name, np.abs(got - ref).max())
    assert (e2 == 6).any() and (e2 == 0).any(), l   # the fixture reaches both clamps
    assert a.min() < 0, l   # signed
' "$T/$1.h5" "$M" "$TOOLS" "$2" "$3"
}
check_fixture refiner_release refiner_release,refiner_shared,refiner_release,refiner_release,refiner_shared -,0,0,2,3
# 65 tokens (the convolution's register blocks), H' = 4 with 5 x 5, then the default 3 H; two
# shared blocks in a row hand block 0's map on to block 3
check_fixture refiner_release_wide refiner_release,refiner_shared,refiner_shared,refiner_release -,0,0,0
cp "$T/refiner_release.h5" "$T/t.h5"
M="$FX/refiner_release"

# parameter counts: the release module by module (Refiner_ViT with PatchEmbed_cnn, 16 or 32
# blocks alternating share False / True, DLA(H, H) with expand ratio 3, 1000 classes, aux_head)
for v in s:16:384:12 m:32:420:12 l:32:512:16; do
    IFS=: read -r name depth D H <<<"$v"
    expect 0 "$A" info "refiner_release_$name" --json
    py '
import sys, json
d, depth, D, H = json.load(open(sys.argv[1])), *map(int, sys.argv[2:5])
bn = lambda c: 2 * c           # weight and bias (the statistics are buffers)
stem = 3 * 32 * 49 + bn(32) + 32 * 64 * 9 + bn(64) + 64 * 128 * 9 + bn(128) + 128 * D * 64 + D
E, C, T = 3 * H, 1000, 197
blk = 4 * D + (D * D + D) + (D * 3 * D + 3 * D) + (3 * D * D + D) + D  # norms, proj, fc1, fc2 (ratio 3), scale_channel
total = stem + D + T * D + 2 * D + 2 * (D * C + C)
for i in range(depth):
    qkv = D * D + D if i % 2 else 3 * D * D + 3 * D
    dla = (E * H + bn(E) + E * 9 + bn(E) + H * E + bn(H) + bn(H)) if i % 2 else 0
    total += blk + qkv + dla
got = d["cost"]["params"]
assert got == total, (got, total)
' "$T/out" "$depth" "$D" "$H"
done

# ALS: maps that are not probability rows, and shared layers without a softmax
expect 1 "$A" analyze "$T/t.h5" --metrics als --als-rows refuse --out "$T/a.h5"
has "$T/err" "carried map"; one_line
expect 1 "$A" analyze "$T/t.h5" --metrics als --als-map softmax --out "$T/a.h5"
has "$T/err" "layer 1 (refiner_shared) has no softmax"; one_line
expect 0 "$A" record --model "$M" --images "$FX/inputs.npy" --out "$T/s.h5" --record attn,scores --layers 0,2,3 -q
expect 0 "$A" analyze "$T/s.h5" --metrics als --als-map softmax --out "$T/a.h5"
expect 0 "$A" analyze "$T/t.h5" --metrics als --out "$T/b.h5"
has_wrapped "$T/err" "the Refiner release adds the carried map to the softmax"
has_wrapped "$T/err" "no softmax"

# configs the release cannot mean: one line naming the fix
base='"architecture": "custom", "img_size": 32, "patch_size": 8, "embed_dim": 24, "depth": 2, "num_heads": 3, "num_classes": 5'
refuse() { # JSON NEEDLE
    printf '{%s, %s}\n' "$base" "$1" >"$T/bad.json"
    expect 1 "$A" info "$T/bad.json"; has "$T/err" "$2"; one_line
}
refuse '"attention": [{"type": "refiner_shared"}, {"type": "refiner_release"}]' "put a refiner_release block before it"
refuse '"attention": [{"type": "vanilla"}, {"type": "refiner_shared"}]' "neither refiner_release nor refiner_shared"
refuse '"attention": [{"type": "refiner_release"}, {"type": "refiner_shared", "kernel_size": 4}]' "must be odd"
# 32 px at patch 8: T = 17 tokens, so the widest kernel is 33
refuse '"attention": [{"type": "refiner_release"}, {"type": "refiner_shared", "kernel_size": 35}]' "at most 33 (2 T - 1 for the map's T = 17 tokens"
# less-attention transforms q k^T scores; the release's blocks keep the map they carry
refuse '"attention": [{"type": "refiner_release"}, {"type": "less"}]' "block 0 is refiner_release, which has none of that shape"
printf '{%s, "attention": [{"type": "refiner_release"}, {"type": "refiner_shared"}, {"type": "less"}]}\n' "${base/\"depth\": 2/\"depth\": 3}" >"$T/bad.json"
expect 1 "$A" info "$T/bad.json"; has "$T/err" "block 1 is refiner_shared, which has none of that shape"; one_line
refuse '"adjust_ratio": 2' "adjust_ratio"
refuse '"mlp_scale": 1e-5, "init_values": 1e-5' "keep one"
refuse '"aux_head": 0.5, "global_pool": "avg"' "global_pool \"token\""
refuse '"bn_eps": 1e-3' "no block is refiner_shared"
printf '{"architecture": "swin_tiny_patch4_window7_224", "num_classes": 5, "attention": {"type": "refiner_release"}}\n' >"$T/bad.json"
expect 1 "$A" info "$T/bad.json"; has "$T/err" "refiner_release"; one_line
printf '{"architecture": "swin_tiny_patch4_window7_224", "num_classes": 5, "aux_head": 0.5}\n' >"$T/bad.json"
expect 1 "$A" info "$T/bad.json"; has "$T/err" '"aux_head" is a ViT key'; one_line
# bn_eps of a model whose only BatchNorms are refiner_shared's (no stem) is written back, so a
# checkpoint or trace of it reloads with the same eps
printf '{%s, "bn_eps": 0.001, "attention": [{"type": "refiner_release"}, {"type": "refiner_shared"}]}\n' "$base" >"$T/eps.json"
expect 0 "$A" info "$T/eps.json" --json
py 'import json, sys; assert abs(json.load(open(sys.argv[1]))["bn_eps"] - 1e-3) < 1e-9' "$T/out"
# the built-in's H' = 3 H follows a new num_heads (and a given H' stays)
expect 0 "$A" info "$(printf '{"architecture": "refiner_release_s", "num_heads": 6}' >"$T/h.json"; echo "$T/h.json")"
has "$T/out" "block 1: refiner_shared H'=18 k=3"
# a vanilla block between starts a new chain
printf '{%s, "attention": [{"type": "refiner_release"}, {"type": "vanilla"}, {"type": "refiner_release"}]}\n' "${base/\"depth\": 2/\"depth\": 3}" >"$T/ok.json"
expect 0 "$A" info "$T/ok.json"; has "$T/out" "block 2: refiner_release (starts the carried map)"

# the demo model trains and records; its config round-trips through the checkpoint
expect 0 "$A" train -c "$EXP/models/refiner_release_shapes.json" -d shapes:96 -o "$T/run" --epochs 1 --batch 16 -q
expect 0 "$A" record --model "$T/run/latest" --images "$FX/inputs.npy" --out "$T/r.h5" -q
py '
import sys, h5py, json
f = h5py.File(sys.argv[1], "r")
cfg = json.loads(f.attrs["model_config"])
assert cfg["adjust_ratio"] == 0.5 and abs(cfg["mlp_scale"] - 1e-5) < 1e-12 and cfg["aux_head"] == 0.5, cfg
assert [f["layers/%02d" % l].attrs["mechanism"] for l in range(4)] == ["refiner_release", "refiner_shared"] * 2
' "$T/r.h5"
t_done
