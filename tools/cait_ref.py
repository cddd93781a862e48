#!/usr/bin/env python3
"""A plain-PyTorch CaiT (Touvron et al. 2021, "Going deeper with image transformers"), written from
the paper's equations and ../shared/design/hierarchical.md section 3.3, not from timm or from
attnscope's C. It reads a state dict with timm's Cait names and records every block:

    x = patch_embed(img) + pos_embed                      (pos_embed (1, N, D): no class slot;
                                                           at another input size its grid is
                                                           resampled: vitfam_ref.resample_grid)
    SA block i:  x += g1 * TH(LN1(x));  x += g2 * MLP(LN2(x))
        TH: L_h = (q_h * d^-1/2) k_h^T;  L'_g = sum_h Wl[g,h] L_h + bl[g]   (attn.proj_l)
            P = softmax(L');  A'_g = sum_h Ww[g,h] P_h + bw[g]              (attn.proj_w)
            out = proj(concat_g A'_g v_g)
    CA block j:  u = [cls; x];  un = LN1(u);  q = Wq un[0];  k = Wk un;  v = Wv un
        a_h = softmax((q_h * d^-1/2) k_h^T) (1 x (1+N));  cls += g1 * proj(concat_h a_h v_h)
        cls += g2 * MLP(LN2(cls));  the patch rows are not updated
    logits = head(norm([cls; x])[0])

MaiT masks (optional; "zero" mode, MaiT Eq. 1: masked logits are multiplied by 0; "soft" mode
(cfg["mait_mode"]): by a learnt alpha per head, blocks.i.attn.mask_alpha) apply to the per-head
logits L_h before proj_l (mask_mix "before_mix") or to L'_g after it ("after_mix").
Usage: logits, rec = forward(sd, cfg, images) with cfg a dict of the config keys."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vitfam_ref import resample_grid  # noqa: E402  (the --img-size rule, written once)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / 2 ** 0.5))


def linear(x, sd, name, bias=True):
    y = x @ sd[name + ".weight"].t()
    return y + sd[name + ".bias"] if bias and (name + ".bias") in sd else y


def mait_keep(grid, R):
    """(N, N) 1 where patch j lies in the R x R neighbourhood of patch i (MaiT's mask)."""
    ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    ys, xs = ys.reshape(-1), xs.reshape(-1)
    r = R // 2
    return (((ys[:, None] - ys[None, :]).abs() <= r) & ((xs[:, None] - xs[None, :]).abs() <= r)).float()


def forward(sd, cfg, img):
    D, H, P = cfg["embed_dim"], cfg["num_heads"], cfg["patch_size"]
    eps, hd = cfg.get("ln_eps", 1e-6), cfg["embed_dim"] // cfg["num_heads"]
    L0, L1 = cfg["depth"], cfg["depth_token_only"]
    masks = cfg.get("mait", {})  # block -> [R per head] (0: unmasked)
    after = cfg.get("mask_mix", "before_mix") == "after_mix"
    B = img.shape[0]
    grid = img.shape[-1] // P
    N = grid * grid
    x = torch.nn.functional.conv2d(img, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=P)
    x = x.flatten(2).transpose(1, 2) + resample_grid(sd["pos_embed"], grid)
    rec = []

    def mlp(t, p):
        return linear(gelu(linear(t, sd, p + ".mlp.fc1")), sd, p + ".mlp.fc2")

    def gamma(p, i):
        return sd.get(f"{p}.gamma_{i}", torch.ones(D))

    for i in range(L0):
        p = f"blocks.{i}"
        xn = layer_norm(x, sd[p + ".norm1.weight"], sd[p + ".norm1.bias"], eps)
        qkv = linear(xn, sd, p + ".attn.qkv").reshape(B, N, 3, H, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B, H, N, hd)
        raw = (q * hd ** -0.5) @ k.transpose(-1, -2)  # (B, H, N, N)
        keep = None
        if i in masks:
            keep = torch.stack([mait_keep(grid, R) if R else torch.ones(N, N) for R in masks[i]])
            if cfg.get("mait_mode", "zero") == "soft":  # masked entries times alpha_h
                alpha = sd[p + ".attn.mask_alpha"]
                keep = keep + (1 - keep) * alpha[:, None, None]
        if keep is not None and not after:
            raw = raw * keep
        if f"{p}.attn.proj_l.weight" in sd:
            Wl, bl = sd[p + ".attn.proj_l.weight"], sd[p + ".attn.proj_l.bias"]
            Ww, bw = sd[p + ".attn.proj_w.weight"], sd[p + ".attn.proj_w.bias"]
            mixed = torch.einsum("gh,bhij->bgij", Wl, raw) + bl[None, :, None, None]
            if keep is not None and after:
                mixed = mixed * keep
            soft = torch.softmax(mixed, -1)
            A = torch.einsum("gh,bhij->bgij", Ww, soft) + bw[None, :, None, None]
            r = {"scores_qk": raw, "scores": mixed, "attn_softmax": soft, "attn": A}
        else:
            soft = torch.softmax(raw, -1)
            A = soft
            r = {"scores": raw, "attn": A}
        out = (A @ v).transpose(1, 2).reshape(B, N, D)
        x = x + gamma(p, 1) * linear(out, sd, p + ".attn.proj")
        x = x + gamma(p, 2) * mlp(layer_norm(x, sd[p + ".norm2.weight"], sd[p + ".norm2.bias"], eps), p)
        r.update(q=q, k=k, tokens=x)
        rec.append(r)
    cls = sd["cls_token"].expand(B, 1, D)
    for j in range(L1):
        p = f"blocks_token_only.{j}"
        u = torch.cat([cls, x], 1)  # (B, 1 + N, D)
        un = layer_norm(u, sd[p + ".norm1.weight"], sd[p + ".norm1.bias"], eps)
        q = linear(un[:, :1], sd, p + ".attn.q").reshape(B, 1, H, hd).transpose(1, 2)
        k = linear(un, sd, p + ".attn.k").reshape(B, N + 1, H, hd).transpose(1, 2)
        v = linear(un, sd, p + ".attn.v").reshape(B, N + 1, H, hd).transpose(1, 2)
        s = (q * hd ** -0.5) @ k.transpose(-1, -2)  # (B, H, 1, 1 + N)
        a = torch.softmax(s, -1)
        o = (a @ v).transpose(1, 2).reshape(B, 1, D)
        cls = cls + gamma(p, 1) * linear(o, sd, p + ".attn.proj")
        cls = cls + gamma(p, 2) * mlp(layer_norm(cls, sd[p + ".norm2.weight"], sd[p + ".norm2.bias"], eps), p)
        rec.append({"scores": s, "attn": a, "q": q, "k": k, "tokens": torch.cat([cls, x], 1)})
    y = layer_norm(torch.cat([cls, x], 1), sd["norm.weight"], sd["norm.bias"], eps)
    return linear(y[:, 0], sd, "head"), rec
