#!/usr/bin/env bash
# test_cli_pvt.sh: PVT v2 as a user meets it (issue 17): info prints the published parameters and
# MACs of the built-ins; a PVT v2 trace (format 3) records spatial-reduction layers, queries over
# the reduced keys, with the key grid and key centres in pixels (checked against the fixture's
# reference); the viewer, metrics and figures refuse those layers in one line, writing nothing.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_pvt pvt

# info: the published figures to the printed digit (b2_li: without the 1x1 conv of its pooled keys)
for x in "pvt_v2_b0 3.67 0.57" "pvt_v2_b1 14.01 2.11" "pvt_v2_b2 25.36 4.03"; do
    set -- $x
    expect 0 "$A" info "$1"
    has "$T/out" "^$2 M parameters; $3 GMACs per image"
done
expect 0 "$A" info pvt_v2_b2_li.in1k
has "$T/out" "^22.55 M parameters; 3.89 GMACs"
has_wrapped "$T/out" "Linear SRA: without the 1x1 conv of attn.sr on the pooled keys (0.072 G), 3.82 GMACs"
has "$T/out" "^3+conv   7x7       512     8      3 keys pool 7x7"
expect 0 "$A" info --json pvt_v2_b0
py 'import json,sys; j=json.load(open(sys.argv[1])); c=j["cost"]
assert j["family"] == "pvt_v2" and j["sr_ratios"] == [8, 4, 2, 1] and j["conv_ln_eps"] < 2e-5, j
assert [s["keys"] for s in c["stages"]] == [49] * 4 and round(c["params"] / 1e6, 2) == 3.67, c["stages"]
assert c["components"]["attn.sr"]["params"] > 0' "$T/out"

# a trace of the tiny fixture: SRA layers with their key grids
expect 0 "$A" record --model "$FX/pvt_tiny" --images "$FX/pvt_tiny/inputs58.npy" --out "$T/p.h5" --record all --dtype f32
expect 0 "$A" info "$T/p.h5"
has "$T/out" "staged (pvt_v2)"
has_wrapped "$T/out" "layer 0: stage 0, 15x15 tokens every 4 px, width 16, heads 1; spatial reduction: sr_ratio 4, 3x3 keys every 16 px"
py 'import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[3]); import safetensors_io as st
f = h5py.File(sys.argv[1], "r"); e = st.load(sys.argv[2] + "/expected.safetensors")
g = st.load(sys.argv[2] + "/geom.safetensors")
for l in range(4):
    L = f["layers/%02d" % l]
    assert L.attrs["scope"] == "sra" and list(L.attrs["key_grid"]) == list(g["key_grid.%d" % l][:2]), dict(L.attrs)
    assert np.allclose(L.attrs["key_centre_px"], g["key_centre.%d" % l]), (l, L.attrs["key_centre_px"])
    assert np.isclose(L.attrs["key_offset_px"] + L.attrs["key_stride_px"] * np.arange(L.attrs["key_grid"][0]), g["key_centre.%d" % l]).all()
    assert ("sr_ratio" in L.attrs) and "sr_pool" not in L.attrs and L.attrs["num_keys"] == np.prod(L.attrs["key_grid"])
    for q in ("attn", "scores", "q", "k", "tokens"):
        a, w = L[q][...], e["%s.%d" % (q, l)]
        assert a.shape == w.shape and np.abs(a - w).max() < 1e-4, (l, q, a.shape, w.shape)
    assert L["k"].attrs["axes"] in ("image,head,key,channel", b"image,head,key,channel")
assert f["layers/00/attn"].shape == (2, 1, 225, 9) and f["layers/00/k"].shape == (2, 1, 9, 16)' "$T/p.h5" "$FX/pvt_tiny" "$(dirname "$0")/../tools"
expect 0 "$A" record --model "$FX/pvt_li" --images "$FX/pvt_li/inputs40.npy" --out "$T/l.h5" --layers 0
py 'import sys, h5py; L = h5py.File(sys.argv[1], "r")["layers/00"]
assert L.attrs["sr_pool"] == 7 and "sr_ratio" not in L.attrs and list(L.attrs["key_grid"]) == [7, 7]
assert L["attn"].shape == (2, 2, 100, 49), L["attn"].shape
c = L.attrs["key_centre_px"]; assert abs(c[0] - 2.5) < 1e-6 and abs(c[1] - 6.5) < 1e-6, c' "$T/l.h5"

# every layer of the linear fixture: stage 1's 5x5 grid is pooled to 7x7 keys, more keys than
# tokens (the bins overlap): recorded, read back by info and the viewer
expect 0 "$A" record --model "$FX/pvt_li" --images "$FX/pvt_li/inputs40.npy" --out "$T/la.h5"
expect 0 "$A" info "$T/la.h5"
has_wrapped "$T/out" "5x5 tokens every 8 px"
py 'import sys, h5py; L = h5py.File(sys.argv[1], "r")["layers/01"]
assert list(L.attrs["key_grid"]) == [7, 7] and L["attn"].shape == (2, 2, 25, 49), L["attn"].shape' "$T/la.h5"
# the viewer draws each layer over its key grid (tests/test_view_pvt.c checks the drawing)
printf 'status\n' >"$T/s.txt"
SDL_VIDEODRIVER=dummy expect 0 "$A" view "$T/la.h5" --layer 1 --script "$T/s.txt"
has "$T/out" "spatial reduction, grid 5 x 5, keys 7 x 7"
# analyze reads the SRA layers (tests/test_cli_stagemetrics.sh checks every metric against numpy)
expect 0 "$A" analyze "$T/p.h5" --metrics entropy,distance -q
py 'import h5py, sys; f = h5py.File(sys.argv[1], "r")
v = f["analysis/entropy/valid_keys"]["mean"][:]; assert list(v) == [9, 16, 16, 16], v
assert (f["analysis/distance/head_mean"]["mean"][:] > 0).all()' "$T/p.analysis.h5"
expect 2 "$A" record --model "$FX/pvt_tiny" --images "$FX/pvt_tiny/inputs58.npy" --out "$T/w.h5" --windows 0
has "$T/err" "PVT v2's attention is spatial reduction"
one_line
# a small input the overlapping stem still maps to a grid (k5 s4 p2 on 9 px: 3x3, then 2x2): not
# Swin's "too small for the merges" (the old check divided img_size by patch_size)
printf '%s' '{"architecture": "custom", "family": "pvt_v2", "img_size": 9, "patch_kernel": 5, "embed_dims": [8, 16], "depths": [1, 1], "num_heads": [1, 1], "mlp_ratios": [2, 2], "sr_ratios": [1, 1], "num_classes": 3}' >"$T/p9.json"
expect 0 "$A" info "$T/p9.json"; has "$T/out" "3x3 grid"
t_done
