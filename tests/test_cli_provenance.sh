#!/usr/bin/env bash
# test_cli_provenance.sh: nothing misleading, nothing lost. The demo never mixes or deletes
# runs; traces name their weights by resolved path and sha256 and record the BLAS kernels and
# threads; record --skip-bad; train's model overrides; trace format 2 in the Python ecosystem
# (dimension scales through h5py and xarray/h5netcdf, variable-length paths) while format 1
# traces still open everywhere. ATTNSCOPE_OLD (default /work/old/attnscope, when present) writes
# format 1 traces the way attnscope did before.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_provenance prov
OLD=${ATTNSCOPE_OLD:-/work/old/attnscope}
sha() { sha256sum "$1" | cut -d' ' -f1; }
FXA=$(cd "$FX" && pwd)

# ---- 1. demo: refuses a folder that holds anything; --force replaces only the demo's files ----
D="$T/demo"
DEMO=(--epochs 2 --train-images 240 --images 8 --threads 1)
expect 0 "$A" demo --out "$D" "${DEMO[@]}"
has_wrapped "$T/out" "checkpoint $D/train/epoch-002"; has_wrapped "$T/out" "OpenBLAS [A-Za-z0-9]* kernels"
before=$(sha "$D/train/epoch-002/model.safetensors"); run_before=$(sha "$D/run.h5")
echo "my notes" >"$D/notes.txt"; echo "mine" >"$D/train/mine.txt"
expect 1 "$A" demo --out "$D" --epochs 1 --train-images 240 --images 8 --threads 1
has_wrapped "$T/err" "\-\-force"; has_wrapped "$T/err" "\-\-out DIR"; one_line
[ "$(sha "$D/train/epoch-002/model.safetensors")" = "$before" ] && [ "$(sha "$D/run.h5")" = "$run_before" ] \
    && ok || bad "a refused demo changed the earlier run"
expect 0 "$A" demo --out "$D" --epochs 1 --train-images 240 --images 8 --threads 1 --force
has_wrapped "$T/out" "stay as they were"
[ -f "$D/notes.txt" ] && [ -f "$D/train/mine.txt" ] && ok || bad "demo --force removed the user's files"
[ ! -e "$D/train/epoch-002" ] && [ ! -e "$D/train/trace-epoch-002.h5" ] && ok \
    || bad "demo --force left the earlier run's files: $(ls "$D/train")"
# run.h5 names the weights it was made from by resolved path and content, not through latest
py 'import h5py, sys, os
f = h5py.File(sys.argv[1], "r")
assert f.attrs["model_source"] == os.path.realpath(sys.argv[2]), f.attrs["model_source"]
assert f.attrs["model_sha256"] == sys.argv[3], (f.attrs["model_sha256"], sys.argv[3])' \
    "$D/run.h5" "$D/train/epoch-001/model.safetensors" "$(sha "$D/train/epoch-001/model.safetensors")"
# an interrupted demo leaves its partial run; a second demo refuses to mix into it
timeout -s INT 3 "$A" demo --out "$T/demo2" --epochs 40 --train-images 4000 --images 8 --threads 1 \
    >"$T/int.out" 2>"$T/int.err"; rc=$?
[ "$rc" -ne 0 ] && [ -e "$T/demo2/model.json" ] && ok || bad "interrupted demo: rc $rc, $(ls "$T/demo2" 2>&1)"
expect 1 "$A" demo --out "$T/demo2" --epochs 1 --train-images 240 --images 8 --threads 1
has_wrapped "$T/err" "\-\-force"; one_line

# ---- 2. traces name the weights by resolved path and sha256, whatever link was given --------
ln -s "$FXA/vit_cls" "$T/link"
expect 0 "$A" record --model "$T/link" --images "$FX/inputs.npy" --out "$T/p.h5" --threads 1
W="$FXA/vit_cls/model.safetensors"
py 'import h5py, sys, os
f = h5py.File(sys.argv[1], "r")
assert f.attrs["model_source"] == os.path.realpath(sys.argv[2]), f.attrs["model_source"]
assert f.attrs["model_sha256"] == sys.argv[3]' "$T/p.h5" "$W" "$(sha "$W")"
expect 0 "$A" info "$T/p.h5"; has_wrapped "$T/out" "sha256 $(sha "$W")"; has_wrapped "$T/out" "$(readlink -f "$W")"
# a resume with other weights of the same shape is refused (same config is not the same model)
mkdir -p "$T/other"; cp "$FX/vit_cls/config.json" "$T/other/"
"$PY" -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-1] ^= 1; open(sys.argv[2], "wb").write(b)' \
    "$W" "$T/other/model.safetensors"
expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/r.h5" --limit 2 --threads 1
expect 1 "$A" record --model "$T/other" --images "$FX/inputs.npy" --out "$T/r.h5" --resume --threads 1
has_wrapped "$T/err" "sha256"; one_line

# ---- 3. the BLAS kernels and threads: printed, warned about when forced, recorded -------------
expect 0 env OPENBLAS_CORETYPE=Haswell "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" \
    --out "$T/h.h5" --threads 1
has_wrapped "$T/out" "OpenBLAS Haswell kernels (OPENBLAS_CORETYPE=Haswell set), 1 thread"
# Haswell is slower than the best kernels only on an AVX-512 CPU: elsewhere it is no warning
avx512=0; grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && avx512=1
if [ $avx512 = 1 ]; then has_wrapped "$T/err" "warning: OPENBLAS_CORETYPE=Haswell runs Haswell kernels"; has_wrapped "$T/err" "unset it"; fi
expect 0 env -u OPENBLAS_CORETYPE "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" \
    --out "$T/n.h5" --threads 2
lacks "$T/err" "OPENBLAS_CORETYPE"
py 'import h5py, sys
h, n = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert h.attrs["blas_core"] == "Haswell" and h.attrs["blas_forced_by"] == "OPENBLAS_CORETYPE=Haswell", dict(h.attrs)
assert h.attrs["threads"] == 1 and n.attrs["threads"] == 2
assert n.attrs["blas_forced_by"] == "" and n.attrs["blas_core"] != ""
assert "OpenBLAS" in n.attrs["blas_config"] and h.attrs["software"].startswith("attnscope ")' "$T/h.h5" "$T/n.h5"
expect 0 "$A" info "$T/h.h5"; has_wrapped "$T/out" "OpenBLAS Haswell kernels (forced by OPENBLAS_CORETYPE=Haswell), 1 thread"
expect 0 env OPENBLAS_CORETYPE=Haswell "$A" bench --arch "$FX/vit_cls/config.json" --seconds 0.3 --rounds 1 --threads 1
if [ $avx512 = 1 ]; then has_wrapped "$T/out" "WARNING     OPENBLAS_CORETYPE=Haswell runs Haswell kernels"; fi
# train: the header names the kernels; every epoch of state.json records them; the run records
# what it started from; a built-in architecture takes record's model overrides
expect 0 env OPENBLAS_CORETYPE=Haswell "$A" train --config deit_tiny_patch16_224 --num-classes 6 \
    --img-size 16 --data shapes:96:16 --out "$T/dt" --epochs 1 --batch 32 --threads 1
has_wrapped "$T/out" "OpenBLAS Haswell kernels"; if [ $avx512 = 1 ]; then has_wrapped "$T/err" "warning: OPENBLAS_CORETYPE=Haswell"; fi
py 'import json, sys
s = json.load(open(sys.argv[1]))
h = s["history"][0]
assert h["blas_core"] == "Haswell" and h["blas_forced_by"] == "OPENBLAS_CORETYPE=Haswell" and h["threads"] == 1, h
assert h["software"].startswith("attnscope ")
assert s["trained_from"]["init"] == "random(seed=0)" and s["trained_from"]["data"] == "shapes:96:16", s["trained_from"]
c = json.load(open(sys.argv[2]))
assert c["num_classes"] == 6 and c["img_size"] == 16, c' "$T/dt/epoch-001/state.json" "$T/dt/epoch-001/config.json"
expect 1 "$A" train --config deit_tiny_patch16_224 --img-size 16 --data shapes:96:16 --out "$T/dt2" --threads 1
has_wrapped "$T/err" "\-\-num-classes 6"; one_line
# the traces train writes name their checkpoint by path and hash, the first its seed
expect 0 "$A" train --config "$FX/vit_cls/config.json" --num-classes 6 --img-size 32 --data shapes:96 \
    --out "$T/tr" --epochs 1 --batch 32 --threads 1 --record-every 1 --record-images 4 --quiet
py 'import h5py, sys, os
a, b = h5py.File(sys.argv[1] + "/trace-epoch-000.h5", "r"), h5py.File(sys.argv[1] + "/trace-epoch-001.h5", "r")
assert a.attrs["model_source"] == "random(seed=0)" and a.attrs["model_sha256"] == "", dict(a.attrs)
assert b.attrs["model_source"] == os.path.realpath(sys.argv[1] + "/epoch-001/model.safetensors")
assert b.attrs["model_sha256"] == sys.argv[2]' "$T/tr" "$(sha "$T/tr/epoch-001/model.safetensors")"

# ---- 18. record --skip-bad ---------------------------------------------------------------------
mkdir -p "$T/imgs"
for i in 1 2 4 5; do cp "$FX/img.png" "$T/imgs/im$i.png"; done
echo "not an image" >"$T/imgs/im3.png"; head -c 300 "$FX/img.jpg" >"$T/imgs/im6.jpg"
expect 1 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/s.h5" --batch 2 --threads 1
has_wrapped "$T/err" "im3.png"; has_wrapped "$T/err" "\-\-skip-bad"; one_line
expect 0 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/s1.h5" --batch 2 --threads 1 --skip-bad
has_wrapped "$T/out" "recorded 4 images"; has_wrapped "$T/out" "skipped 2 unreadable inputs"
py 'import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert f.attrs["num_skipped"] == 2 and f.attrs["complete"] == 1
assert [p.rsplit("/", 1)[1] for p in f["skipped/path"].asstr()[:]] == ["im3.png", "im6.jpg"]
assert list(f["skipped/input_index"][:]) == [2, 5]
r = list(f["skipped/reason"].asstr()[:])
assert "im3.png" in r[0] and "JPEG" in r[1], r
assert [p.rsplit("/", 1)[1] for p in f["images/path"].asstr()[:]] == ["im1.png", "im2.png", "im4.png", "im5.png"]' "$T/s1.h5"
expect 0 "$A" info "$T/s1.h5"; has_wrapped "$T/out" "skipped     2 unreadable inputs"
# a resume re-derives the list: the skipped inputs between stored ones still fail to load
expect 0 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/s2.h5" --batch 2 --threads 1 --skip-bad --limit 4
expect 0 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/s2.h5" --batch 2 --threads 1 --skip-bad --resume
has_wrapped "$T/out" "skipped 2 unreadable inputs"
py 'import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert f["images/path"].shape == (4,) and list(f["skipped/input_index"][:]) == [2, 5]' "$T/s2.h5"

# ---- 20. format 2 in the Python ecosystem --------------------------------------------------------
expect 0 "$A" record --model "$FX/mech_cls" --images "$FX/inputs.npy" --out "$T/m.h5" --record all --threads 1
py 'import sys, h5py, numpy as np, xarray as xr
path = sys.argv[1]
f = h5py.File(path, "r")
assert f.attrs["format_version"] == 2
groups = list(f.attrs["layer_groups"])
assert groups == ["layers/%02d" % l for l in f.attrs["layers"]] and all(g in f for g in groups), groups
t = h5py.check_string_dtype(f["images/path"].dtype)
assert t is not None and t.length is None and t.encoding == "utf-8", t
n = f["images/path"].shape[0]
for g in groups:
    a = f[g + "/attn"]
    assert a.attrs["axes"] == "image,head,query,key"
    assert [d.label for d in a.dims] == ["image", "head", "query", "key"]
    assert list(a.dims[1][0][:]) == list(a.attrs["heads"])
    ds = xr.open_dataset(path, group=g, engine="h5netcdf")
    assert ds["attn"].dims == ("image", "head", "query", "key"), ds["attn"].dims
    assert ds.sizes["image"] == n and list(ds["head"].values) == list(a.attrs["heads"])
    np.testing.assert_array_equal(ds["attn"].values, a[:])
    if "tokens" in ds: assert ds["tokens"].dims == ("image", "token", "channel")
    if "q" in ds: assert ds["q"].dims == ("image", "head", "token", "qk_channel")
    for v in ("attn_expanded", "attn_convolved"):
        if v in ds: assert ds[v].dims[1] == "expanded_head", ds[v].dims
ims = xr.open_dataset(path, group="images", engine="h5netcdf")
assert ims["logits"].dims == ("image", "class") and ims["rgb"].dims == ("image", "row", "column", "color")
assert str(ims["path"].values[0]).endswith("inputs.npy[0]"), ims["path"].values[0]' "$T/m.h5"

# format 1 traces (the committed fixtures were written before format 2) open everywhere
V1="$T/v1.h5"; cp "$FX/analysis/vit_gap.h5" "$V1"
v1_check() {
    expect 0 "$A" info "$1"; has_wrapped "$T/out" "attnscope-trace v1"
    expect 0 "$A" analyze "$1" --metrics entropy,distance
    expect 0 "$A" plot attention "$1" --image 0 --layer 0 --head 0 -o "$T/v1att.png"
    [ -s "$T/v1att.png" ] && ok || bad "plot wrote nothing for $1"
    printf 'status\n' >"$T/v1.txt"
    expect 0 env SDL_VIDEODRIVER=dummy "$A" view "$1" --script "$T/v1.txt" --screenshot "$T/v1.png"
    has_wrapped "$T/out" "status: image 0/"; [ -s "$T/v1.png" ] && ok || bad "no screenshot of $1"
}
v1_check "$V1"
if [ -x "$OLD" ]; then
    # a format 1 trace from the attnscope of before: read, and resumed with fixed-length paths
    expect 0 "$OLD" record --model "$FX/vit_cls" --images "$T/imgs/im1.png" --out "$T/old.h5"
    v1_check "$T/old.h5"
    mkdir -p "$T/few"; for i in 1 2 4; do cp "$T/imgs/im$i.png" "$T/few/"; done
    expect 0 "$OLD" record --model "$FX/vit_cls" --images "$T/few" --out "$T/old2.h5" --limit 1
    expect 0 "$A" record --model "$FX/vit_cls" --images "$T/few" --out "$T/old2.h5" --resume
    expect 0 env SDL_VIDEODRIVER=dummy "$A" view "$T/old2.h5" --script "$T/v1.txt" --image 2; has_wrapped "$T/out" "status: image 2/"
    py 'import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert f.attrs["format_version"] == 1 and f["images/path"].dtype.kind == "S"
assert [p.decode().rsplit("/", 1)[1] for p in f["images/path"][:]] == ["im1.png", "im2.png", "im4.png"]' "$T/old2.h5"
fi

# ---- linear layers: what ran is recorded and shown; ATTNSCOPE_GEMM's values are checked ----
expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/gemm.h5" --threads 1
if ldd "$A" 2>/dev/null | grep -q libdnnl; then   # built with oneDNN
    want="oneDNN [0-9.]* matmul, prepacked weights"
    # the plain attention of every block of this monolithic ViT runs fused in core/attn_kernel.c
    # where the CPU has AVX-512F (both parentheses as '.': BRE and Python read them differently)
    if grep -qw avx512f /proc/cpuinfo; then
        depth=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_args"]["depth"])' "$FX/vit_cls/config.json")
        want="$want; plain attention fused in attnscope's AVX-512 kernel .$depth of $depth blocks."
    fi
    # a Swin runs no block fused: the name is the linear layers' alone
    expect 0 "$A" record --model "$FX/swin_tiny" --images "$FX/inputs.npy" --out "$T/gemm_swin.h5" --threads 1
    py 'import h5py, sys, re
a = h5py.File(sys.argv[1], "r").attrs["linear_gemm"]
a = a.decode() if isinstance(a, bytes) else a
assert re.fullmatch("oneDNN [0-9.]* matmul, prepacked weights", a), a' "$T/gemm_swin.h5"
else
    want="OpenBLAS"
fi
expect 0 "$A" info "$T/gemm.h5"; has_wrapped "$T/out" "^linear      layers on $want"
py 'import h5py, sys, re
a = h5py.File(sys.argv[1], "r").attrs["linear_gemm"]
a = a.decode() if isinstance(a, bytes) else a
assert re.fullmatch(sys.argv[2], a), a' "$T/gemm.h5" "$want"
expect 0 env ATTNSCOPE_GEMM=openblas "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/gemm_ob.h5" --threads 1
expect 0 "$A" info "$T/gemm_ob.h5"; has "$T/out" "^linear      layers on OpenBLAS$"
# training never packs its weights: its traces say OpenBLAS whatever the process could use
expect 0 "$A" info "$D/train/trace-epoch-000.h5"; has "$T/out" "^linear      layers on OpenBLAS$"
expect 2 env ATTNSCOPE_GEMM=mkl "$A" info "$T/gemm.h5"
one_line; has "$T/err" "ATTNSCOPE_GEMM: unknown GEMM 'mkl'.*onednn.*openblas"

# ---- --precision bf16: bfloat16 products, recorded with what they did to the first image ----
expect 2 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/bf.h5" --precision bf8
one_line; has "$T/err" "--precision bf8: the values are f32 (the default) and bf16"
expect 1 env ATTNSCOPE_GEMM=openblas "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/bf.h5" --precision bf16
one_line; has "$T/err" "--precision bf16 needs the linear layers on oneDNN, and they run on OpenBLAS"
[ ! -e "$T/bf.h5" ] && ok || bad "a refused --precision bf16 left a trace"
if [[ "$want" == oneDNN* ]]; then
    expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/bf.h5" --precision bf16 --threads 1
    has "$T/out" "bfloat16 products; against float32 ones on the first image, logits within"
    expect 0 "$A" info "$T/bf.h5"
    has "$T/out" "^linear      layers on oneDNN .* bfloat16 products"
    has "$T/out" "^precision   bfloat16 products; against float32 ones on the first image"
    py 'import h5py, sys
f = h5py.File(sys.argv[1], "r"); a = f.attrs
assert a["precision"] == "bfloat16", a["precision"]
assert list(a["bf16_check_layers"]) == list(range(3)), a["bf16_check_layers"]
# bfloat16 keeps 8 bits: the logits move, but by far less than their size, and the maps barely
# and more than float32 kernels differ by (1e-6): the products really were bfloat16
assert 1e-4 < a["bf16_output_max_abs_err"] < 0.05 * a["bf16_output_max_abs"], dict(a)
assert 0 < a["bf16_attn_max_abs_err"] < 0.05 and 0 < a["bf16_attn_mean_abs_err"] <= a["bf16_attn_max_abs_err"], dict(a)
assert a["bf16_top1_same"] in (0, 1)' "$T/bf.h5"
    # its float32 twin says float32 and has no check; a resume must keep the precision
    py 'import h5py, sys; a = h5py.File(sys.argv[1], "r").attrs
assert a["precision"] == "float32" and "bf16_check_layers" not in a, dict(a)' "$T/gemm.h5"
    expect 1 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/bf.h5" --resume
    one_line; has "$T/err" "recorded with bfloat16 products; resume with --precision bf16"
    expect 0 "$A" bench --batch 2 --seconds 0.4 --rounds 2 --precision bf16 --json
    py 'import json, sys; j = json.load(open(sys.argv[1]))
assert j["precision"] == "bfloat16" and j["bf16_speedup"] > 0 and j["float32_forward_img_s"] > 0, j
assert 0 <= j["bf16_attn_max_abs_err"] < 0.05, j' "$T/out"
fi
# traces from before the precision attribute and /pool/attn resume as float32, without one
expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/old.h5" --limit 1
py 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f: del f.attrs["precision"]' "$T/old.h5"
expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/old.h5" --resume
has "$T/out" "resumed after 1 images already in the trace"
expect 0 "$A" record --model "$FX/vf_map" --images "$FX/inputs.npy" --out "$T/oldpool.h5" --limit 1
py 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f: del f["pool"]' "$T/oldpool.h5"
expect 0 "$A" record --model "$FX/vf_map" --images "$FX/inputs.npy" --out "$T/oldpool.h5" --resume
expect 0 "$A" info "$T/oldpool.h5"; lacks "$T/out" "^pool "; has "$T/out" "2 complete"
expect 0 "$A" record --model "$FX/vf_map" --images "$FX/inputs.npy" --out "$T/pool.h5"
expect 0 "$A" info "$T/pool.h5"; has "$T/out" "^pool        /pool/attn: the attention pooling's map"
t_done
