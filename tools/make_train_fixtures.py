#!/usr/bin/env python3
"""Writes the training fixtures of tests/fixtures/ with PyTorch autograd (Debian's
python3-torch): for every fixture model, the loss and the gradient of every parameter tensor
(grads.safetensors) under both readings of LaViT's diagonality-preserving loss (docs/training.md), and a few AdamW steps with gradient clipping (adamw.safetensors).
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


def symmetry(A):
    """LaViT Eq. 9, first line: sum_i sum_j |A_ij - A_ji| per map (Eq. 8: A_ij = A_ji)."""
    return (A - A.transpose(-2, -1)).abs().sum(dim=(-2, -1))


def dp_map_squared(A):
    """Eq. 8 enforced with squared violations: sum_ij (A_ij - A_ji)^2 for symmetry, and
    max(0, A_ij - A_ii)^2 for every pair (i, j != i) whose entry rises above its row's diagonal."""
    T = A.shape[-1]
    d = torch.diagonal(A, dim1=-2, dim2=-1)
    sym = ((A - A.transpose(-2, -1)) ** 2).sum(dim=(-2, -1))
    excess = torch.relu(A - d.unsqueeze(-1)) ** 2
    off = 1.0 - torch.eye(T, dtype=A.dtype)
    return sym + (excess * off).sum(dim=(-2, -1))


def dp_map_hinge(A):
    """The hinge reading of Eq. 9's second line: Eq. 8 asks A_ii > A_ij for every j != i, so each
    pair (i, j != i) costs max(0, A_ij - A_ii); zero once every row's diagonal dominates."""
    T = A.shape[-1]
    d = torch.diagonal(A, dim1=-2, dim2=-1)                 # (..., T): A_ii
    excess = torch.relu(A - d.unsqueeze(-1))                # (..., i, j): max(0, A_ij - A_ii)
    off = 1.0 - torch.eye(T, dtype=A.dtype)                 # j != i
    return symmetry(A) + (excess * off).sum(dim=(-2, -1))


def dp_map_flipped(A):
    """Eq. 9 with the sign of its second sum flipped (so that minimising favours the diagonal):
    sum_ij |A_ij - A_ji| - sum_i ((N - 1) A_ii - sum_{j != i} A_ij)."""
    T = A.shape[-1]
    d = torch.diagonal(A, dim1=-2, dim2=-1)
    return symmetry(A) - ((T - 1) * d - (A.sum(-1) - d)).sum(-1)


DP_READINGS = {"squared": dp_map_squared, "hinge": dp_map_hinge, "flipped": dp_map_flipped}
DEFAULT = "squared"  # attnscope train's default reading


def dp_loss(model, rec, n, reading):
    """weight / (blocks * n * H * T) * sum over less-attention blocks, images and heads of the
    reading's per-map term, on the softmax maps A."""
    terms = []
    for blk, r in zip(model.blocks, rec):
        if type(blk.attn).__name__ != "LessAttention":
            continue
        A = r["attn"]  # (n, H, T, T) softmax maps
        terms.append(DP_READINGS[reading](A).sum() / (A.shape[1] * A.shape[-1]))
    if not terms:
        return torch.zeros((), dtype=torch.float64)
    return DP_WEIGHT * sum(terms) / (len(terms) * n)


def grads_for(name, cfg, x, labels):
    """The CE loss, and for each reading of LaViT's term its value and the gradients of CE + term:
    grad.NAME for the default reading, READING.grad.NAME for the others, the latter only where
    the model has less-attention blocks (elsewhere the term is 0 and the readings share grad.NAME)."""
    d = os.path.join(OUT, name)
    sd = st.load(os.path.join(d, "model.safetensors"))
    out = {"labels": labels.numpy().astype(np.float32)}
    meta = {"smoothing": str(SMOOTHING), "dp_weight": str(DP_WEIGHT)}
    for reading in DP_READINGS:
        model = ViT(cfg).double()
        model.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()})
        model.train()
        rec = []
        logits = model(x.double(), record=rec)
        ce = F.cross_entropy(logits, labels, label_smoothing=SMOOTHING)
        dp = dp_loss(model, rec, x.shape[0], reading)
        (ce + dp).backward()
        has_less = any(type(b.attn).__name__ == "LessAttention" for b in model.blocks)
        prefix = "" if reading == DEFAULT else f"{reading}."
        out["loss.ce"] = np.array([ce.item()], np.float32)
        out[f"loss.dp.{reading}"] = np.array([dp.item()], np.float32)
        meta[f"loss_dp_{reading}"] = repr(dp.item())
        meta["loss_ce"] = repr(ce.item())
        if reading == DEFAULT or has_less:
            for k, p in model.named_parameters():
                out[f"{prefix}grad.{k}"] = p.grad.numpy().astype(np.float32)
        if reading == "hinge" and has_less:
            # how much of the hinge is active: a test of its gradient needs active pairs
            act = 0
            for blk, r in zip(model.blocks, rec):
                if type(blk.attn).__name__ == "LessAttention":
                    A = r["attn"]
                    dg = torch.diagonal(A, dim1=-2, dim2=-1).unsqueeze(-1)
                    act += int(((A > dg) & (torch.eye(A.shape[-1]) == 0)).sum())
            print(f"{name}: hinge {dp.item():.6g}, {act} active pairs")
    st.save(os.path.join(d, "grads.safetensors"), out, metadata=meta)


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
