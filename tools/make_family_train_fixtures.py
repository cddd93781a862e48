#!/usr/bin/env python3
"""Writes the training fixtures of the modern ViT family and CaiT (grads.safetensors in
tests/fixtures/vf_deit3, vf_clip, vf_regavg, vf_p14, cait_tiny, cait_mait_before,
cait_mait_after, cait_mait_soft) with PyTorch autograd (Debian's python3-torch): the cross-entropy (label
smoothing 0.1) of the committed float32 weights and inputs and the gradient of every parameter,
computed in float64 through tools/vitfam_ref.py (LayerScale, registers, no_embed_class, pre_norm,
QuickGELU, avg pooling with fc_norm) and tools/cait_ref.py (talking heads, class attention,
LayerScale, MaiT's masks before or after the mix, zero or soft), both written from the papers' equations.
Rerun: /usr/bin/python3 tools/make_family_train_fixtures.py [FIXTURE_DIR]"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import cait_ref  # noqa: E402
from make_stage_train_fixtures import OUT, SMOOTHING, load, labels_for  # noqa: E402
from vitfam_ref import VitFam  # noqa: E402

# fixture -> its inputs: LayerScale at 1e-6 with no_embed_class (vf_deit3), pre_norm and
# QuickGELU without a patch bias (vf_clip), registers without a class token under avg pooling
# and fc_norm (vf_regavg), registers with LayerScale at patch 14 (vf_p14)
VITFAM = {"vf_deit3": "inputs.npy", "vf_clip": "inputs.npy", "vf_regavg": "inputs.npy", "vf_p14": "inputs42.npy"}
CAIT = ("cait_tiny", "cait_mait_before", "cait_mait_after", "cait_mait_soft")


def save(d, loss, grads, labels):
    out = {f"grad.{k}": g.numpy().astype(np.float32) for k, g in grads.items()}
    out["labels"] = labels.numpy().astype(np.float32)
    out["loss.ce"] = np.array([loss], np.float32)
    out["loss.dp.squared"] = np.zeros(1, np.float32)  # no less-attention blocks: LaViT's term is 0
    st.save(os.path.join(d, "grads.safetensors"), out, metadata={"smoothing": str(SMOOTHING), "loss_ce": repr(loss)})


def vitfam_grads(name, inputs):
    d, cfg, sd = load(name)  # load() flattens model_args
    x = torch.from_numpy(np.load(os.path.join(OUT, inputs))).double()
    labels = labels_for(x.shape[0], cfg["num_classes"])
    m = VitFam(cfg).double()
    m.load_state_dict(sd, strict=True)
    loss = F.cross_entropy(m(x), labels, label_smoothing=SMOOTHING)
    loss.backward()
    grads = {k: p.grad for k, p in m.named_parameters()}
    save(d, loss.item(), grads, labels)
    print(f"{name}: ce {loss.item():.6f}, {len(grads)} gradients")


def cait_grads(name):
    d, cfg, sd = load(name)
    x = torch.from_numpy(np.load(os.path.join(OUT, "inputs.npy"))).double()
    labels = labels_for(x.shape[0], cfg["num_classes"])
    masks, mode = {}, "zero"
    for e in cfg.get("attention", []):  # MaiT entries: per block the mask size of each head
        assert e["type"] == "mait", e
        mode = e.get("mask_mode", "zero")
        for b in e["blocks"]:
            masks[b] = e["mask_size"]
    for v in sd.values():
        v.requires_grad_(True)
    logits, _ = cait_ref.forward(sd, dict(cfg, mait=masks, mait_mode=mode), x)
    loss = F.cross_entropy(logits, labels, label_smoothing=SMOOTHING)
    loss.backward()
    save(d, loss.item(), {k: v.grad for k, v in sd.items()}, labels)
    print(f"{name}: ce {loss.item():.6f}, {len(sd)} gradients")


def main():
    for name, inputs in VITFAM.items():
        vitfam_grads(name, inputs)
    for name in CAIT:
        cait_grads(name)


if __name__ == "__main__":
    main()
