#!/usr/bin/env python3
"""Loads an attnscope training checkpoint (a folder with config.json + model.safetensors, as
`attnscope train` writes them) into the PyTorch reference modules of tools/vit_ref.py and
tools/attn_ref.py, strictly (every tensor name and shape must match), and runs it.

    python3 tools/load_checkpoint.py CKPT_DIR [--images FOLDER] [--trace TRACE.h5]

--images: an ImageFolder tree (e.g. the run's heldout/ folder): prints the accuracy.
--trace:  a trace recorded from this checkpoint (attnscope record or train --record-every):
          runs the trace's own images (images/rgb) through PyTorch and compares the logits and
          every recorded attention map with the trace's; exits 1 if they differ by more than
          1e-3 (the maps are stored as float16).
Needs torch, numpy and PIL (and h5py for --trace)."""
import argparse
import glob
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
from vit_ref import ViT  # noqa: E402


def load(ckpt):
    with open(os.path.join(ckpt, "config.json")) as f:
        cfg = json.load(f)
    model = ViT(cfg).eval()
    sd = st.load(os.path.join(ckpt, "model.safetensors"))
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in sd.items()}, strict=True)
    assert not missing and not unexpected
    return model, cfg


def normalise(rgb, cfg):
    pc = cfg.get("pretrained_cfg", {})
    mean = np.array(pc.get("mean", [0.485, 0.456, 0.406]), np.float32)
    std = np.array(pc.get("std", [0.229, 0.224, 0.225]), np.float32)
    x = (rgb.astype(np.float32) / 255.0 - mean) / std
    return torch.from_numpy(x.transpose(0, 3, 1, 2).copy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("--images")
    ap.add_argument("--trace")
    a = ap.parse_args()
    model, cfg = load(a.ckpt)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{a.ckpt}: loaded into tools/vit_ref.ViT ({n_params} parameters, "
          f"{len(model.state_dict())} tensors, strict)")
    ok = True
    if a.images:
        from PIL import Image
        classes = sorted(d for d in os.listdir(a.images) if os.path.isdir(os.path.join(a.images, d)))
        files = [(f, i) for i, c in enumerate(classes) for f in sorted(glob.glob(os.path.join(a.images, c, "*.png")))]
        rgb = np.stack([np.asarray(Image.open(f).convert("RGB")) for f, _ in files])
        with torch.no_grad():
            pred = model(normalise(rgb, cfg)).argmax(-1).numpy()
        acc = float((pred == np.array([i for _, i in files])).mean())
        print(f"{a.images}: {len(files)} images, accuracy {100 * acc:.1f}% in PyTorch")
    if a.trace:
        import h5py
        with h5py.File(a.trace, "r") as f:
            rgb = f["images/rgb"][:]
            logits = f["images/logits"][:]
            rec = []
            with torch.no_grad():
                got = model(normalise(rgb, cfg), record=rec)
            err = float(np.abs(got.numpy() - logits).max())
            print(f"{a.trace}: {len(rgb)} images, logits max |PyTorch - attnscope| = {err:.2e}")
            ok &= err < 1e-3 * max(1.0, float(np.abs(logits).max()))
            for name in sorted(f["layers"].keys()):
                if "attn" not in f["layers"][name]:
                    continue
                maps = f["layers"][name]["attn"][:].astype(np.float32)
                ref = rec[int(name)]["attn"].numpy()
                e = float(np.abs(maps - ref[:, :, :maps.shape[2]]).max())
                ok &= e < 1e-3
                print(f"  layer {name} attn {maps.shape}: max difference {e:.2e}")
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
