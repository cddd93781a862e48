"""A convolutional stem in plain PyTorch, for the references of tools/vit_ref.py and
tools/swin_ref.py: the config's "stem" list (docs/models.md, "Convolutional stems"), each entry
nn.Conv2d(k, s, p, bias) -> BatchNorm2d with its running statistics (eval mode always, even under
model.train(): attnscope's "frozen" BatchNorm) -> ReLU / ReLU6 / Hardswish, PyTorch's own modules.
Refined-ViT's PatchEmbed_cnn and MPViT's stem (ViT-LSLA) are such lists.

Parameters are named stem.<i>.conv.* and stem.<i>.bn.* (attnscope's default names, MPViT's);
rename() maps them to an entry's conv_name / bn_name and back."""
import json
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import safetensors_io as st

ACTS = {"none": lambda x: x, "relu": F.relu, "relu6": F.relu6, "hardswish": F.hardswish}


class ConvBN(nn.Module):
    def __init__(self, cin, e, eps):
        super().__init__()
        self.e, self.eps = e, eps
        self.conv = nn.Conv2d(cin, e["out"], e["kernel"], e["stride"], e.get("padding", 0), bias=e.get("bias", True))
        if e.get("bn", False):
            self.bn = nn.BatchNorm2d(e["out"], eps=eps)

    def forward(self, x):
        x = self.conv(x)
        if self.e.get("bn", False):  # eval-mode statistics whatever the module's mode
            x = F.batch_norm(x, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
                             training=False, eps=self.eps)
        return ACTS[self.e.get("act", "none")](x)


class ConvStem(nn.Module):
    """images (B, C, S, S) -> feature map (B, C_last, G, G)."""

    def __init__(self, stem, in_chans, eps=1e-5):
        super().__init__()
        layers, cin = [], in_chans
        for e in stem:
            layers.append(ConvBN(cin, e, eps))
            cin = e["out"]
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def side(stem, img):
    for e in stem:
        img = (img + 2 * e.get("padding", 0) - e["kernel"]) // e["stride"] + 1
    return img


def rename(sd, stem, to_config=True):
    """State-dict keys stem.layers.<i>.conv.* <-> the config's names (conv_name, bn_name; default
    stem.<i>.conv, stem.<i>.bn)."""
    pairs = []
    for i, e in enumerate(stem):
        pairs.append((f"stem.layers.{i}.conv.", e.get("conv_name", f"stem.{i}.conv") + "."))
        pairs.append((f"stem.layers.{i}.bn.", e.get("bn_name", f"stem.{i}.bn") + "."))
    out = {}
    for k, v in sd.items():
        for a, b in pairs:
            src, dst = (a, b) if to_config else (b, a)
            if k.startswith(src):
                k = dst + k[len(src):]
                break
        out[k] = v
    return out


def write_fixture_model(d, cfg, sd):
    """A fixture folder's config.json and model.safetensors: float32 weights, int64 tensors
    (BatchNorm's num_batches_tracked) kept as they are."""
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    st.save(os.path.join(d, "model.safetensors"),
            {k: v.numpy() if v.dtype == torch.int64 else v.numpy().astype(np.float32) for k, v in sd.items()},
            metadata={"format": "pt"})
