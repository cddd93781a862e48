"""Plain PyTorch ViT/DeiT, written from timm's VisionTransformer (eval mode) with timm's tensor
names, so that state dicts load in both. Independent of attnscope's C code; used to write the
reference fixtures (tools/make_fixtures.py) and by bench/compare.py. Needs only torch."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    """timm's multi-head attention. forward(x, prev) returns (output, pre-softmax scores)."""

    def __init__(self, dim, heads, qkv_bias, scale=None):
        super().__init__()
        self.heads = heads
        self.scale = scale or (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.record = None  # dict to fill with attn, scores, q, k when set

    def scores_of(self, q, k):
        return (q * self.scale) @ k.transpose(-2, -1)

    def maps(self, attn):
        """Refiner changes the maps after the softmax; plain attention keeps them."""
        return attn

    def forward(self, x, prev=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        scores = self.scores_of(q, k)
        attn = self.maps(scores.softmax(dim=-1))
        if self.record is not None:
            self.record.update(attn=attn, scores=scores, q=q, k=k)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x), scores


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()  # exact erf form
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, qkv_bias, eps, attn=None, init_values=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = attn if attn is not None else Attention(dim, heads, qkv_bias)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, hidden)
        if init_values:  # LayerScale (CaiT, DeiT III): x + g1 * attn, x + g2 * mlp, per channel
            self.ls1 = nn.Parameter(torch.full((dim,), float(init_values)))
            self.ls2 = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x, prev=None):
        y, scores = self.attn(self.norm1(x), prev)
        ls = hasattr(self, "ls1")
        x = x + (self.ls1 * y if ls else y)
        y = self.mlp(self.norm2(x))
        return x + (self.ls2 * y if ls else y), scores


class PatchEmbed(nn.Module):
    def __init__(self, patch, in_chans, dim):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


def resample_abs_pos_embed(posemb, new_grid, prefix):
    """timm.layers.resample_abs_pos_embed with its defaults (bicubic, antialias=True)."""
    n = posemb.shape[1] - prefix
    old = int(math.sqrt(n))
    if old == new_grid:
        return posemb
    pre, pe = posemb[:, :prefix], posemb[:, prefix:]
    D = pe.shape[-1]
    pe = pe.reshape(1, old, old, D).permute(0, 3, 1, 2)
    pe = F.interpolate(pe, size=(new_grid, new_grid), mode="bicubic", antialias=True)
    pe = pe.permute(0, 2, 3, 1).reshape(1, -1, D)
    return torch.cat([pre, pe], dim=1)


class ViT(nn.Module):
    """cfg keys as attnscope's JSON config: img_size, patch_size, in_chans, embed_dim, depth,
    num_heads, mlp_hidden, num_classes, qkv_bias, class_token, distilled, global_pool, fc_norm,
    init_values (LayerScale, as parameters ls1, ls2 of each block), and "attention": one dict
    per block (tools/attn_ref.py; absent = all vanilla)."""

    def __init__(self, cfg):
        super().__init__()
        c = dict(cfg)
        self.c = c
        D = c["embed_dim"]
        self.prefix = int(c["class_token"]) + int(c.get("distilled", False))
        if c.get("stem"):  # a convolutional stem is the patch embedding (tools/stem_ref.py)
            import stem_ref
            self.stem = stem_ref.ConvStem(c["stem"], c["in_chans"], c.get("bn_eps", 1e-5))
            grid = stem_ref.side(c["stem"], c["img_size"])
        else:
            grid = c["img_size"] // c["patch_size"]
            self.patch_embed = PatchEmbed(c["patch_size"], c["in_chans"], D)
        if c["class_token"]:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        if c.get("distilled"):
            self.dist_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.prefix + grid * grid, D))
        eps = c.get("ln_eps", 1e-6)
        attention = c.get("attention") or [{"type": "vanilla"}] * c["depth"]
        from attn_ref import make_attention  # the papers' mechanisms, one class each
        self.blocks = nn.ModuleList(
            Block(D, c["num_heads"], c["mlp_hidden"], c["qkv_bias"], eps,
                  make_attention(attention[l], D, c["num_heads"], c["qkv_bias"], self.prefix, grid),
                  c.get("init_values"))
            for l in range(c["depth"]))
        norm = nn.LayerNorm(D, eps=eps)
        if c.get("fc_norm"):
            self.fc_norm = norm
        else:
            self.norm = norm
        if c["num_classes"] > 0:
            self.head = nn.Linear(D, c["num_classes"])
            if c.get("distilled"):
                self.head_dist = nn.Linear(D, c["num_classes"])

    def forward(self, x, record=None):
        """record: a list that receives one dict per block (attn, scores, q, k, tokens)."""
        B = x.shape[0]
        if hasattr(self, "stem"):
            x = self.stem(x)
            grid = x.shape[-1]
            x = x.flatten(2).transpose(1, 2)
        else:
            grid = x.shape[-1] // self.c["patch_size"]
            x = self.patch_embed(x)
        pre = []
        if self.c["class_token"]:
            pre.append(self.cls_token.expand(B, -1, -1))
        if self.c.get("distilled"):
            pre.append(self.dist_token.expand(B, -1, -1))
        x = torch.cat(pre + [x], dim=1)
        x = x + resample_abs_pos_embed(self.pos_embed, grid, self.prefix)
        prev = None  # pre-softmax scores handed to a following less-attention block
        for blk in self.blocks:
            rec = {} if record is not None else None
            blk.attn.record = rec
            x, prev = blk(x, prev)
            blk.attn.record = None
            if record is not None:
                rec["tokens"] = x
                record.append(rec)
        if self.c.get("global_pool", "token") == "avg":
            if not self.c.get("fc_norm"):
                x = self.norm(x)
            x = x[:, self.prefix:].mean(dim=1)
            if self.c.get("fc_norm"):
                x = self.fc_norm(x)
            feats = (x,)
        else:
            x = self.norm(x) if not self.c.get("fc_norm") else x
            feats = (x[:, 0], x[:, 1]) if self.c.get("distilled") else (x[:, 0],)
            if self.c.get("fc_norm"):
                feats = tuple(self.fc_norm(f) for f in feats)
        if self.c["num_classes"] <= 0:
            return feats[0]
        if self.c.get("distilled"):
            return (self.head(feats[0]) + self.head_dist(feats[1])) / 2
        return self.head(feats[0])


def init_random(model, seed):
    """Deterministic weights with some spread in LayerNorm scales, so mistakes show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1] if p.dim() >= 2 else 1
                std = 0.3 if p.dim() < 2 or "token" in name or "pos" in name else 1.2 / math.sqrt(fan_in)
                if "patch_embed" in name:
                    std = 1.0 / math.sqrt(p[0].numel())
                p.copy_(std * torch.randn(p.shape, generator=g))
    return model
