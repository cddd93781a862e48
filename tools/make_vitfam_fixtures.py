#!/usr/bin/env python3
"""Writes the modern ViT family's reference fixtures (tests/fixtures/vf_*) with the plain PyTorch
model of tools/vitfam_ref.py: one tiny model per option, its config.json (timm layout), weights
(timm names) and what the reference computes on tests/fixtures/inputs*.npy (logits or features,
every attention map, scores, q, k and block outputs). Seeded; KBs each; rerun after changing:
    /usr/bin/python3 tools/make_vitfam_fixtures.py [OUT_DIR]
tests/test_reference.c compares the engine with them (test_vitfam)."""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
from vit_ref import init_random  # noqa: E402  (the same seeded weight rule as the other fixtures)
from vitfam_ref import VitFam  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
IMAGENET = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
BASE = dict(img_size=32, patch_size=8, in_chans=3, embed_dim=32, depth=2, num_heads=2, mlp_hidden=64,
            qkv_bias=True, class_token=True, distilled=False, global_pool="token", fc_norm=False)

# name: (config, other input sizes the engine resamples the position embedding to)
MODELS = {
    # DeiT III: LayerScale on both branches, position embedding without the class slot
    "vf_deit3": (dict(BASE, num_classes=5, init_values=1e-6, no_embed_class=True), ()),
    # DINOv2 with registers: 3 registers, no_embed_class, LayerScale, features only (no head);
    # at 48 px the patch-only position embedding is resampled (no prefix rows)
    "vf_reg": (dict(BASE, num_classes=0, init_values=1e-5, reg_tokens=3, no_embed_class=True), (48,)),
    # CLIP: norm_pre (no patch-embedding bias), QuickGELU, LayerNorm eps 1e-5
    "vf_clip": (dict(BASE, num_classes=6, pre_norm=True, act_layer="quick_gelu", ln_eps=1e-5), ()),
    # SigLIP: no class token, attention pooling (MAP) over the patches
    "vf_map": (dict(BASE, num_classes=4, class_token=False, global_pool="map"), ()),
    # MAP pooling behind a class token and registers (the pool skips every prefix token)
    "vf_map_reg": (dict(BASE, num_classes=0, reg_tokens=2, global_pool="map", act_layer="quick_gelu"), ()),
    # registers without a class token, average pooling with fc_norm: the mean skips the registers
    "vf_regavg": (dict(BASE, num_classes=3, class_token=False, reg_tokens=2, global_pool="avg", fc_norm=True), ()),
    # patch 14 with registers whose position embedding keeps its prefix rows (1 + 2): trained at
    # 42 px (3 x 3), run at 28 (2 x 2, antialiased down) and 56 (4 x 4, up)
    "vf_p14": (dict(BASE, img_size=42, patch_size=14, num_classes=3, reg_tokens=2, init_values=0.1), (28, 56)),
}


def timm_config(cfg):
    args = {k: v for k, v in cfg.items() if k != "num_classes"}
    S = cfg["img_size"]
    return {"architecture": "custom", "num_classes": cfg["num_classes"], "global_pool": cfg["global_pool"],
            "model_args": args,
            "pretrained_cfg": {"input_size": [3, S, S], "crop_pct": 0.875, "interpolation": "bicubic", **IMAGENET}}


def record(model, x):
    rec = []
    with torch.no_grad():
        out = model(x, record=rec)
    key = "logits" if model.c["num_classes"] > 0 else "features"
    res = {key: out.contiguous().numpy()}
    for l, r in enumerate(rec):
        for k, v in r.items():
            res[f"{k}.{l}"] = v.contiguous().numpy()
    if model.c["global_pool"] == "map":  # the latent query's map over the patch tokens
        res["pool_attn"] = model.attn_pool.attn_map.contiguous().numpy()
    return res


def inputs(size, g):
    path = os.path.join(OUT, "inputs.npy" if size == 32 else f"inputs{size}.npy")
    if not os.path.exists(path):  # 28, 42, 56: one image each, written once
        np.save(path, torch.randn(1, 3, size, size, generator=g).numpy())
    return torch.from_numpy(np.load(path))


def main():
    g = torch.Generator().manual_seed(17)
    for i, (name, (cfg, sizes)) in enumerate(MODELS.items()):
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        model = init_random(VitFam(cfg).eval(), 300 + i)
        sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(timm_config(cfg), f, indent=2)
        st.save(os.path.join(d, "model.safetensors"), sd, metadata={"format": "pt"})
        st.save(os.path.join(d, "expected.safetensors"), record(model, inputs(cfg["img_size"], g)))
        for s in sizes:
            st.save(os.path.join(d, f"expected{s}.safetensors"), record(model, inputs(s, g)))
    print("vitfam fixtures written to", os.path.abspath(OUT))


if __name__ == "__main__":
    main()
