#!/usr/bin/env python3
"""Writes the tiny PVT v2 reference fixtures of tests/fixtures/ (pvt_tiny, pvt_li, pvt_lmsa, pvt_less)
with PyTorch:
/usr/bin/python3 tools/make_pvt_fixtures.py [OUT_DIR]
Weights are seeded random tensors in timm's names (scaled so the maps are far from uniform); the
expected tensors come from tools/pvt_ref.py (written from the equations, not from attnscope's C
code). The key centres in pixels are derived here from the convolution arithmetic alone (pixel i
spans [i, i + 1)). See tests/fixtures/README.md for every file."""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pvt_ref  # noqa: E402
import safetensors_io as st  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
IMAGENET = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])


def weights(cfg, seed):
    """Every tensor of the config in timm's names, from the shapes of the equations."""
    g = torch.Generator().manual_seed(seed)
    dims, k, K = cfg["embed_dims"], cfg["patch_kernel"], cfg["num_classes"]
    shapes = {"patch_embed.proj.weight": (dims[0], 3, k, k), "patch_embed.proj.bias": (dims[0],),
              "patch_embed.norm.weight": (dims[0],), "patch_embed.norm.bias": (dims[0],)}
    for s, (c, d) in enumerate(zip(dims, cfg["depths"])):
        if s and cfg.get("attn_residual"):  # LaViT's Eqs. 6-7 (tools/pvt_ref.py)
            hp, hs, Tk = cfg["num_heads"][s - 1], cfg["num_heads"][s], len(centres(cfg)[s][1]) ** 2
            a = "stages.%d.attn_residual." % s
            shapes.update({a + "dw.weight": (hp, 1, 2, 2), a + "dw.bias": (hp,), a + "pw.weight": (hs, hp, 1, 1),
                           a + "pw.bias": (hs,), a + "gamma": (hs,)})
            if cfg.get("ar_norm", "layernorm") == "layernorm":
                shapes.update({a + "norm.weight": (Tk,), a + "norm.bias": (Tk,)})
        if s:
            shapes.update({"stages.%d.downsample.proj.weight" % s: (c, dims[s - 1], 3, 3),
                           "stages.%d.downsample.proj.bias" % s: (c,),
                           "stages.%d.downsample.norm.weight" % s: (c,), "stages.%d.downsample.norm.bias" % s: (c,)})
        hm = int(c * cfg["mlp_ratios"][s])
        R = 1 if cfg["linear"] else cfg["sr_ratios"][s]
        for j in range(d):
            p = "stages.%d.blocks.%d." % (s, j)
            Q = cfg.get("lmsa", {}).get(sum(cfg["depths"][:s]) + j, c)  # LMSA: compressed q/k width
            shapes.update({p + "norm1.weight": (c,), p + "norm1.bias": (c,)})
            if sum(cfg["depths"][:s]) + j in cfg.get("less", ()):  # LaViT's less-attention: v, Theta, Psi
                tok, keys = centres(cfg)[s]  # per axis: the stage's tokens and reduced keys
                T, Tk = len(tok) ** 2, len(keys) ** 2
                shapes.update({p + "attn.v.weight": (c, c), p + "attn.v.bias": (c,),
                               p + "attn.theta.weight": (Tk, Tk), p + "attn.psi.weight": (T, T)})
            else:
                shapes.update({p + "attn.q.weight": (Q, c), p + "attn.q.bias": (Q,),
                               p + "attn.kv.weight": (Q + c, c), p + "attn.kv.bias": (Q + c,)})
            if cfg["linear"] or R > 1:
                shapes.update({p + "attn.sr.weight": (c, c, R, R), p + "attn.sr.bias": (c,),
                               p + "attn.norm.weight": (c,), p + "attn.norm.bias": (c,)})
            shapes.update({p + "attn.proj.weight": (c, c), p + "attn.proj.bias": (c,), p + "norm2.weight": (c,),
                           p + "norm2.bias": (c,), p + "mlp.fc1.weight": (hm, c), p + "mlp.fc1.bias": (hm,),
                           p + "mlp.dwconv.weight": (hm, 1, 3, 3), p + "mlp.dwconv.bias": (hm,),
                           p + "mlp.fc2.weight": (c, hm), p + "mlp.fc2.bias": (c,)})
        shapes.update({"stages.%d.norm.weight" % s: (c,), "stages.%d.norm.bias" % s: (c,)})
    shapes.update({"head.weight": (K, dims[-1]), "head.bias": (K,)})
    sd = {}
    for name, shp in shapes.items():
        x = torch.randn(*shp, generator=g)
        if name.endswith("norm.weight") or name.endswith("norm1.weight") or name.endswith("norm2.weight") \
                or name.endswith("attn_residual.gamma"):
            x = 1.0 + 0.2 * x
        elif len(shp) == 1:
            x = 0.1 * x
        else:
            fan = int(np.prod(shp[1:]))
            # maps far from uniform; Theta and Psi keep the norm of the scores they transform
            x = (1.0 if "attn.theta" in name or "attn.psi" in name else 1.5) * x / fan ** 0.5
        sd[name] = x.float()
    return sd


def centres(cfg):
    """Token and key centres in pixels per stage, from the conv arithmetic: a conv output y spans
    input [s y - p, s y - p + k); its centre is the mean of the centres it covers (pixel i is at
    i + 0.5); a downsample output is centred on its middle input (2y); a pool bin on its inputs."""
    k, P, S = cfg["patch_kernel"], cfg["patch_size"], cfg["img_size"]
    n = (S + 2 * (k // 2) - k) // P + 1
    tok = np.array([P * y - k // 2 + k / 2.0 for y in range(n)])
    out = []
    for s in range(len(cfg["depths"])):
        if s:
            n = (n + 2 - 3) // 2 + 1
            tok = np.array([tok[2 * y] for y in range(n)])
        if cfg["linear"]:
            keys = [tok[(i * n) // 7: -((-(i + 1) * n) // 7)].mean() for i in range(7)]
        else:
            R = cfg["sr_ratios"][s]
            keys = [tok[R * i: R * i + R].mean() for i in range((n - R) // R + 1)]
        out.append((tok.copy(), np.array(keys)))
    return out


def fixture(name, cfg, seed, images):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    sd = weights(cfg, seed)
    model = pvt_ref.PVTv2(cfg, sd).eval()
    rec = []
    with torch.no_grad():
        logits = model(torch.from_numpy(images), record=rec)
    exp = {"logits": logits.numpy()}
    for l, r in enumerate(rec):
        for q in ("attn", "scores", "q", "k", "tokens"):
            if q in r:  # less-attention blocks have no q or k
                exp["%s.%d" % (q, l)] = r[q].contiguous().numpy().astype(np.float32)
    # per block: key grid and key centres (rows) from the arithmetic above
    geom, l = {}, 0
    for s, (tok, keys) in enumerate(centres(cfg)):
        for j in range(cfg["depths"][s]):
            kh, kw = rec[l]["key_grid"]
            assert kh == len(keys), (name, l, kh, len(keys))
            geom["key_grid.%d" % l] = np.array([kh, kw, len(tok)], np.float32)
            geom["key_centre.%d" % l] = keys.astype(np.float32)
            geom["token_centre.%d" % l] = tok.astype(np.float32)
            l += 1
    st.save(os.path.join(d, "model.safetensors"), {k: v.numpy() for k, v in sd.items()})
    st.save(os.path.join(d, "expected.safetensors"), exp)
    st.save(os.path.join(d, "geom.safetensors"), geom)
    margs = {k: cfg[k] for k in ("family", "img_size", "patch_size", "patch_kernel", "in_chans", "embed_dims",
                                 "depths", "num_heads", "mlp_ratios", "linear", "qkv_bias")}
    if not cfg["linear"]:
        margs["sr_ratios"] = cfg["sr_ratios"]
    if cfg.get("lmsa"):
        margs["attention"] = [{"type": "lmsa", "qk_dim": q, "blocks": [b]} for b, q in sorted(cfg["lmsa"].items())]
    if cfg.get("less"):
        margs["attention"] = [{"type": "less", "blocks": sorted(cfg["less"])}]
    for k in ("attn_residual", "ar_source", "ar_norm"):
        if k in cfg:
            margs[k] = cfg[k]
    conf = {"architecture": "custom", "num_classes": cfg["num_classes"], "model_args": margs,
            "pretrained_cfg": {"input_size": [3, cfg["img_size"], cfg["img_size"]], "crop_pct": 0.9,
                               "interpolation": "bicubic", **IMAGENET}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)
        f.write("\n")
    if not cfg.get("lmsa") and not cfg.get("less"):
        assert pvt_ref.count_params(cfg) == sum(v.numel() for v in sd.values())
    print(name, "params", sum(v.numel() for v in sd.values()), "logits", logits.numpy().round(4).tolist()[0][:4])


def main():
    base = dict(family="pvt_v2", patch_size=4, patch_kernel=7, in_chans=3, qkv_bias=True, num_classes=10)
    rng = np.random.default_rng(17)
    # 58 px: a 15 x 15 grid (58 is no multiple of the stride 4), R = 4 keys 3 x 3 (15 = 3 R + 3:
    # the conv drops the remainder), then 8 x 8 with R = 2 and 4 x 4 with R = 1 (no reduction)
    tiny = dict(base, img_size=58, embed_dims=[16, 24, 32], depths=[1, 2, 1], num_heads=[1, 2, 2],
                mlp_ratios=[2, 2, 1.5], sr_ratios=[4, 2, 1], linear=False)
    x = rng.standard_normal((2, 3, 58, 58)).astype(np.float32)
    fixture("pvt_tiny", tiny, 1, x)
    np.save(os.path.join(OUT, "pvt_tiny", "inputs58.npy"), x)
    # linear SRA at 40 px: grids 10 and 5, pooled to 7 x 7 with unequal (10) and overlapping (5) bins
    li = dict(base, img_size=40, embed_dims=[16, 32], depths=[1, 1], num_heads=[2, 2], mlp_ratios=[2, 2],
              sr_ratios=[1, 1], linear=True)
    x = rng.standard_normal((2, 3, 40, 40)).astype(np.float32)
    fixture("pvt_li", li, 2, x)
    np.save(os.path.join(OUT, "pvt_li", "inputs40.npy"), x)
    # LMSA in SRA blocks 0 (stage 0, R = 2) and 2 (stage 1, R = 1): q and k of 2 per head, on the
    # shared 32 px inputs.npy (grids 8 and 4, keys 4x4 and 4x4); block 1 is vanilla
    lm = dict(base, img_size=32, embed_dims=[16, 32], depths=[2, 1], num_heads=[2, 4], mlp_ratios=[2, 2],
              sr_ratios=[2, 1], linear=False, lmsa={0: 4, 2: 8})
    fixture("pvt_lmsa", lm, 3, np.load(os.path.join(OUT, "inputs.npy")))
    # LaViT's less-attention over reduced keys (design note 3.5): block 1 transforms block 0's
    # 64 x 16 scores (stage 0, R = 2: Theta 16 x 16, Psi 64 x 64), block 2 block 1's (a chain);
    # block 3 starts stage 1 vanilla, block 4 transforms its 16 x 16 scores (R = 1)
    la = dict(base, img_size=32, embed_dims=[16, 32], depths=[3, 2], num_heads=[2, 4], mlp_ratios=[2, 2],
              sr_ratios=[2, 1], linear=False, less=[1, 2, 4])
    fixture("pvt_less", la, 4, np.load(os.path.join(OUT, "inputs.npy")))
    # LaViT on PVT v2 (docs/models.md, "LaViT"): the attention residual into stage 1's first
    # block from stage 0's last scores (h' = 1 head -> 2, the 8 x 8 query grid strided to 4 x 4
    # over the same 4 x 4 keys, LayerNorm over the keys); less-attention in block 1 (64 x 16
    # maps) and blocks 3-4 (16 x 16: LaViT's term applies)
    lv = dict(base, img_size=32, embed_dims=[16, 32], depths=[2, 3], num_heads=[1, 2], mlp_ratios=[2, 2],
              sr_ratios=[2, 1], linear=False, less=[1, 3, 4], attn_residual=True, ar_source="scores",
              ar_norm="layernorm")
    fixture("pvt_lavit", lv, 5, np.load(os.path.join(OUT, "inputs.npy")))
    # the other readings with a vanilla block feeding the residual (stage 0's last block)
    fixture("pvt_lavit_alt", dict(lv, ar_source="attn", ar_norm="none", less=[4]), 6,
            np.load(os.path.join(OUT, "inputs.npy")))
    # a stage of one block that takes the residual and feeds the next one (scores of a vanilla
    # block), key grids 2 x 2 in every stage (8 / 4, 4 / 2, 2 / 1), less-attention on a 4 x 4 map
    d1 = dict(base, img_size=32, embed_dims=[16, 24, 32], depths=[1, 1, 2], num_heads=[1, 2, 2],
              mlp_ratios=[2, 2, 2], sr_ratios=[4, 2, 1], linear=False, less=[3], attn_residual=True,
              ar_source="scores", ar_norm="layernorm")
    fixture("pvt_lavit_d1", d1, 7, np.load(os.path.join(OUT, "inputs.npy")))


if __name__ == "__main__":
    main()
