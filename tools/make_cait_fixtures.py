#!/usr/bin/env python3
"""Writes the tiny-CaiT reference fixtures of tests/fixtures/ (cait_tiny, cait_mait_before,
cait_mait_after): /usr/bin/python3 tools/make_cait_fixtures.py [OUT_DIR]
A CaiT of 2 talking-heads SA blocks and 2 class-attention blocks (patch 8 on the 32 x 32 inputs of
inputs.npy: 16 patches, width 12, 3 heads, LayerScale), random seeded weights with timm's names,
and what tools/cait_ref.py records: logits and per block attn, scores, q, k, tokens, and in the
SA blocks the internals scores_qk and attn_softmax. The MaiT variants mask heads 0 and 2 of
block 0 (R = 3, zero mode) before or after the talking-heads mix, or after it in soft mode
(cait_mait_soft)."""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import cait_ref  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
IMAGENET = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
ARGS = dict(family="cait", img_size=32, patch_size=8, in_chans=3, embed_dim=12, depth=2,
            depth_token_only=2, num_heads=3, mlp_ratio=2, mlp_ratio_token_only=2, num_classes=5,
            qkv_bias=True, init_values=0.1, talking_heads=True)


def weights(seed):
    g = torch.Generator().manual_seed(seed)
    D, H, Hm, P = ARGS["embed_dim"], ARGS["num_heads"], ARGS["embed_dim"] * ARGS["mlp_ratio"], ARGS["patch_size"]
    N = (ARGS["img_size"] // P) ** 2

    def r(*shape, s=0.3, m=0.0):
        return torch.randn(*shape, generator=g) * s + m

    sd = {"patch_embed.proj.weight": r(D, 3, P, P, s=0.05), "patch_embed.proj.bias": r(D),
          "cls_token": r(1, 1, D), "pos_embed": r(1, N, D), "norm.weight": r(D, m=1.0), "norm.bias": r(D),
          "head.weight": r(5, D), "head.bias": r(5)}

    def tail(p):
        sd.update({p + ".norm1.weight": r(D, s=0.2, m=1.0), p + ".norm1.bias": r(D, s=0.1),
                   p + ".attn.proj.weight": r(D, D), p + ".attn.proj.bias": r(D, s=0.1),
                   p + ".gamma_1": r(D, s=0.2, m=0.5), p + ".gamma_2": r(D, s=0.2, m=0.5),
                   p + ".norm2.weight": r(D, s=0.2, m=1.0), p + ".norm2.bias": r(D, s=0.1),
                   p + ".mlp.fc1.weight": r(Hm, D), p + ".mlp.fc1.bias": r(Hm, s=0.1),
                   p + ".mlp.fc2.weight": r(D, Hm), p + ".mlp.fc2.bias": r(D, s=0.1)})
    for i in range(ARGS["depth"]):
        p = f"blocks.{i}"
        tail(p)
        sd.update({p + ".attn.qkv.weight": r(3 * D, D, s=0.6), p + ".attn.qkv.bias": r(3 * D, s=0.1),
                   # mixes away from the identity, with biases: the maps become signed
                   p + ".attn.proj_l.weight": torch.eye(H) + r(H, H, s=0.4), p + ".attn.proj_l.bias": r(H),
                   p + ".attn.proj_w.weight": torch.eye(H) + r(H, H, s=0.4), p + ".attn.proj_w.bias": r(H, s=0.05)})
    for j in range(ARGS["depth_token_only"]):
        p = f"blocks_token_only.{j}"
        tail(p)
        for n in "qkv":
            sd.update({f"{p}.attn.{n}.weight": r(D, D, s=0.6), f"{p}.attn.{n}.bias": r(D, s=0.1)})
    return sd


def write(folder, args, attention, sd, exp):
    d = os.path.join(OUT, folder)
    os.makedirs(d, exist_ok=True)
    cfg = {"architecture": "custom", "model_args": args,
           "pretrained_cfg": {"input_size": [3, 32, 32], "crop_pct": 1.0, "interpolation": "bicubic", **IMAGENET}}
    if attention:
        cfg["attention"] = attention
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    st.save(os.path.join(d, "model.safetensors"), {k: v.numpy() for k, v in sd.items()}, metadata={"format": "pt"})
    st.save(os.path.join(d, "expected.safetensors"), exp)


def record(sd, cfg, x):
    with torch.no_grad():
        logits, rec = cait_ref.forward(sd, cfg, x)
    exp = {"logits": logits.numpy().astype(np.float32)}
    for l, r in enumerate(rec):
        for k, v in r.items():
            exp[f"{k}.{l}"] = v.contiguous().numpy().astype(np.float32)
    return exp, logits


def main():
    x = torch.from_numpy(np.load(os.path.join(OUT, "inputs.npy")))  # (2, 3, 32, 32), make_fixtures.py
    sd = weights(1700)
    exp, logits = record(sd, ARGS, x)
    A = exp["attn.0"]
    print(f"  cait_tiny: logits {logits.abs().max().item():.3g}, SA map min {A.min():.3g}, "
          f"row sums {A.sum(-1).min():.3g}..{A.sum(-1).max():.3g} (signed, not row-stochastic)")
    assert A.min() < 0 and abs(A.sum(-1) - 1).max() > 1e-2, "the talking-heads maps should be signed"
    write("cait_tiny", ARGS, None, sd, exp)
    # run at 48 px (6 x 6 patches): pos_embed's 4 x 4 grid resampled, as attnscope's --img-size
    x48 = torch.from_numpy(np.load(os.path.join(OUT, "inputs48.npy")))
    exp48, _ = record(sd, ARGS, x48)
    st.save(os.path.join(OUT, "cait_tiny", "expected48.safetensors"), exp48)
    att = [{"type": "mait", "blocks": [0], "mask_size": [3, 0, 3], "mask_mode": "zero"}]
    outs = {}
    for mix in ("before_mix", "after_mix"):
        args = dict(ARGS, mask_mix=mix)
        exp, outs[mix] = record(sd, dict(args, mait={0: [3, 0, 3]}), x)
        write(f"cait_mait_{mix.split('_')[0]}", args, att, sd, exp)
    # soft masks after the mix: the learnt alpha per head multiplies the masked mixed logits
    # (training hands the hook the mixed logits as its raw scores)
    soft = [{"type": "mait", "blocks": [0], "mask_size": [3, 0, 3], "mask_mode": "soft"}]
    sds = dict(sd, **{"blocks.0.attn.mask_alpha": torch.tensor([0.3, 0.7, 0.45])})
    args = dict(ARGS, mask_mix="after_mix")
    exp, _ = record(sds, dict(args, mait={0: [3, 0, 3]}, mait_mode="soft"), x)
    write("cait_mait_soft", args, soft, sds, exp)
    d = (outs["before_mix"] - outs["after_mix"]).abs().max().item()
    print(f"  cait_mait: before vs after the mix, logits differ by {d:.3g}")
    assert d > 1e-3, "the mask positions should differ"
    total = sum(os.path.getsize(os.path.join(OUT, f, n)) for f in ("cait_tiny", "cait_mait_before", "cait_mait_after", "cait_mait_soft")
                for n in os.listdir(os.path.join(OUT, f)))
    print(f"CaiT fixtures written to {os.path.abspath(OUT)} ({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
