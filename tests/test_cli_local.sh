#!/usr/bin/env bash
# test_cli_local.sh: H-MaiT's local maps through the program (core/local.h, docs/trace-format.md
# "Local maps"): a global stage whose heads are all masked stores each map as its R x R
# neighbourhoods plus one background weight per query; --dense-maps stores the T x T maps. The
# local records, expanded here in Python from the documented layout alone, equal the dense ones;
# analyze, plot and info read either the same; the option is refused where it would do nothing.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_local local

M="$FX/swin_hmait"   # stage 0: 14x14 tokens, 2 heads with 3x3 masks; stage 1: 1 masked head of 4
expect 0 "$A" record --model "$M" --images "$FX/inputs28.npy" --out "$T/loc.h5" --record attn,scores,qk --dtype f32 -q
expect 0 "$A" record --model "$M" --images "$FX/inputs28.npy" --out "$T/den.h5" --record attn,scores,qk --dtype f32 --dense-maps -q
py '
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for l in range(4):
    g, d = a["layers/%02d" % l], b["layers/%02d" % l]
    assert "map_form" not in d.attrs and "attn" in d, "--dense-maps stored layer %d local" % l
    if l >= 2:  # a stage with unmasked heads stays dense
        assert "attn" in g and "map_form" not in g.attrs, l
        assert np.array_equal(g["attn"][:], d["attn"][:]), l
        continue
    assert g.attrs["map_form"] == "local" and int(g.attrs["local_side"]) == 3, dict(g.attrs)
    assert "attn" not in g and g["attn_local"].dims[3].label == "slot", list(g)
    gh, gw = (int(v) for v in g.attrs["grid"]); S = int(g.attrs["local_side"]); r = S // 2
    for name in ("attn", "scores"):
        loc = g[name + "_local"][:]
        assert loc.shape == (1, 2, gh * gw, S * S + 1), loc.shape
        dense = np.repeat(loc[..., -1:], gh * gw, axis=-1)  # every key outside: the last slot
        for i in range(gh * gw):
            qy, qx = divmod(i, gw)
            for s in range(S * S):
                y, x = qy + s // S - r, qx + s % S - r
                if 0 <= y < gh and 0 <= x < gw:
                    dense[:, :, i, y * gw + x] = loc[:, :, i, s]
                else:
                    assert (loc[:, :, i, s] == 0).all(), "off-grid slot not 0"
        assert np.array_equal(dense, d[name][:]), (l, name, abs(dense - d[name][:]).max())
    assert abs(d["attn"][:].sum(-1) - 1).max() < 1e-5
    # the masks as constants: the local pattern (H, S, S), not (H, T, T)
    for f in (g, d):
        m = f["params/mask_local"][:]
        assert m.shape == (2, 3, 3) and (m == 1).all() and "mask" not in f["params"], m.shape
assert a["layers/02/params/mask"].shape == (4, 49, 49)
' "$T/loc.h5" "$T/den.h5"
# the local trace is the smaller one (stage 0 maps: 10 instead of 196 values per query)
[ "$(stat -c %s "$T/loc.h5")" -lt "$(stat -c %s "$T/den.h5")" ] && ok || bad "local trace not smaller"

expect 0 "$A" info "$T/loc.h5"
has_wrapped "$T/out" "layer 0: stage 0, 14x14 tokens every 2 px, width 8, heads 2; global attention, every head local: maps stored as 3x3 neighbourhoods plus one background weight per query"
expect 0 "$A" info --json "$T/loc.h5"
py 'import sys, json; L = json.load(open(sys.argv[1]))["layer_geometry"]
forms = [e["map_form"] for e in L]; assert forms == ["local", "local", "dense", "dense"], forms
assert L[0]["local_side"] == 3' "$T/out"

# every metric reads the same maps from either form
expect 0 "$A" analyze "$T/loc.h5" --csv "$T/csv_loc" -q
expect 0 "$A" analyze "$T/den.h5" --csv "$T/csv_den" -q
n=$(ls "$T/csv_loc" | wc -l)
[ "$n" -ge 3 ] && ok || bad "analyze wrote $n tables"
diff -r "$T/csv_loc" "$T/csv_den" >"$T/diff" && ok || bad "analyze differs by map form: $(head -c 400 "$T/diff")"
for fig in "attention --head 1 --query 100" "rollout"; do
    f=${fig%% *}
    expect 0 "$A" plot $fig "$T/loc.h5" --layer 1 --dpi 60 -o "$T/$f-loc.png"
    expect 0 "$A" plot $fig "$T/den.h5" --layer 1 --dpi 60 -o "$T/$f-den.png"
    cmp -s "$T/$f-loc.png" "$T/$f-den.png" && ok || bad "plot $f differs by map form"
done

# info counts the local records' bytes
expect 0 "$A" info --json "$T/loc.h5"
py 'import sys, json, h5py
f = h5py.File(sys.argv[2], "r"); n = 0
f.visititems(lambda k, o: None)
for l in range(4):
    g = f["layers/%02d" % l]
    for k in ("attn", "scores", "q", "k", "attn_local", "scores_local"):
        if k in g: n += g[k].size * g[k].dtype.itemsize
got = json.load(open(sys.argv[1]))["storage"]["record_bytes"]
assert got == n, (got, n)' "$T/out" "$T/loc.h5"

# resuming with the other form says so (the trace stays as it is)
expect 1 "$A" record --model "$M" --images "$FX/inputs28.npy" --out "$T/loc.h5" --record attn,scores,qk --dtype f32 --resume --dense-maps
one_line
has "$T/err" "recorded without --dense-maps; resume with the same options"
expect 1 "$A" record --model "$M" --images "$FX/inputs28.npy" --out "$T/den.h5" --record attn,scores,qk --dtype f32 --resume
has "$T/err" "recorded with --dense-maps"
expect 0 "$A" record --model "$M" --images "$FX/inputs28.npy" --out "$T/loc.h5" --record attn,scores,qk --dtype f32 --resume -q

# a local record of the right size in another shape is refused, not read past a buffer
cp "$T/loc.h5" "$T/bad.h5"
py 'import sys, h5py
f = h5py.File(sys.argv[1], "r+"); g = f["layers/00"]; d = g["attn_local"][:]; heads = g["attn_local"].attrs["heads"]
del g["attn_local"]; g["attn_local"] = d.reshape(1, 2, 98, 20); g["attn_local"].attrs["heads"] = heads' "$T/bad.h5"
expect 1 "$A" plot attention "$T/bad.h5" --layer 0 --dpi 60 -o "$T/bad.png"
one_line
has "$T/err" "layers/00/attn_local is not (images, heads, 196, 10)"
printf 'status\n' >"$T/v.txt"
expect 1 env SDL_VIDEODRIVER=dummy "$A" view "$T/bad.h5" --layer 0 --script "$T/v.txt"
has "$T/err" "the file is corrupt"
expect 1 "$A" analyze "$T/bad.h5" --out "$T/bad.an.h5" -q
[ ! -e "$T/bad.png" ] && [ ! -e "$T/bad.an.h5" ] && ok || bad "a corrupt trace left output"

# refused where nothing would be stored local: one line, nothing written
expect 2 "$A" record --model "$M" --images "$FX/inputs28.npy" --out "$T/x.h5" --layers 2,3 --dense-maps
one_line
has "$T/err" "--dense-maps: no recorded layer stores"
[ ! -e "$T/x.h5" ] && ok || bad "refused record wrote x.h5"
expect 2 "$A" record --model "$FX/swin_tiny" --images "$FX/inputs.npy" --out "$T/x.h5" --dense-maps
one_line
t_done
