#!/usr/bin/env bash
# test_cli_stagemetrics.sh (reference suite): analyze on staged traces (format 3, issue 19 item
# 1). Every stage-aware metric of attnscope against tools/analysis_ref.py, which recomputes them
# plainly from the geometry stored in the trace (dense grid-space maps built from window_token,
# footprint distances, explicit merge transfers), to 1e-6: on tiny Swins recorded from the
# committed fixtures (shifted windows, padded windows, a one-window stage, timm's and
# torchvision's clamps), under the default options, the other reading of every choice, and ALS
# on softmax maps; on a closed-form trace with a subset of windows and timm's roll order. What
# cannot be defined is refused in one line. PVT v2's spatial-reduction layers (conv and pooled
# keys, less-attention) likewise. And single-grid (format 2) results are bit for bit
# those of attnscope before stage-aware metrics (hashes in tests/fixtures/analysis/mono_results.sha256).
#
# STAGEMETRICS_WRITE_HASHES=BINARY rewrites that fixture with BINARY's results (it was written
# with the attnscope of main at cef67de, before this change).
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_stagemetrics stagemetrics
T_SHOW_PY=12
MK=${MKTRACE3:-build/tests/mktrace3}
REF="$(dirname "$0")/../tools/analysis_ref.py"
HASHES="$FX/analysis/mono_results.sha256"
# the other reading of each choice that applies to staged traces (analysis_ref.py STAGED_VARIANT)
VARIANT="--als-window 5 --qk-thresholds 0.25,1.5 --fusion max --entropy-normalize
 --distance-prefix renormalise --als-rows raw --distance centre --qk-scale raw --diag-map attn
 --cka-batch 4 --cka-hsic biased"
# the same without rollout's and evolution's options, for runs whose --metrics leaves those out
# (their options would be refused)
VARIANT_NO_RE="--als-window 5 --qk-thresholds 0.25,1.5 --entropy-normalize
 --distance-prefix renormalise --als-rows raw --distance centre --qk-scale raw --diag-map attn"

# ---- 1. single-grid results: bit for bit as before -------------------------------------------
MONO_VAR="--als-window 5 --als-thresholds 0.3,0.5 --qk-thresholds 0.25,1.5 --fusion max
 --discard 0.3 --entropy-normalize --distance-prefix renormalise --als-prefix include --als-rows raw
 --distance centre --qk-scale raw --diag-map attn --cka-batch 4 --cka-hsic biased"
mono_hashes() { # BINARY: one line per (trace, options, metric): the SHA-256 of its datasets
    for m in mech_cls deit_dist vit_gap; do
        # shellcheck disable=SC2086
        "$1" analyze "$FX/analysis/$m.h5" --out "$T/$m.d.h5" --per-image -q --threads 2 >/dev/null 2>&1 &&
        "$1" analyze "$FX/analysis/$m.h5" --out "$T/$m.v.h5" --per-image -q --threads 2 $MONO_VAR >/dev/null 2>&1 &&
        "$1" analyze "$FX/analysis/$m.h5" --out "$T/$m.s.h5" -q --threads 1 --metrics als,distance \
            --als-map softmax --als-rows refuse >/dev/null 2>&1 || return 1
    done
    "$PY" -c 'import h5py, hashlib, sys
for m in ("mech_cls", "deit_dist", "vit_gap"):
    for k in "dvs":
        f = h5py.File("%s/%s.%s.h5" % (sys.argv[1], m, k), "r")
        for metric in sorted(f["analysis"]):
            h, names = hashlib.sha256(), []
            f["analysis/" + metric].visit(names.append)
            for n in sorted(names):
                d = f["analysis/%s/%s" % (metric, n)]
                if isinstance(d, h5py.Dataset):
                    h.update(n.encode() + d[()].tobytes())
            print(m, k, metric, h.hexdigest())' "$T"
}
if [ -n "${STAGEMETRICS_WRITE_HASHES:-}" ]; then
    mono_hashes "$STAGEMETRICS_WRITE_HASHES" >"$HASHES" && echo "wrote $HASHES" >&2
    exit 0
fi
mono_hashes "$A" >"$T/hashes" && ok || bad "analyze failed on a single-grid fixture trace"
if diff "$HASHES" "$T/hashes" >"$T/diff"; then ok; else bad "single-grid results changed: $(head -c 600 "$T/diff")"; fi
[ "$(wc -l <"$T/hashes")" -ge 45 ] && ok || bad "too few hashed metrics: $(wc -l <"$T/hashes")"

# ---- 2. tiny Swins recorded from the fixtures, against the numpy reference --------------------
"$PY" -c 'import numpy as np, sys
r = np.random.default_rng(3)
x = r.standard_normal((5, 3, 32, 32)).astype(np.float32)
yy, xx = np.mgrid[0:32, 0:32] / 31.0
for k in range(5):   # structure, so that attention is not uniform noise
    x[k] += 2 * np.sin((k + 1) * 3 * xx + 2 * yy)[None]
np.save(sys.argv[1] + "/in32.npy", x)
np.save(sys.argv[1] + "/in16.npy", np.ascontiguousarray(x[:, :, ::2, ::2]))' "$T" && ok || bad "inputs"
for m in swin_tiny:in32 swin_pad:in16 swin_pad_tv:in16; do
    model=${m%%:*} in=${m##*:}
    expect 0 "$A" record --model "$FX/$model" --images "$T/$in.npy" --out "$T/$model.h5" \
        --record attn,scores,q,k,tokens --threads 1 -q
    expect 0 "$A" analyze "$T/$model.h5" --out "$T/$model.d.h5" -q
    expect 0 "$PY" "$REF" compare "$T/$model.h5" "$T/$model.d.h5" default
    has "$T/out" "^rollout .*map/mean"
    has "$T/out" "^evolution .*cka_images "
    # shellcheck disable=SC2086
    expect 0 "$A" analyze "$T/$model.h5" --out "$T/$model.v.h5" -q $VARIANT
    expect 0 "$PY" "$REF" compare "$T/$model.h5" "$T/$model.v.h5" variant
    has "$T/out" "^diag .*diagonality/mean"
    has "$T/out" "^similarity .*pooled/mean"
    expect 0 "$A" analyze "$T/$model.h5" --out "$T/$model.s.h5" -q --metrics als --als-map softmax --als-prefix include
    expect 0 "$PY" "$REF" compare "$T/$model.h5" "$T/$model.s.h5" softmax
    has "$T/out" "^als .*score/mean"
done
# what the results say about their layout
py 'import h5py, numpy as np, sys
f = h5py.File(sys.argv[1], "r")
d = f["analysis/distance/distance"]
assert d.attrs["axes"] == "layer,head" and list(d.attrs["head"]) == [0, 1, 2, 3], dict(d.attrs)
m = d["mean"][:]
assert np.isnan(m[0, 2:]).all() and not np.isnan(m[0, :2]).any() and not np.isnan(m[2]).any(), m
s = f["analysis/distance/stage_mean"]
assert s.attrs["axes"] == "stage" and list(s.attrs["stage"]) == [0, 1], dict(s.attrs)
r = f["analysis/rollout/map"]
assert list(r.attrs["grid"]) == [16, 16] and r["per_image"].shape == (5, 4, 256), r["per_image"].shape
assert np.allclose(r["per_image"][:].sum(-1), 1), "rollout rows are distributions over the first grid"
sim = f["analysis/similarity/head_mean"]["mean"][:]
assert sim[1, 0, 0] == 1 and np.isnan(sim[1, 1, 0]) and np.isnan(sim[1, 2, 0]), "W with W, never W with SW"
po = f["analysis/similarity/pooled"]["mean"][:]
assert not np.isnan(po).any() and abs(po[1, 3, 3] - 1) < 1e-12, "pooled: every pair"
assert "distance=pixel" in f["analysis/distance"].attrs["parameters"]
q = f["analysis/qk/q_stage"]
assert q.attrs["axes"] == "stage,threshold"' "$T/swin_tiny.d.h5"
# figures of staged results: each layer's stage and the model's depth are in the results, so the
# figures against depth draw stage boundaries, and models of different depths share one figure
# against relative depth (ViT against Swin); the map figures still refuse staged inputs
py 'import h5py, sys; f = h5py.File(sys.argv[1], "r")
assert list(f.attrs["layer_stage"]) == [0, 0, 1, 1], f.attrs["layer_stage"]
assert int(f.attrs["model_depth"]) == 4' "$T/swin_tiny.d.h5"
for fig in distance entropy adjacent similarity als qk cka; do
    expect 0 "$A" plot $fig "$T/swin_tiny.d.h5" -o "$T/f_$fig.png" --dpi 72
    [ -s "$T/f_$fig.png" ] && ok || bad "plot $fig on staged results wrote nothing"
done
expect 0 "$A" analyze "$FX/analysis/mech_cls.h5" --out "$T/vit.d.h5" -q --metrics distance
expect 0 "$A" plot distance "$T/vit.d.h5" "$T/swin_tiny.d.h5" --labels ViT,Swin -o "$T/f2.pdf"
[ -s "$T/f2.pdf" ] && ok || bad "a ViT and a Swin on one distance figure"
expect 0 "$A" analyze "$T/swin_tiny.h5" --metrics rollout -q   # beside the trace: the figure reads its image
expect 0 "$A" plot rollout "$T/swin_tiny.h5" -o "$T/f_rollout.png" --dpi 72
[ -s "$T/f_rollout.png" ] && ok || bad "plot rollout on a staged trace wrote nothing"
# the map figures draw the staged trace itself (tests/test_keymap.c), and refuse its results file
expect 0 "$A" plot attention "$T/swin_tiny.h5" --layer 1 -o "$T/f_att.png" --dpi 72
[ -s "$T/f_att.png" ] && ok || bad "plot attention on a staged trace wrote nothing"
expect 1 "$A" plot attention "$T/swin_tiny.d.h5" -o "$T/f.png"
has "$T/err" "the attention figure draws recorded maps and images: give the trace, not a results file"
one_line
[ ! -e "$T/f.png" ] && ok || bad "a refused figure left f.png"
# swin_pad's stage 1 is one 4 x 4 window (timm clamp): its diag is the global value, so the
# per-window mean equals the sum over that one window (the reference computes it from dense maps)
expect 0 "$A" analyze "$T/swin_pad.h5" --metrics entropy --csv "$T/csv" --out "$T/csv.h5" -q
has "$T/csv/entropy.stage_mean.csv" "^stage,mean,std"
has "$T/csv/entropy.stage_mean.csv" "^1,"

# ---- 3. closed-form trace: roll_first, a subset of windows, float16 --------------------------
expect 0 "$MK" "$T/c.h5" roll_first 0,1,2,3 all 0,3 f16 4
expect 0 "$A" analyze "$T/c.h5" --metrics als,similarity,qk,distance,entropy --out "$T/c.d.h5" -q
expect 0 "$PY" "$REF" compare "$T/c.h5" "$T/c.d.h5" default
# shellcheck disable=SC2086
expect 0 "$A" analyze "$T/c.h5" --metrics als,similarity,qk,distance,entropy,diag --out "$T/c.v.h5" -q $VARIANT_NO_RE
expect 0 "$PY" "$REF" compare "$T/c.h5" "$T/c.v.h5" variant
# without --metrics, what cannot run is skipped with its reason; named, it is an error, one line
expect 0 "$A" analyze "$T/c.h5" --out "$T/c.all.h5"
has "$T/err" "rollout multiplies every layer.s map, but the trace holds 4 of 6 layers: record with --layers all"
expect 0 "$MK" "$T/w.h5" pad_first all all 0 f32 2
expect 1 "$A" analyze "$T/w.h5" --metrics rollout --out "$T/c.r.h5"
has "$T/err" "rollout needs every query row of every window, but layer 0 holds a subset of its windows: record with --windows all --query-rows all"
one_line
expect 0 "$MK" "$T/full.h5"
expect 1 "$A" analyze "$T/full.h5" --metrics rollout --discard 0.2 --out "$T/c.r.h5"
has "$T/err" "--discard 0.2: on staged traces vit-explain's rule would rank the structural zeros"
one_line
[ ! -e "$T/c.r.h5" ] && ok || bad "a refused analyze left results"
# ---- 4. signed maps (CaiT's talking heads): no distribution, so left out, never a number -----
expect 0 "$A" record --model "$FX/cait_tiny" --images "$FX/inputs.npy" --out "$T/cait.h5" --layers 0,1 -q
expect 0 "$A" analyze "$T/cait.h5" --metrics entropy,distance --out "$T/cait.d.h5"
has "$T/out" "0      0  left out (negative map entries: notes)"
py 'import h5py, math, sys
e = h5py.File(sys.argv[1])["analysis/entropy"]
assert list(e["negative_maps"]["mean"][:]) == [1.0, 1.0], e["negative_maps"]["mean"][:]
assert all(math.isnan(v) for v in e["head_mean"]["mean"][:]), e["head_mean"]["mean"][:]' "$T/cait.d.h5"
expect 0 "$PY" "$REF" compare "$T/cait.h5" "$T/cait.d.h5" default
# every CaiT layer: class-attention rows (entropy over [cls; patches], no grid query for distance
# and ALS, similarity of the class rows); rollout is refused on the signed talking-heads maps
expect 0 "$A" record --model "$FX/cait_tiny" --images "$FX/inputs.npy" --out "$T/cait2.h5" --record all --dtype f32 -q
expect 0 "$A" analyze "$T/cait2.h5" --out "$T/cait2.d.h5"
has "$T/err" "rollout composes row-stochastic maps, but layer 0's are signed (CaiT's talking heads"
has "$T/out" "2      1  no grid-token query (class attention)"
expect 0 "$PY" "$REF" compare "$T/cait2.h5" "$T/cait2.d.h5" default
# shellcheck disable=SC2086
expect 0 "$A" analyze "$T/cait2.h5" --out "$T/cait2.v.h5" -q $VARIANT
expect 0 "$PY" "$REF" compare "$T/cait2.h5" "$T/cait2.v.h5" variant
expect 1 "$A" analyze "$T/cait2.h5" --metrics rollout --out "$T/cait2.r.h5"
one_line
# a CaiT without talking heads: the class row composed with the self-attention rollout
"$PY" -c 'import sys, json; sys.path.insert(0, sys.argv[3]); import safetensors_io as st
d = {k: v for k, v in st.load(sys.argv[1] + "/model.safetensors").items() if ".proj_l." not in k and ".proj_w." not in k}
st.save(sys.argv[2] + "/model.safetensors", d)
c = json.load(open(sys.argv[1] + "/config.json")); c["model_args"]["talking_heads"] = False
json.dump(c, open(sys.argv[2] + "/config.json", "w"))' "$FX/cait_tiny" "$(mkdir -p "$T/cnt" && echo "$T/cnt")" \
    "$(dirname "$0")/../tools" && ok || bad "a CaiT without talking heads"
expect 0 "$A" record --model "$T/cnt" --images "$FX/inputs.npy" --out "$T/cnt.h5" --record all --dtype f32 -q
expect 0 "$A" analyze "$T/cnt.h5" --out "$T/cnt.d.h5" -q
expect 0 "$PY" "$REF" compare "$T/cnt.h5" "$T/cnt.d.h5" default
has "$T/out" "^rollout .*map/mean"
py 'import h5py, numpy as np, sys
f = h5py.File(sys.argv[1], "r")["analysis"]
r = f["rollout/map"]["per_image"][:]
assert r.shape[1:] == (4, 16) and np.allclose(r[:, :2].sum(-1), 1), r.sum(-1)
assert (r[:, 2:].sum(-1) < 1 - 1e-6).all(), "the class token keeps a share of the class rows"
assert list(f["entropy/valid_keys"]["mean"][:]) == [16, 16, 17, 17]' "$T/cnt.d.h5"

# ---- 5. spatial-reduction layers (PVT v2): queries over reduced keys -------------------------
# pvt_tiny: 4 x 4, 2 x 2 and 1 x 1 convs (58 px: the 4 x 4 conv drops the last 3 tokens of each
# axis); pvt_li: 7 x 7 pools over 10 x 10 and 5 x 5 grids (unequal and overlapping bins);
# pvt_less: less-attention layers (diag on their scores: R = 2 left out, R = 1 square)
for m in pvt_tiny:pvt_tiny/inputs58.npy pvt_li:pvt_li/inputs40.npy pvt_less:inputs.npy; do
    model=${m%%:*} in=${m#*:}
    expect 0 "$A" record --model "$FX/$model" --images "$FX/$in" --out "$T/$model.h5" --record all --dtype f32 --threads 1 -q
    expect 0 "$A" analyze "$T/$model.h5" --out "$T/$model.d.h5" -q
    expect 0 "$PY" "$REF" compare "$T/$model.h5" "$T/$model.d.h5" default
    has "$T/out" "^rollout .*map/mean"
    # shellcheck disable=SC2086
    expect 0 "$A" analyze "$T/$model.h5" --out "$T/$model.v.h5" -q $VARIANT
    expect 0 "$PY" "$REF" compare "$T/$model.h5" "$T/$model.v.h5" variant
    has "$T/out" "^similarity .*pooled/mean"
    expect 0 "$A" analyze "$T/$model.h5" --out "$T/$model.s.h5" -q --metrics als --als-map softmax
    expect 0 "$PY" "$REF" compare "$T/$model.h5" "$T/$model.s.h5" softmax
done
has "$T/out" "^als .*score/mean"
py 'import h5py, numpy as np, sys
t = h5py.File(sys.argv[1], "r")["analysis"]
assert list(t["entropy/valid_keys"]["mean"][:]) == [9, 16, 16, 16]
assert np.isnan(t["diag/diagonality_head_mean"]["mean"][:3]).all() and not np.isnan(t["diag/diagonality_head_mean"]["mean"][3])
l = h5py.File(sys.argv[2], "r")["analysis"]
assert list(l["entropy/valid_keys"]["mean"][:]) == [49, 49], "a pool has 49 keys on a 5 x 5 grid too"
r = l["rollout/map"]["per_image"][:]
assert np.allclose(r.sum(-1), 1), "rollout rows stay distributions through reduced keys"
s = h5py.File(sys.argv[3], "r")["analysis/diag/diagonality_head_mean"]["mean"][:]
assert np.isnan(s[:4]).all() and not np.isnan(s[4]), s
# across the strided conv (8x8 -> 4x4) every fine token is in one 2x2 cell: the last row and
# column of the first grid still get rollout weight from the last stage (a centre rule left them out)
r = h5py.File(sys.argv[3], "r")["analysis/rollout/map"]["per_image"][:, 4].reshape(-1, 8, 8)
assert (r[:, 7, :].sum(-1) > 1e-3).all() and (r[:, :, 7].sum(-1) > 1e-3).all(), r[0]' "$T/pvt_tiny.v.h5" "$T/pvt_li.d.h5" "$T/pvt_less.d.h5"
t_done
