#!/usr/bin/env bash
# test_slow_swin.sh: Swin recorded through the command line, end to end.
# 1. The tiny Swin fixtures (tools/make_swin_fixtures.py) recorded with `attnscope record
#    --record all --dtype f32`; every window layer's full-image attention rebuilt with the h5py
#    recipe of docs/trace-format.md (pasted from the doc as printed) equals the fixture's window
#    maps scattered through the fixture's own window_token (from tools/swin_ref.py), for every
#    query token, head and image; logits equal the fixture's.
# 2. tools/check_swin_torchvision.py: torchvision's swin_t (perturbed random weights, timm's
#    names) against `attnscope record` at 224 and 256 in both pad orders (logits and every window
#    map within 1e-4). Needs python3-torch and python3-torchvision; without them it is skipped
#    and says so.
set -u
. "$(dirname "$0")/lib.sh"
t_init slow_swin slowswin
A=${ATTNSCOPE:-build/attnscope}
FX=${FIXTURES:-$(dirname "$0")/fixtures}
DOC=$(dirname "$0")/../docs/trace-format.md

for run in "swin_tiny inputs.npy pad_first expected windows" \
           "swin_pad inputs16_1.npy pad_first expected windows" \
           "swin_pad_tv inputs16_1.npy pad_first expected windows"; do
    set -- $run
    expect 0 "$A" record --model "$FX/$1" --images "$FX/$2" --out "$T/$1.h5" --record all --dtype f32
    py '
import sys, re, h5py, numpy as np
sys.path.insert(0, sys.argv[5])
import safetensors_io as st
doc = open(sys.argv[1]).read()
recipe = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "def full_map" in b]
assert len(recipe) == 1, "docs/trace-format.md: no single block defines full_map"
exec(recipe[0])
f = h5py.File(sys.argv[2], "r")
exp, win = st.load(sys.argv[3]), st.load(sys.argv[4])
assert np.abs(f["images/logits"][:] - exp["logits"]).max() < 1e-4, "logits differ"
checked = 0
for name, want in exp.items():
    if not name.startswith("attn."): continue
    l = int(name.split(".")[1])
    tok = win[f"window_token.{l}"].astype(int)          # the reference s own table
    gh, gw = f[f"layers/{l:02d}"].attrs["grid"]
    N, H = want.shape[:2]
    for n in range(N):
        for h in range(H):
            for t in range(gh * gw):
                w, r = np.argwhere(tok == t)[0]
                ref = np.zeros(gh * gw); keep = tok[w] >= 0
                ref[tok[w][keep]] = want[n, h, w, r][keep]
                got = full_map(f, l, n, h, t)
                d = np.abs(got.ravel() - ref).max()
                assert d < 1e-4, f"layer {l} image {n} head {h} token {t}: {d}"
                checked += 1
assert checked > 0, "no window maps compared"
print(checked, "query rows")
' "$DOC" "$T/$1.h5" "$FX/$1/$4.safetensors" "$FX/$1/$5.safetensors" "$(dirname "$0")/../tools"
done

# The learnt relative tables under layers/LL/params, expanded as Swin's relative_position_index
# does (written here from the paper's index formula with numpy, not from the trace).
py '
import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[3])
import safetensors_io as st
f, m = h5py.File(sys.argv[1], "r"), st.load(sys.argv[2])
for l, (s, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
    b = f[f"layers/{l:02d}/params/relative_position_bias"][:]
    t = m[f"layers.{s}.blocks.{j}.attn.relative_position_bias_table"]
    M = int(round(b.shape[1] ** 0.5))
    y, x = np.divmod(np.arange(M * M), M)
    idx = (y[:, None] - y[None, :] + M - 1) * (2 * M - 1) + (x[:, None] - x[None, :] + M - 1)
    assert np.array_equal(b, t[idx].transpose(2, 0, 1)), f"layer {l}: bias differs"
' "$T/swin_tiny.h5" "$FX/swin_tiny/model.safetensors" "$(dirname "$0")/../tools"

"$PY" -c "import torch, torchvision" 2>/dev/null
if [ $? -eq 0 ]; then
    expect 0 "$PY" "$(dirname "$0")/../tools/check_swin_torchvision.py" "$A"
else
    echo "slow_swin: python3-torch/torchvision missing: the torchvision oracle is not run"
fi
t_done
