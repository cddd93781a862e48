#!/usr/bin/env bash
# test_slow_trace3.sh: the h5py recipe of docs/trace-format.md (the attention of a query token
# over the whole image, from a window layer) run as printed on staged traces, for every token,
# head, image and window layer, in both pad orders and both dtypes, against full maps computed
# independently in numpy: the window partition from np.pad/np.roll of the token grid and the
# shift mask from Swin's slices (not from the trace's window_token or shift_mask), the weights
# from the closed-form logits tests/staged.h writes. Also the token centres in pixels against the
# merge rule. (Once the Swin engine is in: the same recipe against the engine's maps of a recorded
# Swin belongs here too; see the integration notes of issue 16.)
set -u
. "$(dirname "$0")/lib.sh"
t_init slow_trace3 slowtrace3
MK=${MKTRACE3:-build/tests/mktrace3}
DOC=$(dirname "$0")/../docs/trace-format.md

for order in pad_first roll_first; do
    for dt in f32 f16; do
        expect 0 "$MK" "$T/$order-$dt.h5" $order all all all $dt 3
        py '
import sys, re, h5py, numpy as np
doc = open(sys.argv[1]).read()
blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
recipe = [b for b in blocks if "def full_map" in b]
assert len(recipe) == 1, "docs/trace-format.md: no single block defines full_map"
exec(recipe[0])                                   # defines full_map, as a user would paste it
path, order, tol = sys.argv[2], sys.argv[3], float(sys.argv[4])
f = h5py.File(path, "r")

def logit(l, b, h, gw, t, u):                     # tests/staged.h: staged_logit
    if u < 0: return -0.5
    yt, xt, yu, xu = t // gw, t % gw, u // gw, u % gw
    return -((yt - yu) ** 2 + (xt - xu) ** 2) / (1.0 + h + 0.5 * l) + 0.05 * xu - 0.03 * yu + 0.02 * b * (xu + yu)

def expected(l, b, h, gh, gw, M, s, t):
    """Full-grid attention of token t: the grid of token ids padded and rolled by numpy, the
    mask from Swin s slice regions on the padded grid, softmax within the query s window."""
    ph, pw = -(-gh // M) * M, -(-gw // M) * M
    ids = np.arange(gh * gw).reshape(gh, gw)
    if order == "pad_first":
        grid = np.pad(ids, ((0, ph - gh), (0, pw - gw)), constant_values=-1)
        grid = np.roll(grid, (-s, -s), axis=(0, 1))
    else:
        grid = np.roll(ids, (-s, -s), axis=(0, 1))
        grid = np.pad(grid, ((0, ph - gh), (0, pw - gw)), constant_values=-1)
    region = np.zeros((ph, pw), int)
    if s:
        cnt = 0
        for hs in (slice(0, -M), slice(-M, -s), slice(-s, None)):
            for ws in (slice(0, -M), slice(-M, -s), slice(-s, None)):
                region[hs, ws] = cnt; cnt += 1
    (py, px), = np.argwhere(grid == t)
    wy, wx = py // M * M, px // M * M
    keys = grid[wy:wy + M, wx:wx + M].ravel()
    reg = region[wy:wy + M, wx:wx + M].ravel()
    e = np.array([logit(l, b, h, gw, t, int(u)) for u in keys]) + np.where(reg == region[py, px], 0.0, -100.0)
    p = np.exp(e - e.max()); p /= p.sum()
    full = np.zeros(gh * gw)
    full[keys[keys >= 0]] = p[keys >= 0]
    return full.reshape(gh, gw), p[keys < 0].sum()

checked, worst = 0, 0.0
n_img = f["images/done"].shape[0]
for name in f.attrs["layer_groups"]:
    g = f[name]; a = g.attrs
    l = int(a["layer"]); gh, gw = (int(x) for x in a["grid"])
    assert a["scope"] == "window", name
    M, s = int(a["window"]), int(a["shift"])
    assert a["pad_order"] == order, a["pad_order"]
    heads = np.atleast_1d(g["head"][:])
    for b in range(n_img):
        for hp, h in enumerate(heads):
            for t in range(gh * gw):
                got = full_map(f, l, b, hp, t)
                want, pad_mass = expected(l, b, int(h), gh, gw, M, s, t)
                worst = max(worst, float(np.abs(got - want).max()))
                assert abs(got.sum() + pad_mass - 1) < 5 * tol, (name, b, h, t, got.sum(), pad_mass)
                checked += 1
assert worst < tol, (worst, tol)
# token centres: patch k = s = 2 puts token y at 2y + 1; a 2x2 merge takes its children s mean
for name in f.attrs["layer_groups"]:
    a = f[name].attrs
    st = int(a["stage"]); stride, off = float(a["token_stride_px"]), float(a["token_offset_px"])
    c0 = 2 * np.arange(14) + 1.0
    for _ in range(st):
        c0 = np.concatenate([c0, [c0[-1] + (c0[-1] - c0[-2])]]) if len(c0) % 2 else c0
        c0 = (c0[0::2] + c0[1::2]) / 2
    assert np.allclose(off + stride * np.arange(len(c0)), c0), (name, stride, off, c0)
print(checked, "queries, max error", worst)
assert checked == 3 * (196 * 2 + 49 * 2 * 2 + 16 * 4 * 2), checked
' "$DOC" "$T/$order-$dt.h5" $order $([ $dt = f32 ] && echo 1e-6 || echo 2e-3)
    done
done
# a window selection: the recipe finds the recorded windows by the window scale
expect 0 "$MK" "$T/sel.h5" pad_first 0-3 all 1,3 f32 1
py '
import sys, re, h5py, numpy as np
doc = open(sys.argv[1]).read()
exec([b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "def full_map" in b][0])
f = h5py.File(sys.argv[2], "r"); g = f["layers/01"]
tok = g["params/window_token"][:]
assert list(g["window"][:]) == [1, 3] and g["attn"].shape == (1, 1, 2, 16, 16)
t = int(tok[3][tok[3] >= 0][0])                  # a token of window 3
full = full_map(f, 1, 0, 0, t)
assert abs(full.sum() - g["attn"][0, 0, 1][list(tok[3]).index(t)][tok[3] >= 0].sum()) < 1e-6
t0 = int(tok[0][tok[0] >= 0][0])                 # window 0 was not recorded
try:
    full_map(f, 1, 0, 0, t0); raise SystemExit("a window that was not recorded gave a map")
except IndexError:
    pass
' "$DOC" "$T/sel.h5"
t_done
