#!/usr/bin/env python3
"""Writes the training fixtures of the staged models (tests/fixtures/swin_*/ and pvt_*/
grads.safetensors) with PyTorch autograd (Debian's python3-torch): the cross-entropy (label
smoothing 0.1) of the committed float32 weights and inputs, and the gradient of every parameter
tensor, computed in float64 through tools/swin_ref.py (Swin v1 written from the paper's
equations) and tools/pvt_ref.py (PVT v2 from its paper, with LaViT's less-attention over reduced
keys). Where torchvision computes the same Swin (swin_tiny, swin_pad_tv), its own autograd
gradients are checked against swin_ref's here, so those fixtures rest on two independent
implementations. PVT v2 models with less-attention blocks also carry LaViT's diagonality term
(make_train_fixtures.py's three readings, weight 0.5) on their square maps only.
Rerun: /usr/bin/python3 tools/make_stage_train_fixtures.py [NAME ...] (FIXTURES_OUT=DIR to write elsewhere)"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import pvt_ref  # noqa: E402
import swin_ref  # noqa: E402
from make_train_fixtures import DP_READINGS, DP_WEIGHT, DEFAULT  # noqa: E402
from swin_names import from_torchvision  # noqa: E402

OUT = os.environ.get("FIXTURES_OUT", os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
SMOOTHING = 0.1
FAIL = []
# fixture -> its inputs (make_fixtures.py, make_swin_fixtures.py; swin_lmsa, swin_odd, swin_lsla
# and swin_lsla_alt are made here)
MODELS = {"swin_tiny": "inputs.npy", "swin_pad": "inputs16_1.npy", "swin_pad_tv": "inputs16_1.npy",
          "swin_lmsa": "inputs.npy", "swin_odd": "inputs28.npy", "swin_lsla": "inputs.npy",
          "swin_lsla_alt": "inputs.npy", "swin_lsla_qkv": "inputs.npy", "swin_hmait": "inputs28.npy",
          "swin_hmait_soft": "inputs28.npy"}
# torchvision computes these exactly (make_swin_fixtures.py; swin_odd: pad_first, and its last
# grid equals the window, where both clamps keep M and do not shift)
TORCHVISION = ("swin_tiny", "swin_pad_tv", "swin_odd")
# LMSA in Swin's windows: the extreme setting (1 channel per head) in stage 0, 2 per head in
# stage 1; a window the grid does not divide in stage 1 (6 -> pad slots take the q, k, v biases)
SWIN_LMSA = {"architecture": "custom", "family": "swin", "img_size": 32, "patch_size": 2, "in_chans": 3,
             "embed_dim": 16, "depths": [2, 2], "num_heads": [2, 4], "window_size": 6, "mlp_ratio": 2,
             "num_classes": 10, "qkv_bias": True, "patch_norm": True, "pad_order": "pad_first",
             "window_clamp": "timm",
             "attention": [{"blocks": "0-1", "type": "lmsa", "qk_dim": 2},
                           {"blocks": "2-3", "type": "lmsa", "qk_dim": 8}]}


# LSLA in Swin's windows (ViT-LSLA's attention, paper 000 Algorithm 1 per window): grid 16,
# window 6 (padded to 18, shifted by 3) then 8 (one window of 6 with pad slots, no shift). The
# default reading: dynamic scale, full inner bias, relative outer bias kept off the pairs the
# shift mask separates, values x; and the other of each: fixed scale, relative inner bias, full
# outer bias on every pair of the window (outer_bias_masked false), a value projection, no proj
SWIN_LSLA = {"architecture": "custom", "family": "swin", "img_size": 32, "patch_size": 2, "in_chans": 3,
             "embed_dim": 8, "depths": [2, 2], "num_heads": [2, 4], "window_size": 6, "mlp_ratio": 2,
             "num_classes": 10, "qkv_bias": True, "patch_norm": True, "pad_order": "pad_first",
             "window_clamp": "timm",
             "attention": [{"blocks": "0-3", "type": "lsla", "dynamic_scale": True, "inner_bias": "full",
                            "outer_bias": "relative", "values": "x", "proj": True}]}
# Table 4's QKV (the SLA on projected keys and values), with ViT-LSLA's Swin: no relative
# position bias of Swin's own besides LSLA's relative inner bias
SWIN_LSLA_QKV = dict(SWIN_LSLA, rel_pos_bias=False,
                     attention=[{"blocks": "0-3", "type": "lsla", "dynamic_scale": True, "inner_bias": "relative",
                                 "outer_bias": "relative", "keys": "k", "values": "v", "proj": True}])
# H-MaiT's stages (paper 003, section 5.4): global attention over each stage's grid (no window,
# shift or relative table), MaiT's hard 3 x 3 masks on some heads of each stage; an odd grid
# before the merge (28 px, patch 2: 14 -> 7)
SWIN_HMAIT = {"architecture": "custom", "family": "swin", "img_size": 28, "patch_size": 2, "in_chans": 3,
              "embed_dim": 8, "depths": [2, 2], "num_heads": [2, 4], "mlp_ratio": 2,
              "num_classes": 10, "qkv_bias": True, "patch_norm": True, "scopes": ["global", "global"],
              "attention": [{"blocks": "0-1", "type": "mait", "mask_size": [3, 3], "mask_mode": "zero"},
                            {"blocks": "2-3", "type": "mait", "mask_size": [3, 0, 0, 0], "mask_mode": "zero"}]}
# H-MaiT's stages with MaiT's soft masks (the masked scores times a learnt alpha per head, paper
# 003 section 3): soft in stage 0, hard (zero) in stage 1
SWIN_HMAIT_SOFT = dict(SWIN_HMAIT, attention=[
    {"blocks": "0-1", "type": "mait", "mask_size": [3, 3], "mask_mode": "soft"},
    {"blocks": "2-3", "type": "mait", "mask_size": [3, 0, 3, 0], "mask_mode": "soft"}])
SWIN_LSLA_ALT = dict(SWIN_LSLA, attention=[{"blocks": "0-3", "type": "lsla", "dynamic_scale": False,
                                            "inner_bias": "relative", "outer_bias": "full", "values": "v",
                                            "proj": False, "outer_bias_masked": False}])


# odd grids at both merges: 28 px, patch 2 -> 14 (window 4: padded to 16), 7 (a zero row and
# column before the merge; padded to 8), 4 (= the window: no shift)
SWIN_ODD = {"architecture": "custom", "family": "swin", "img_size": 28, "patch_size": 2, "in_chans": 3,
            "embed_dim": 8, "depths": [2, 2, 2], "num_heads": [1, 2, 4], "window_size": 4, "mlp_ratio": 2,
            "num_classes": 10, "qkv_bias": True, "patch_norm": True, "pad_order": "pad_first",
            "window_clamp": "timm"}


def make_fixture(name, cfg, seed, inputs):
    """Writes tests/fixtures/NAME: config.json, seeded and perturbed weights, and the logits of
    tools/swin_ref.py on INPUTS (expected.safetensors)."""
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(seed)
    m = swin_ref.SwinRef(cfg)
    sd = swin_ref.perturb(m.state_dict(), seed + 1)
    m.load_state_dict(sd, strict=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    st.save(os.path.join(d, "model.safetensors"), {k: v.numpy() for k, v in sd.items()}, metadata={"format": "pt"})
    x = torch.from_numpy(np.load(os.path.join(OUT, inputs)))
    with torch.no_grad():
        logits = m.double()(x.double())
    st.save(os.path.join(d, "expected.safetensors"), {"logits": logits.numpy().astype(np.float32)})


def load(name):
    d = os.path.join(OUT, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if "model_args" in cfg:
        cfg = dict(cfg["model_args"], **{k: cfg[k] for k in ("num_classes", "global_pool", "attention") if k in cfg})
    sd = st.load(os.path.join(d, "model.safetensors"))
    return d, cfg, {k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()}


def labels_for(n, classes):
    return torch.tensor([(3 + 5 * i) % classes for i in range(n)], dtype=torch.long)


def torchvision_grads(args, classes, sd, x, labels):
    """The same loss through torchvision's SwinTransformer (eval: no stochastic depth), its
    gradients renamed to timm's names."""
    from torchvision.models.swin_transformer import SwinTransformer
    tv = SwinTransformer(patch_size=[args["patch_size"]] * 2, embed_dim=args["embed_dim"], depths=args["depths"],
                         num_heads=args["num_heads"], window_size=[args["window_size"]] * 2,
                         mlp_ratio=args.get("mlp_ratio", 4), num_classes=classes).double().eval()
    swin_ref.load_torchvision(tv, {k: v.float() for k, v in sd.items()})
    tv.double()
    loss = F.cross_entropy(tv(x), labels, label_smoothing=SMOOTHING)
    loss.backward()
    return loss.item(), from_torchvision({k: p.grad for k, p in tv.named_parameters()})


# PVT v2 fixtures of make_pvt_fixtures.py -> their inputs: overlapping stem and downsampling on
# odd grids, R = 4 / 2 / 1 reductions dropping a remainder (pvt_tiny), the linear variant's pool,
# 1x1 conv, GELU and MixFFN's ReLU (pvt_li), LMSA's compressed q/k (pvt_lmsa), and LaViT's
# less-attention over reduced keys, chained, with a square map in stage 1 (pvt_less)
PVT = {"pvt_tiny": "pvt_tiny/inputs58.npy", "pvt_li": "pvt_li/inputs40.npy", "pvt_lmsa": "inputs.npy",
       "pvt_less": "inputs.npy", "pvt_lavit": "inputs.npy", "pvt_lavit_alt": "inputs.npy",
       "pvt_lavit_d1": "inputs.npy"}


def pvt_dp_loss(rec, less, n, reading):
    """LaViT's term on the square softmax maps of less-attention blocks only (a T x T' map over
    reduced keys has no diagonal): weight / (blocks n) * sum_blocks sum(term(A)) / (H T)."""
    terms = []
    for l, r in enumerate(rec):
        A = r["attn"]
        if l in less and A.shape[-1] == A.shape[-2]:
            terms.append(DP_READINGS[reading](A).sum() / (A.shape[1] * A.shape[-1]))
    if not terms:
        return torch.zeros((), dtype=torch.float64)
    return DP_WEIGHT * sum(terms) / (len(terms) * n)


def pvt_grads(name, inputs):
    d, cfg, sd = load(name)
    x = torch.from_numpy(np.load(os.path.join(OUT, inputs))).double()
    labels = labels_for(x.shape[0], cfg["num_classes"])
    less = set()
    for e in cfg.get("attention", []):
        if e["type"] == "less":
            less.update(e["blocks"])
    out = {"labels": labels.numpy().astype(np.float32)}
    meta = {"smoothing": str(SMOOTHING), "dp_weight": str(DP_WEIGHT)}
    for reading in DP_READINGS:
        m = pvt_ref.PVTv2(cfg, sd).double()
        for i in range(len(m.names)):
            getattr(m, "w%d" % i).requires_grad_(True)
        rec = []
        ce = F.cross_entropy(m(x, record=rec), labels, label_smoothing=SMOOTHING)
        dp = pvt_dp_loss(rec, less, x.shape[0], reading)
        (ce + dp).backward()
        out["loss.ce"] = np.array([ce.item()], np.float32)
        out[f"loss.dp.{reading}"] = np.array([dp.item()], np.float32)
        meta["loss_ce"], meta[f"loss_dp_{reading}"] = repr(ce.item()), repr(dp.item())
        if reading == DEFAULT or less:
            prefix = "" if reading == DEFAULT else f"{reading}."
            for i, k in enumerate(m.names):
                out[f"{prefix}grad.{k}"] = getattr(m, "w%d" % i).grad.numpy().astype(np.float32)
        print(f"{name} ({reading}): ce {ce.item():.6f}, dp {dp.item():.6g}, {len(m.names)} gradients")
        if not less:
            break
    st.save(os.path.join(d, "grads.safetensors"), out, metadata=meta)


def main():
    """python3 tools/make_stage_train_fixtures.py [NAME ...]: every fixture, or the named ones
    (into tests/fixtures/, or $FIXTURES_OUT)."""
    only = set(sys.argv[1:])
    want = (lambda n: not only or n in only)
    for name, inputs in PVT.items():
        if want(name):
            pvt_grads(name, inputs)
    made = {"swin_lmsa": (SWIN_LMSA, 320, "inputs.npy"), "swin_odd": (SWIN_ODD, 330, "inputs28.npy"),
            "swin_lsla": (SWIN_LSLA, 340, "inputs.npy"), "swin_lsla_alt": (SWIN_LSLA_ALT, 350, "inputs.npy"),
            "swin_lsla_qkv": (SWIN_LSLA_QKV, 360, "inputs.npy"), "swin_hmait": (SWIN_HMAIT, 370, "inputs28.npy"),
            "swin_hmait_soft": (SWIN_HMAIT_SOFT, 380, "inputs28.npy")}
    for name, (cfg, seed, inputs) in made.items():
        if want(name):
            make_fixture(name, cfg, seed, inputs)
    for name, inputs in MODELS.items():
        if not want(name):
            continue
        d, cfg, sd = load(name)
        args, classes = cfg, cfg["num_classes"]
        x = torch.from_numpy(np.load(os.path.join(OUT, inputs))).double()
        labels = labels_for(x.shape[0], classes)
        m = swin_ref.SwinRef(args).double()
        m.load_state_dict(sd, strict=True)
        loss = F.cross_entropy(m(x), labels, label_smoothing=SMOOTHING)
        loss.backward()
        grads = {k: p.grad for k, p in m.named_parameters()}
        worst = 0.0
        if name in TORCHVISION:
            tv_loss, tv_grads = torchvision_grads(args, classes, sd, x, labels)
            if abs(tv_loss - loss.item()) > 1e-10:
                FAIL.append(f"{name}: torchvision loss {tv_loss} vs swin_ref {loss.item()}")
            for k, g in grads.items():
                e = (tv_grads[k] - g).abs().max().item() / max(g.abs().max().item(), 1e-30)
                worst = max(worst, e)
            if worst > 1e-9:
                FAIL.append(f"{name}: torchvision's gradients differ from swin_ref's by {worst:.3g}")
        out = {f"grad.{k}": g.numpy().astype(np.float32) for k, g in grads.items()}
        out["labels"] = labels.numpy().astype(np.float32)
        out["loss.ce"] = np.array([loss.item()], np.float32)
        out["loss.dp.squared"] = np.zeros(1, np.float32)  # no less-attention blocks: LaViT's term is 0
        st.save(os.path.join(d, "grads.safetensors"), out, metadata={"smoothing": str(SMOOTHING),
                                                                    "loss_ce": repr(loss.item())})
        print(f"{name}: ce {loss.item():.6f}, {len(grads)} gradients"
              + (f", torchvision agrees to {worst:.2g}" if name in TORCHVISION else ""))
    if FAIL:
        print("\n".join(FAIL))
        sys.exit(1)


if __name__ == "__main__":
    main()
