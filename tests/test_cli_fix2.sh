#!/usr/bin/env bash
# test_cli_fix2.sh: defects a review of issue 15 left open. Maps with negative entries (LSLA's
# outer bias, Refiner) are not probability rows: als and distance leave such layers out with a
# note naming them and the fix, and count the rows they drop; notes added in a metric's finish()
# reach the terminal; the experiments' pinned choices; analysis_ref.py compare on a trace
# without block outputs.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_fix2 fix2
T_SHOW_HAS=600
MECH="$FX/analysis/mech_cls.h5"   # layer 5 Refiner, layer 8 LSLA with outer bias: negative entries

# ---- 1. negative entries: the layer is left out, named with the fix; ALS and distance stay in range
expect 0 "$A" analyze "$MECH" --metrics als,distance --out "$T/n.h5"
has "$T/err" "note: als: layers 5, 8 left out: maps with negative entries"
has "$T/err" "als: layers 5, 8 left out.*--als-map softmax"
has "$T/err" "note: distance: layers 5, 8 left out: maps with negative entries"
has "$T/out" "8  left out (negative map entries"
py 'import h5py, numpy as np, sys
f = h5py.File(sys.argv[1], "r")
for m, v in (("als", "score"), ("distance", "distance")):
    g = f["analysis/" + m]
    assert g.attrs["version"] == 3, (m, g.attrs["version"])
    s = g[v + "/mean"][()]
    assert np.isnan(s[[5, 8]]).all() and not np.isnan(np.delete(s, [5, 8], 0)).any(), (m, s)
    assert list(g["negative_maps/mean"][()]) == [0, 0, 0, 0, 0, 1, 0, 0, 1], m
    assert (g["negative_maps/count"][()] == 5).all() and (g[v + "/count"][()][[5, 8]] == 0).all()
    assert np.nansum(g["dropped_rows/mean"][()]) == 0, m
    assert "negative" in g.attrs["definition"] and "left out" in g.attrs["notes"]
s = f["analysis/als/score/mean"][()]
assert np.nanmin(s) >= 0 and np.nanmax(s) <= 1, s
d = f["analysis/distance/distance/mean"][()]
assert np.nanmax(d) <= 4 * 8 * 2 ** 0.5, d   # within the diagonal of the 4 x 4 grid of 8 px patches
' "$T/n.h5"
# raw and distance renormalise leave them out too; refuse stops at plan
expect 0 "$A" analyze "$MECH" --metrics als,distance --als-rows raw --distance-prefix renormalise --out "$T/r.h5"
has "$T/err" "note: als: layers 5, 8 left out"
has "$T/err" "note: distance: layers 5, 8 left out"
py 'import h5py, numpy as np, sys
f = h5py.File(sys.argv[1], "r")
assert np.isnan(f["analysis/als/score/mean"][()][[5, 8]]).all()
assert np.isnan(f["analysis/distance/distance/mean"][()][[5, 8]]).all()' "$T/r.h5"
expect 1 "$A" analyze "$MECH" --metrics als --als-rows refuse --out "$T/x.h5"
one_line; has "$T/err" "als: layer 5: Refiner"; has "$T/err" "--als-map softmax"
# the softmax of the scores is a probability row: every layer is scored, no note
expect 0 "$A" analyze "$MECH" --metrics als --als-map softmax --out "$T/s.h5"
lacks "$T/err" "left out"
py 'import h5py, numpy as np, sys
g = h5py.File(sys.argv[1], "r")["analysis/als"]
s = g["score/mean"][()]
assert not np.isnan(s).any() and s.min() >= 0 and s.max() <= 1, s
assert (g["negative_maps/mean"][()] == 0).all()' "$T/s.h5"

# a patch row without mass (zeroed here) is dropped and counted, in the results and a note
cp "$FX/analysis/vit_gap.h5" "$T/z.h5"
py 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    d = f["layers/00/attn"]
    a = d[0]
    a[1, 5, :] = 0
    d[0] = a' "$T/z.h5"
expect 0 "$A" analyze "$T/z.h5" --metrics als,distance --distance-prefix renormalise --out "$T/z_res.h5"
has "$T/err" "note: als: 0.25 patch query rows per image without positive weight left out (layer 0; dropped_rows)"
has "$T/err" "note: distance: 0.25 patch query rows per image without positive weight left out (layer 0"
py 'import h5py, numpy as np, sys
f = h5py.File(sys.argv[1], "r")
for m in ("als", "distance"):
    d = f["analysis/%s/dropped_rows/per_image" % m][()] if "analysis/%s/dropped_rows/per_image" % m in f else None
    mean = f["analysis/%s/dropped_rows/mean" % m][()]
    assert mean[0, 1] == 0.25 and mean.sum() == 0.25, (m, mean)' "$T/z_res.h5"

# ---- 3. the shipped experiments use the papers' defaults (the slow suite runs them) ------------
EXP="$(dirname "$0")/../experiments"
py 'import json, sys
s = json.load(open(sys.argv[1] + "/saturation.json"))
assert "scores" in s["record"].split(","), s["record"]      # LaViT: diag on the scores
assert "diag_map" not in s.get("analyze", {}) and "metrics" not in s.get("analyze", {}), s.get("analyze")
l = json.load(open(sys.argv[1] + "/locality.json"))
assert "als_window" not in l["analyze"] or "als_window" in l["description"], l["analyze"]' "$EXP"

# ---- 4. analysis_ref.py compare skips what the trace lacks (no block outputs: no evolution) -------
expect 0 "$A" record --model "$FX/vit_gap" --images "$FX/inputs.npy" --record attn,scores --out "$T/noblk.h5"
expect 0 "$A" analyze "$T/noblk.h5" --out "$T/noblk_res.h5"
expect 0 "$PY" "$(dirname "$0")/../tools/analysis_ref.py" compare "$T/noblk.h5" "$T/noblk_res.h5"
has "$T/out" "evolution   skipped: the trace lacks tokens"
has "$T/out" "qk          skipped: the trace lacks q,k"
has "$T/out" "^als .*score/mean"

# ---- 5. --cka-hsic biased: Kornblith et al.'s centred HSIC, recorded in the parameters --------
MC="$FX/analysis/mech_cls.h5"
expect 0 "$A" analyze "$MC" --metrics evolution --cka-hsic biased --out "$T/hb.h5"
expect 0 "$A" analyze "$MC" --metrics evolution --out "$T/hu.h5"
py 'import h5py, numpy as np, sys
b, u = (h5py.File(p, "r")["analysis/evolution"] for p in sys.argv[1:3])
assert "hsic=biased" in b.attrs["parameters"] and "hsic=unbiased" in u.attrs["parameters"]
cb, cu = b["cka/mean"][()], u["cka/mean"][()]
assert np.allclose(np.diag(cb), 1) and not np.allclose(cb, cu), (cb, cu)' "$T/hb.h5" "$T/hu.h5"
expect 2 "$A" analyze "$MC" --metrics evolution --cka-hsic centred --out "$T/hx.h5"
one_line; has "$T/err" "cka-hsic"

# ---- 6. record: a refused --resume changes nothing; options that would do nothing are refused ----
expect 0 "$A" record --model "$FX/mech_cls" --images "$FX/img.png" --out "$T/base.h5" --threads 1 -q
cp "$T/base.h5" "$T/r.h5"
# other images: refused before anything in the trace changes (it stays complete, byte for byte)
expect 1 "$A" record --model "$FX/mech_cls" --images "$FX/img.jpg" --out "$T/r.h5" --resume
one_line; has "$T/err" "r.h5: --resume: image 0 in the trace is .*img.png.*resume with the same --images"
if cmp -s "$T/base.h5" "$T/r.h5"; then ok; else bad "a refused resume (other images) changed the trace"; fi
# another storage: refused, naming the trace's; without --compress a resume keeps the trace's
expect 1 "$A" record --model "$FX/mech_cls" --images "$FX/img.png" --out "$T/r.h5" --resume --compress deflate:9
one_line; has "$T/err" "r.h5: stored with compression none; --compress deflate:9 cannot change it on --resume: leave --compress out"
if cmp -s "$T/base.h5" "$T/r.h5"; then ok; else bad "a refused resume (--compress) changed the trace"; fi
expect 0 "$A" record --model "$FX/mech_cls" --images "$FX/inputs.npy" --out "$T/c.h5" --compress deflate:5 --limit 1 -q
expect 0 "$A" record --model "$FX/mech_cls" --images "$FX/inputs.npy" --out "$T/c.h5" --resume -q
# the resumed image's records go through the trace's filter (they were raw chunks, unreadable)
if command -v h5dump >/dev/null; then
    h5dump -d /layers/00/attn -s "1,0,0,0" -c "1,1,1,1" "$T/c.h5" >"$T/dump" 2>&1
    has "$T/dump" "(1,0,0,0): [0-9]"
fi
expect 1 "$A" record --model "$FX/mech_cls" --images "$FX/inputs.npy" --out "$T/c.h5" --resume --compress deflate:4
one_line; has "$T/err" "stored with compression deflate-5+shuffle; --compress deflate:4"
# selections that nothing recorded would use
expect 2 "$A" record --model "$FX/mech_cls" --images "$FX/img.png" --out "$T/q.h5" --record tokens --query-rows prefix
one_line; has "$T/err" "--query-rows prefix: .*none is recorded.*leave --query-rows out"
expect 2 "$A" record --model "$FX/mech_cls" --images "$FX/img.png" --out "$T/q.h5" --record tokens --heads 0
one_line; has "$T/err" "--heads 0: no recorded quantity is kept per head.*leave --heads out"
expect 2 "$A" record --model "$FX/swin_tiny" --images "$FX/inputs.npy" --out "$T/q.h5" --record tokens --windows 0
one_line; has "$T/err" "--windows 0: no recorded quantity is kept per window.*leave --windows out"
expect 2 "$A" record --model "$FX/vit_cls" --images "$FX/img.png" --out "$T/q.h5" --record internals
one_line; has "$T/err" "--record internals: no block of this model (.*vit_cls.*) has a mechanism with intermediate maps"
[ -e "$T/q.h5" ] && bad "a refused record left $T/q.h5" || ok
# prefix rows with tokens: info says the tokens keep every row; cls is prefix's documented alias
expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/img.png" --out "$T/p.h5" --record attn,tokens --query-rows cls -q
expect 0 "$A" info "$T/p.h5"
has "$T/out" "query rows: prefix tokens only in the maps; tokens, q and k keep every token"
expect 0 "$A" record --help
has "$T/out" "all, prefix (or cls, the same)"

t_done
