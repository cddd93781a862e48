#!/usr/bin/env python3
"""Writes the training fixtures of tests/fixtures/ with PyTorch autograd (Debian's
python3-torch): for every fixture model, the loss and the gradient of every parameter tensor
(grads.safetensors), and a few AdamW steps with gradient clipping (adamw.safetensors).
Rerun after changing it: python3 tools/make_train_fixtures.py [FIXTURE_DIR]
The gradients are computed in float64 from the committed float32 weights and inputs, so they
are the exact reference the C float32 backward is compared with (tests/test_train.c)."""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
from make_fixtures import MODELS, MECH_MODELS  # noqa: E402
from vit_ref import ViT  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
SMOOTHING = 0.1  # label smoothing of the cross-entropy
DP_WEIGHT = 0.5  # LaViT's diagonality-preserving term (docs/training.md)


def dp_loss(model, rec, n):
    """weight / (blocks * n * H * T) * sum over less-attention blocks, images and heads of
    sum_ij |A_ij - A_ji| - sum_i ((T - 1) A_ii - sum_{j != i} A_ij)."""
    terms = []
    for blk, r in zip(model.blocks, rec):
        if type(blk.attn).__name__ != "LessAttention":
            continue
        A = r["attn"]  # (n, H, T, T) softmax maps
        T = A.shape[-1]
        sym = (A - A.transpose(-2, -1)).abs().sum(dim=(-2, -1))
        d = torch.diagonal(A, dim1=-2, dim2=-1)
        diag = ((T - 1) * d - (A.sum(-1) - d)).sum(-1)
        terms.append((sym - diag).sum() / (A.shape[1] * T))
    if not terms:
        return torch.zeros((), dtype=torch.float64)
    return DP_WEIGHT * sum(terms) / (len(terms) * n)


def grads_for(name, cfg, x, labels):
    d = os.path.join(OUT, name)
    model = ViT(cfg).double()
    sd = st.load(os.path.join(d, "model.safetensors"))
    model.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()})
    model.train()
    rec = []
    logits = model(x.double(), record=rec)
    ce = F.cross_entropy(logits, labels, label_smoothing=SMOOTHING)
    dp = dp_loss(model, rec, x.shape[0])
    (ce + dp).backward()
    out = {"loss.ce": np.array([ce.item()], np.float64).astype(np.float32),
           "loss.dp": np.array([dp.item()], np.float64).astype(np.float32),
           "labels": labels.numpy().astype(np.float32)}
    for k, p in model.named_parameters():
        out[f"grad.{k}"] = p.grad.numpy().astype(np.float32)
    st.save(os.path.join(d, "grads.safetensors"), out,
            metadata={"smoothing": str(SMOOTHING), "dp_weight": str(DP_WEIGHT),
                      "loss_ce": repr(ce.item()), "loss_dp": repr(dp.item())})


def adamw_fixture():
    """Five AdamW steps on two tensors (one decayed, one not) with clipping at norm 1 and a
    per-step learning rate, as the trainer applies them."""
    g = torch.Generator().manual_seed(7)
    w = torch.randn(6, 5, generator=g, dtype=torch.float64)
    b = torch.randn(5, generator=g, dtype=torch.float64)
    wp, bp = torch.nn.Parameter(w.clone()), torch.nn.Parameter(b.clone())
    opt = torch.optim.AdamW([{"params": [wp], "weight_decay": 0.05}, {"params": [bp], "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    out = {"w0": w.numpy().astype(np.float32), "b0": b.numpy().astype(np.float32)}
    lrs = [1e-3, 4e-3, 1e-2, 8e-3, 2e-3]
    for s, lr in enumerate(lrs):
        gw = (torch.randn(6, 5, generator=g, dtype=torch.float64) * (3.0 if s == 1 else 0.2))
        gb = torch.randn(5, generator=g, dtype=torch.float64) * 0.2
        out[f"gw{s}"], out[f"gb{s}"] = gw.numpy().astype(np.float32), gb.numpy().astype(np.float32)
        wp.grad, bp.grad = gw.float().double().clone(), gb.float().double().clone()
        norm = torch.nn.utils.clip_grad_norm_([wp, bp], 1.0)
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        out[f"w{s + 1}"] = wp.detach().numpy().astype(np.float32)
        out[f"b{s + 1}"] = bp.detach().numpy().astype(np.float32)
        out[f"norm{s}"] = np.array([norm.item()], np.float32)
    out["lr"] = np.array(lrs, np.float32)
    st.save(os.path.join(OUT, "adamw.safetensors"), out)


def main():
    x = torch.from_numpy(np.load(os.path.join(OUT, "inputs.npy")))
    for name, cfg in {**MODELS, **MECH_MODELS}.items():
        labels = torch.tensor([3 % cfg["num_classes"], 1], dtype=torch.long)
        grads_for(name, cfg, x, labels)
    adamw_fixture()
    print("training fixtures written to", os.path.abspath(OUT))


if __name__ == "__main__":
    main()
