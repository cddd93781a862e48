#!/usr/bin/env python3
"""Writes the reference fixtures of tests/fixtures/ with PyTorch (Debian's python3-torch) and
PIL (python3-pil). Rerun after changing it: python3 tools/make_fixtures.py [OUT_DIR]
Everything is seeded; the files are small (< 1 MB together) and committed, so the C tests need
no Python. See tests/fixtures/README.md for what each file is."""
import json
import os
import sys

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
from vit_ref import ViT, init_random  # noqa: E402
from attn_ref import init_mechanisms  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
IMAGENET = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])

MODELS = {
    # class token, token pooling, qkv bias: the plain ViT
    "vit_cls": dict(img_size=32, patch_size=8, in_chans=3, embed_dim=48, depth=3, num_heads=3,
                    mlp_hidden=96, num_classes=10, qkv_bias=True, class_token=True,
                    distilled=False, global_pool="token", fc_norm=False),
    # DeiT distilled: cls + dist tokens, two heads averaged
    "deit_dist": dict(img_size=32, patch_size=8, in_chans=3, embed_dim=32, depth=2, num_heads=2,
                      mlp_hidden=64, num_classes=7, qkv_bias=True, class_token=True,
                      distilled=True, global_pool="token", fc_norm=False),
    # no class token, average pooling with fc_norm, no qkv bias
    "vit_gap": dict(img_size=32, patch_size=8, in_chans=3, embed_dim=40, depth=2, num_heads=4,
                    mlp_hidden=80, num_classes=5, qkv_bias=False, class_token=False,
                    distilled=False, global_pool="avg", fc_norm=True),
}

# The papers' mechanisms (tools/attn_ref.py), mixed in one model as a config may mix them.
MECH_MODELS = {
    # class token: MaiT (zero, soft, -inf; R = 1 keeps only the query patch), extreme LMSA (one
    # q/k channel per head), two less-attention blocks after a vanilla one, Refiner, full-table LSLA
    "mech_cls": dict(MODELS["vit_cls"], depth=9, attention=[
        {"type": "mait", "mask_size": [3, 0, 5], "mask_mode": "zero"},
        {"type": "lmsa", "qk_dim": 3},
        {"type": "vanilla"},
        {"type": "less"},
        {"type": "less"},
        {"type": "refiner", "expanded_heads": 4, "kernel_size": 3},
        {"type": "mait", "mask_size": [3, 3, 3], "mask_mode": "soft"},
        {"type": "mait", "mask_size": [0, 3, 1], "mask_mode": "neg_inf"},
        {"type": "lsla", "dynamic_scale": True, "inner_bias": "full", "outer_bias": "full",
         "values": "x", "proj": True},
    ]),
    # no prefix tokens: the 4 x 4 tokens form a window, so LSLA can use Swin relative tables
    "mech_gap": dict(MODELS["vit_gap"], depth=4, attention=[
        {"type": "lsla", "dynamic_scale": True, "inner_bias": "relative", "outer_bias": "relative",
         "values": "v", "proj": False},
        {"type": "lsla", "dynamic_scale": False, "inner_bias": "relative", "outer_bias": "none",
         "values": "x", "proj": True},
        {"type": "lmsa", "qk_dim": 8, "scale": 0.3},
        {"type": "refiner", "expanded_heads": 2, "kernel_size": 5},
    ]),
    # two prefix tokens (cls + dist): masks leave both rows and columns alone
    "mech_dist": dict(MODELS["deit_dist"], depth=3, attention=[
        {"type": "mait", "mask_size": [3, 5], "mask_mode": "zero"},
        {"type": "less"},
        {"type": "lsla", "dynamic_scale": False, "inner_bias": "full", "outer_bias": "none",
         "values": "x", "proj": True},
    ]),
}


def timm_config(cfg):
    """config.json in the Hugging Face timm layout."""
    args = {k: v for k, v in cfg.items() if k not in ("num_classes", "attention")}
    extra = {"attention": cfg["attention"]} if "attention" in cfg else {}
    return {"architecture": "custom", "num_classes": cfg["num_classes"], **extra,
            "global_pool": cfg["global_pool"], "model_args": args,
            "pretrained_cfg": {"input_size": [3, cfg["img_size"], cfg["img_size"]],
                               "crop_pct": 0.875, "interpolation": "bicubic", **IMAGENET}}


def record(model, x):
    rec = []
    with torch.no_grad():
        logits = model(x, record=rec)
    out = {"logits": logits.numpy()}
    for l, r in enumerate(rec):
        for k, v in r.items():  # attn, scores, q, k (absent in less-attention), tokens, internals
            out[f"{k}.{l}"] = v.contiguous().numpy()
    return out


def round_weights(model, kind):
    with torch.no_grad():
        for p in model.parameters():
            if kind == "F16":
                p.copy_(p.half().float())
            else:
                p.copy_(torch.from_numpy((st.to_bf16_bits(p.numpy()).astype(np.uint32) << 16).view(np.float32)))


def write_model(name, cfg, x, seed):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(seed)
    model = init_mechanisms(init_random(ViT(cfg).eval(), seed), seed + 1)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(timm_config(cfg), f, indent=2)
    st.save(os.path.join(d, "model.safetensors"), sd, metadata={"format": "pt"})
    st.save(os.path.join(d, "expected.safetensors"), record(model, x))
    return model, sd


def main():
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 32, 32, generator=g)
    np.save(os.path.join(OUT, "inputs.npy"), x.numpy())
    for i, (name, cfg) in enumerate(MODELS.items()):
        model, sd = write_model(name, cfg, x, 100 + i)
    for i, (name, cfg) in enumerate(MECH_MODELS.items()):
        write_model(name, cfg, x, 200 + i)

    # reduced-precision copies of vit_cls, with references computed from the rounded weights
    cfg = MODELS["vit_cls"]
    d = os.path.join(OUT, "vit_cls")
    model = init_random(ViT(cfg).eval(), 100)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    for kind in ("F16", "BF16"):
        st.save(os.path.join(d, f"model_{kind.lower()}.safetensors"), sd, dtype_override=kind)
        m2 = init_random(ViT(cfg).eval(), 100)
        round_weights(m2, kind)
        st.save(os.path.join(d, f"expected_{kind.lower()}.safetensors"), {"logits": record(m2, x)["logits"]})

    # another input size: position embeddings resampled (48: upsampling, 16: antialiased down)
    for size in (48, 16):
        xs = torch.randn(2, 3, size, size, generator=g)
        np.save(os.path.join(OUT, f"inputs{size}.npy"), xs.numpy())
        r = record(model, xs)
        st.save(os.path.join(d, f"expected{size}.safetensors"),
                {"logits": r["logits"], "attn.2": r["attn.2"]})

    # preprocessing: PIL decoding, resize of the shorter side, centre crop (torchvision's rules)
    rng = np.random.default_rng(1)
    H, W = 37, 45
    yy, xx = np.mgrid[0:H, 0:W]
    img = np.stack([(128 + 100 * np.sin(xx / 5.0 + c) * np.cos(yy / 7.0 - c)) for c in range(3)], -1)
    img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
    Image.fromarray(img).save(os.path.join(OUT, "img.png"))
    Image.fromarray(img).save(os.path.join(OUT, "img.jpg"), quality=90)
    Image.fromarray(img[:, :, 0]).save(os.path.join(OUT, "img_gray.png"))
    rgba = np.concatenate([img, rng.integers(0, 256, (H, W, 1), dtype=np.uint8)], -1)
    Image.fromarray(rgba, "RGBA").save(os.path.join(OUT, "img_rgba.png"))
    exp = {}
    for fname, key in (("img.png", "png"), ("img.jpg", "jpg"), ("img_gray.png", "gray"),
                       ("img_rgba.png", "rgba")):
        pil = Image.open(os.path.join(OUT, fname)).convert("RGB")
        exp[f"decoded.{key}"] = np.asarray(pil).astype(np.uint8)
        for interp, pil_interp in (("bicubic", Image.BICUBIC), ("bilinear", Image.BILINEAR)):
            size, crop = int(32 / 0.875), 32
            w, h = pil.size
            ow, oh = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
            r = pil.resize((ow, oh), pil_interp)
            top, left = int(round((oh - crop) / 2.0)), int(round((ow - crop) / 2.0))
            exp[f"crop.{key}.{interp}"] = np.asarray(r.crop((left, top, left + crop, top + crop))).astype(np.uint8)
    st.save(os.path.join(OUT, "preprocess_expected.safetensors"), exp)
    print("fixtures written to", os.path.abspath(OUT))


if __name__ == "__main__":
    main()
