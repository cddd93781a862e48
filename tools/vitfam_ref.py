#!/usr/bin/env python3
"""The modern ViT family in plain PyTorch, written from the equations (docs/models.md, "The modern
ViT family"), not from timm (not installed) and not from attnscope's C code. Tensor names are
timm's, so a safetensors state dict with timm names loads (strictly). Needs only torch.

For an input of N = G x G patches of width D (prefix tokens: class, distillation, R registers):

    e      = patch_embed(img)                                       (N, D), bias unless pre_norm
    x      = [cls; reg] ++ (e + pos)          with no_embed_class    (pos: (N, D))
    x      = ([cls; reg] ++ e) + pos          otherwise              (pos: (P + N, D))
    x      = LN_pre(x)                        with pre_norm
    block: x = x + g1 * proj(MHA(LN1(x)));  x = x + g2 * fc2(act(fc1(LN2(x))))
           (g1, g2: LayerScale gammas with init_values, else 1; act: GELU (erf) or
            QuickGELU x * sigmoid(1.702 x))
    x      = LN(x)                            (unless fc_norm)
    pool   = x[0] (token) | mean of the patches (avg) | MAP (map) ;  fc_norm(pool) with fc_norm
    MAP:   q = W_q l + b_q (l: the learnt latent), [k; v] = W_kv x_patch + b_kv,
           o = concat_h softmax(q_h k_h^T / sqrt(d)) v_h,  y = W_p o + b_p,
           y = y + fc2(act(fc1(LN(y))))
    out    = head(pool), or pool itself when num_classes is 0 (features)

Usage:
    from vitfam_ref import VitFam
    m = VitFam(cfg)                     # cfg: attnscope's JSON config as a dict
    logits = m(x, record=rec)           # rec: a list receiving one dict per block
    python3 tools/vitfam_ref.py CONFIG.json [--weights model.safetensors] --onnx out.onnx
        (CONFIG.json: a JSON config or `attnscope info NAME --json`'s output; random weights
        without --weights; exports the model's forward at its img_size with batch as a
        dynamic axis)
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def act_fn(name):
    if name == "quick_gelu":
        return lambda t: t * torch.sigmoid(1.702 * t)
    if name == "gelu":
        return lambda t: F.gelu(t)  # the erf form
    raise ValueError(f"act_layer {name!r}")


def layer_norm(x, ln):
    """LayerNorm from its definition: (x - mean) / sqrt(var + eps) * w + b (biased variance)."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


class LN(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return layer_norm(x, self)


class LayerScale(nn.Module):
    def __init__(self, d, init):
        super().__init__()
        self.gamma = nn.Parameter(init * torch.ones(d))

    def forward(self, x):
        return x * self.gamma


class MHA(nn.Module):
    """softmax(q k^T / sqrt(d)) v per head over all tokens; fused qkv rows q, k, v, head-major."""

    def __init__(self, d, heads, qkv_bias):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=qkv_bias)
        self.proj = nn.Linear(d, d)

    def forward(self, x, rec):
        B, T, D = x.shape
        H, hd = self.heads, D // self.heads
        q, k, v = self.qkv(x).reshape(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        attn = scores.softmax(-1)
        if rec is not None:
            rec.update(attn=attn, scores=scores, q=q, k=k)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, T, D))


class Mlp(nn.Module):
    def __init__(self, d, hidden, act):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.act = act_fn(act)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, eps = c["embed_dim"], c["ln_eps"]
        self.norm1 = LN(D, eps)
        self.attn = MHA(D, c["num_heads"], c["qkv_bias"])
        self.norm2 = LN(D, eps)
        self.mlp = Mlp(D, c["mlp_hidden"], c["act_layer"])
        iv = c.get("init_values") or 0
        self.ls1 = LayerScale(D, iv) if iv else None
        self.ls2 = LayerScale(D, iv) if iv else None

    def forward(self, x, rec):
        y = self.attn(self.norm1(x), rec)
        x = x + (self.ls1(y) if self.ls1 is not None else y)
        y = self.mlp(self.norm2(x))
        return x + (self.ls2(y) if self.ls2 is not None else y)


class AttnPool(nn.Module):
    """Attention pooling with one learnt latent query (names as timm's AttentionPoolLatent)."""

    def __init__(self, c):
        super().__init__()
        D = c["embed_dim"]
        self.heads = c["num_heads"]
        self.latent = nn.Parameter(torch.zeros(1, 1, D))
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * D)
        self.proj = nn.Linear(D, D)
        self.norm = LN(D, c["ln_eps"])
        self.mlp = Mlp(D, c["mlp_hidden"], c["act_layer"])

    def forward(self, x):
        B, N, D = x.shape
        H, hd = self.heads, D // self.heads
        q = self.q(self.latent).reshape(1, H, hd)                       # (1, H, hd)
        k, v = self.kv(x).reshape(B, N, 2, H, hd).permute(2, 0, 3, 1, 4)  # (B, H, N, hd) each
        a = ((q.unsqueeze(2) @ k.transpose(-2, -1)) / math.sqrt(hd)).softmax(-1)  # (B, H, 1, N)
        self.attn_map = a[:, :, 0]  # (B, H, N): what a trace records as pool/attn
        y = self.proj((a @ v).reshape(B, D))
        return y + self.mlp(self.norm(y))


def resample_grid(pe, new_grid):
    """The grid part (1, G*G, D) to new_grid x new_grid: bicubic with antialiasing (the rule
    attnscope documents for --img-size, timm's resample_abs_pos_embed default)."""
    n, D = pe.shape[1], pe.shape[2]
    old = int(round(math.sqrt(n)))
    if old == new_grid:
        return pe
    g = pe.reshape(1, old, old, D).permute(0, 3, 1, 2)
    g = F.interpolate(g, size=(new_grid, new_grid), mode="bicubic", antialias=True)
    return g.permute(0, 2, 3, 1).reshape(1, new_grid * new_grid, D)


def normalise_config(cfg):
    """attnscope's JSON config (keys at the top level or in model_args) with its defaults."""
    c = dict(cfg)
    c.update(cfg.get("model_args") or {})
    c.setdefault("in_chans", 3)
    c.setdefault("qkv_bias", True)
    c.setdefault("class_token", True)
    c.setdefault("distilled", False)
    c.setdefault("global_pool", "token")
    c.setdefault("fc_norm", c["global_pool"] == "avg")
    c.setdefault("ln_eps", 1e-6)
    c.setdefault("reg_tokens", 0)
    c.setdefault("no_embed_class", False)
    c.setdefault("pre_norm", False)
    c.setdefault("act_layer", "gelu")
    c.setdefault("mlp_hidden", int(c.get("mlp_ratio", 4) * c["embed_dim"]))
    return c


class VitFam(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = normalise_config(cfg)
        self.c = c
        D, P = c["embed_dim"], c["patch_size"]
        self.n_prefix = int(c["class_token"]) + int(c["distilled"]) + c["reg_tokens"]
        grid = c["img_size"] // P
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(c["in_chans"], D, P, P, bias=not c["pre_norm"])
        if c["class_token"]:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        if c["distilled"]:
            self.dist_token = nn.Parameter(torch.zeros(1, 1, D))
        if c["reg_tokens"]:
            self.reg_token = nn.Parameter(torch.zeros(1, c["reg_tokens"], D))
        self.pos_prefix = 0 if c["no_embed_class"] else self.n_prefix
        self.pos_embed = nn.Parameter(torch.zeros(1, self.pos_prefix + grid * grid, D))
        if c["pre_norm"]:
            self.norm_pre = LN(D, c["ln_eps"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["depth"]))
        if c["fc_norm"]:
            self.fc_norm = LN(D, c["ln_eps"])
        else:
            self.norm = LN(D, c["ln_eps"])
        if c["global_pool"] == "map":
            self.attn_pool = AttnPool(c)
        if c["num_classes"] > 0:
            self.head = nn.Linear(D, c["num_classes"])
            if c["distilled"]:
                self.head_dist = nn.Linear(D, c["num_classes"])

    def forward(self, x, record=None):
        c, B = self.c, x.shape[0]
        grid = x.shape[-1] // c["patch_size"]
        e = self.patch_embed.proj(x).flatten(2).transpose(1, 2)          # (B, N, D)
        pre = []
        if c["class_token"]:
            pre.append(self.cls_token.expand(B, -1, -1))
        if c["distilled"]:
            pre.append(self.dist_token.expand(B, -1, -1))
        if c["reg_tokens"]:
            pre.append(self.reg_token.expand(B, -1, -1))
        pos_pre = self.pos_embed[:, :self.pos_prefix]
        pos = resample_grid(self.pos_embed[:, self.pos_prefix:], grid)
        if c["no_embed_class"]:
            x = torch.cat(pre + [e + pos], dim=1)
        else:
            x = torch.cat(pre + [e], dim=1) + torch.cat([pos_pre, pos], dim=1)
        if c["pre_norm"]:
            x = self.norm_pre(x)
        for blk in self.blocks:
            rec = {} if record is not None else None
            x = blk(x, rec)
            if record is not None:
                rec["tokens"] = x
                record.append(rec)
        if not c["fc_norm"]:
            x = self.norm(x)
        p = self.n_prefix
        if c["global_pool"] == "map":
            feats = [self.attn_pool(x[:, p:])]
        elif c["global_pool"] == "avg":
            feats = [x[:, p:].mean(1)]
        else:
            feats = [x[:, 0], x[:, 1]] if c["distilled"] else [x[:, 0]]
        if c["fc_norm"]:
            feats = [self.fc_norm(f) for f in feats]
        if c["num_classes"] <= 0:
            return feats[0]
        if c["distilled"]:
            return (self.head(feats[0]) + self.head_dist(feats[1])) / 2
        return self.head(feats[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="JSON config (attnscope's keys; `attnscope info NAME --json`)")
    ap.add_argument("--weights", help="model.safetensors with timm names (default: random)")
    ap.add_argument("--onnx", required=True, help="write the forward pass as ONNX here")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    cfg.pop("cost", None)
    m = VitFam(cfg).eval()
    if a.weights:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import safetensors_io as st
        sd = {k: torch.from_numpy(v.copy()) for k, v in st.load(a.weights).items()}
        m.load_state_dict(sd, strict=True)
    else:
        g = torch.Generator().manual_seed(a.seed)
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.copy_(0.02 * torch.randn(p.shape, generator=g) + (1.0 if name.endswith("norm.weight") or ".norm" in name and name.endswith("weight") else 0.0))
    S = m.c["img_size"]
    x = torch.randn(1, m.c["in_chans"], S, S)
    torch.onnx.export(m, (x,), a.onnx, input_names=["images"], output_names=["output"],
                      dynamic_axes={"images": {0: "batch"}, "output": {0: "batch"}}, opset_version=14)
    print(a.onnx)


if __name__ == "__main__":
    main()
