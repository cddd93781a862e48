#!/usr/bin/env python3
"""Writes the fixtures of convolutional stems (tests/fixtures/vit_stem/, swin_stem/): a config,
seeded float32 weights, the reference logits (expected.safetensors) and, with PyTorch autograd in
float64, the cross-entropy (label smoothing 0.1) and the gradient of every parameter
(grads.safetensors). The models are tools/vit_ref.py and tools/swin_ref.py with
tools/stem_ref.py's stem (nn.Conv2d, BatchNorm2d in eval mode, ReLU / ReLU6 / Hardswish:
PyTorch's own modules) and, for the Swin, CSwin's conv merge:

  vit_stem   Refined-ViT's stem shape (its released PatchEmbed_cnn, names patch_embed.conv1..,
             bn1.., proj): conv7 s2 p3 + BN + ReLU, conv3 s1 p1 + BN + ReLU6, conv4 s4 with bias;
             vanilla and Refiner blocks, a class token. The checkpoint keeps BatchNorm's
             num_batches_tracked (int64), which the loader must accept and ignore.
  swin_stem  ViT-LSLA's shape: MPViT's stem (conv3 s2 p1 + BN + Hardswish, twice; names
             stem.i.conv, stem.i.bn), patch_norm, LSLA in shifted windows (dynamic scale,
             relative inner and outer biases, keys and values x) without Swin's own relative
             position bias (rel_pos_bias false), a Conv2d(k3, s2, p1) + LN merge.

Rerun: /usr/bin/python3 tools/make_stem_fixtures.py (FIXTURES_OUT=DIR to write elsewhere)"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import stem_ref  # noqa: E402
import swin_ref  # noqa: E402
from vit_ref import ViT  # noqa: E402

OUT = os.environ.get("FIXTURES_OUT", os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
SMOOTHING = 0.1

VIT_STEM = {"architecture": "custom", "img_size": 32, "in_chans": 3, "embed_dim": 24, "depth": 3,
            "num_heads": 3, "mlp_hidden": 72, "num_classes": 7, "qkv_bias": True, "class_token": True,
            "distilled": False, "global_pool": "token", "fc_norm": False, "bn_eps": 1e-5,
            "stem": [{"out": 8, "kernel": 7, "stride": 2, "padding": 3, "bias": False, "bn": True, "act": "relu",
                      "conv_name": "patch_embed.conv1", "bn_name": "patch_embed.bn1"},
                     {"out": 12, "kernel": 3, "stride": 1, "padding": 1, "bias": False, "bn": True, "act": "relu6",
                      "conv_name": "patch_embed.conv2", "bn_name": "patch_embed.bn2"},
                     {"out": 24, "kernel": 4, "stride": 4, "padding": 0, "bias": True, "bn": False, "act": "none",
                      "conv_name": "patch_embed.proj"}],
            "attention": [{"type": "vanilla"}, {"type": "refiner", "expanded_heads": 6, "kernel_size": 3},
                          {"type": "refiner", "expanded_heads": 6, "kernel_size": 3}]}

SWIN_STEM = {"architecture": "custom", "family": "swin", "img_size": 32, "in_chans": 3, "embed_dim": 16,
             "depths": [2, 2], "num_heads": [2, 4], "window_size": 4, "mlp_ratio": 2, "num_classes": 7,
             "qkv_bias": True, "patch_norm": True, "pad_order": "pad_first", "window_clamp": "timm",
             "downsample": "conv", "rel_pos_bias": False, "bn_eps": 1e-5,
             "stem": [{"out": 8, "kernel": 3, "stride": 2, "padding": 1, "bias": False, "bn": True, "act": "hardswish"},
                      {"out": 16, "kernel": 3, "stride": 2, "padding": 1, "bias": False, "bn": True,
                       "act": "hardswish"}],
             "attention": [{"blocks": "0-3", "type": "lsla", "dynamic_scale": True, "inner_bias": "relative",
                            "outer_bias": "relative", "values": "x", "proj": True}]}


def perturb_stem(sd, stem, g):
    """The stem's tensors (config names) far from an init: convs with std 1/sqrt(fan_in), BatchNorm
    weights around 1, biases and means spread, variances in [0.5, 1.5]."""
    for i, e in enumerate(stem):
        conv, bn = e.get("conv_name", f"stem.{i}.conv"), e.get("bn_name", f"stem.{i}.bn")
        w = sd[conv + ".weight"]
        sd[conv + ".weight"] = torch.randn(w.shape, generator=g) / math.sqrt(w[0].numel())
        if e.get("bias", True):
            sd[conv + ".bias"] = 0.1 * torch.randn(e["out"], generator=g)
        if e.get("bn"):
            sd[bn + ".weight"] = 1.0 + 0.2 * torch.randn(e["out"], generator=g)
            sd[bn + ".bias"] = 0.1 * torch.randn(e["out"], generator=g)
            sd[bn + ".running_mean"] = 0.3 * torch.randn(e["out"], generator=g)
            sd[bn + ".running_var"] = 0.5 + torch.rand(e["out"], generator=g)
            sd[bn + ".num_batches_tracked"] = torch.tensor(7, dtype=torch.int64)
    return sd


def build(name, cfg, seed):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    if cfg.get("family") == "swin":
        m = swin_ref.SwinRef(cfg)
        sd = {k: v for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}
        sd = stem_ref.rename(swin_ref.perturb(sd, seed + 2), cfg["stem"])
    else:
        from make_fixtures import init_mechanisms
        from vit_ref import init_random
        m = init_mechanisms(init_random(ViT(cfg).eval(), seed), seed + 2)
        sd = stem_ref.rename({k: v.detach().clone().float() for k, v in m.state_dict().items()}, cfg["stem"])
    return m, perturb_stem(sd, cfg["stem"], g)


def write(name, cfg, seed, inputs):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    m, sd = build(name, cfg, seed)
    stem_ref.write_fixture_model(d, cfg, sd)
    # float64 from the float32 weights as saved
    m = m.double()
    m.load_state_dict({k: v.double() if v.dtype != torch.int64 else v
                       for k, v in stem_ref.rename(sd, cfg["stem"], to_config=False).items()}, strict=True)
    x = torch.from_numpy(np.load(os.path.join(OUT, inputs))).double()
    m.train()  # the stem's BatchNorm stays in eval mode (stem_ref); nothing else depends on it
    logits = m(x)
    labels = torch.tensor([(3 + 5 * i) % cfg["num_classes"] for i in range(x.shape[0])], dtype=torch.long)
    loss = F.cross_entropy(logits, labels, label_smoothing=SMOOTHING)
    loss.backward()
    grads = stem_ref.rename({k: p.grad for k, p in m.named_parameters()}, cfg["stem"])
    st.save(os.path.join(d, "expected.safetensors"), {"logits": logits.detach().numpy().astype(np.float32)})
    out = {f"grad.{k}": v.numpy().astype(np.float32) for k, v in grads.items()}
    out["labels"] = labels.numpy().astype(np.float32)
    out["loss.ce"] = np.array([loss.item()], np.float32)
    out["loss.dp.squared"] = np.zeros(1, np.float32)  # no less-attention blocks
    st.save(os.path.join(d, "grads.safetensors"), out, metadata={"smoothing": str(SMOOTHING),
                                                                "loss_ce": repr(loss.item())})
    print(f"{name}: ce {loss.item():.6f}, {len(grads)} gradients, logits {logits[0, :3].tolist()}")


def main():
    write("vit_stem", VIT_STEM, 400, "inputs.npy")
    write("swin_stem", SWIN_STEM, 410, "inputs.npy")


if __name__ == "__main__":
    main()
