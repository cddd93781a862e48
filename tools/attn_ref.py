"""The attention mechanisms of the papers attnscope follows, in plain PyTorch, straight from
their equations (docs/models.md quotes them). Independent of attnscope's C code: this is the
reference the fixtures of tools/make_fixtures.py are computed with. Module and tensor names are
the ones attnscope loads (blocks.L.attn.<name>).

Every module's forward(x, prev) returns (output before the residual add, pre-softmax scores);
prev is the previous block's scores (used by LaViT's less-attention only). With .record set to a
dict, the module stores attn (the map that multiplies the values), scores, q, k and its own
intermediate maps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from vit_ref import Attention


def split_heads(t, heads):
    """(B, N, W) -> (B, heads, N, W / heads)"""
    B, N, W = t.shape
    return t.reshape(B, N, heads, W // heads).transpose(1, 2)


def merge_heads(t):
    """(B, heads, N, d) -> (B, N, heads * d)"""
    B, H, N, d = t.shape
    return t.transpose(1, 2).reshape(B, N, H * d)


class LMSA(nn.Module):
    """Low-relation MSA: q and k projected to qk_dim in total (qk_dim / heads per head), v keeps
    the full width. softmax(q k^T * scale) v, scale = 1/sqrt(qk_dim / heads) by default."""

    def __init__(self, dim, heads, qkv_bias, qk_dim, scale=None):
        super().__init__()
        self.heads = heads
        self.scale = scale or (qk_dim // heads) ** -0.5
        self.q = nn.Linear(dim, qk_dim, bias=qkv_bias)
        self.k = nn.Linear(dim, qk_dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.record = None

    def forward(self, x, prev=None):
        q, k, v = (split_heads(f(x), self.heads) for f in (self.q, self.k, self.v))
        scores = q @ k.transpose(-2, -1) * self.scale
        attn = scores.softmax(-1)
        if self.record is not None:
            self.record.update(attn=attn, scores=scores, q=q, k=k)
        return self.proj(merge_heads(attn @ v)), scores


def swin_relative_index(M):
    """Swin Transformer's relative_position_index for an M x M window: (M*M, M*M)."""
    coords = torch.stack(torch.meshgrid(torch.arange(M), torch.arange(M), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += M - 1
    rel[:, :, 1] += M - 1
    rel[:, :, 0] *= 2 * M - 1
    return rel.sum(-1)


class LSLA(nn.Module):
    """ViT-LSLA, the paper's Algorithm 1:
        Q = fc_q(X); K = V = X split into heads (V = fc_v(X) for the QXV ablation, and
        K = fc_k(X) as well for Table 4's QKV)
        scores = (Q X^T) * DS + B_inner        (DS -> 1/sqrt(d) for the fixed-scale ablation)
        weights = softmax(scores) + B_outer
        out = proj(concat(weights X))          (no proj for the NP ablation)
    Biases: full (H, N, N) tables, or Swin relative-position tables ((2M-1)^2, H) for an M x M
    window of tokens."""

    def __init__(self, dim, heads, qkv_bias, N, M, dynamic_scale=True, inner_bias="full",
                 outer_bias="full", values="x", proj=True, scale=None, keys="x"):
        super().__init__()
        self.heads, self.N, self.M = heads, N, M
        self.scale = scale or (dim // heads) ** -0.5
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        if keys == "k":  # Table 4's QKV: projected keys
            self.k = nn.Linear(dim, dim, bias=qkv_bias)
        if values == "v":
            self.v = nn.Linear(dim, dim, bias=qkv_bias)
        if dynamic_scale:
            self.ds = nn.Parameter(torch.zeros(N, N))
        self.kinds = {"inner": inner_bias, "outer": outer_bias}
        for which, kind in self.kinds.items():
            if kind == "full":
                setattr(self, f"{which}_bias", nn.Parameter(torch.zeros(heads, N, N)))
            elif kind == "relative":
                setattr(self, f"{which}_bias_table", nn.Parameter(torch.zeros((2 * M - 1) ** 2, heads)))
        if M:
            self.register_buffer("relative_position_index", swin_relative_index(M), persistent=False)
        if proj:
            self.proj = nn.Linear(dim, dim)
        self.record = None

    def bias(self, which):
        kind = self.kinds[which]
        if kind == "full":
            return getattr(self, f"{which}_bias")
        if kind == "relative":
            table = getattr(self, f"{which}_bias_table")
            idx = self.relative_position_index.reshape(-1)
            return table[idx].reshape(self.N, self.N, self.heads).permute(2, 0, 1)
        return None

    def forward(self, x, prev=None):
        q = split_heads(self.q(x), self.heads)
        xk = split_heads(self.k(x) if hasattr(self, "k") else x, self.heads)
        v = split_heads(self.v(x), self.heads) if hasattr(self, "v") else split_heads(x, self.heads)
        scores = q @ xk.transpose(-2, -1)
        scores = scores * self.ds if hasattr(self, "ds") else scores * self.scale
        if self.bias("inner") is not None:
            scores = scores + self.bias("inner")
        soft = scores.softmax(-1)
        weights = soft + self.bias("outer") if self.bias("outer") is not None else soft
        if self.record is not None:
            self.record.update(attn=weights, scores=scores, q=q, k=xk, attn_softmax=soft)
        out = merge_heads(weights @ v)
        return (self.proj(out) if hasattr(self, "proj") else out), scores


class LessAttention(nn.Module):
    """LaViT's less-attention layer: A^l = Psi(Theta(A^{l-1})^T)^T with learnable N x N linear
    maps, Z = softmax(A^l) V^l, V^l = fc_v(X): the only projection besides the output proj."""

    def __init__(self, dim, heads, qkv_bias, N):
        super().__init__()
        self.heads = heads
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.theta = nn.Linear(N, N, bias=False)
        self.psi = nn.Linear(N, N, bias=False)
        self.proj = nn.Linear(dim, dim)
        self.record = None

    def forward(self, x, prev):
        scores = self.psi(self.theta(prev).transpose(-2, -1)).transpose(-2, -1)
        attn = scores.softmax(-1)
        if self.record is not None:
            self.record.update(attn=attn, scores=scores)
        return self.proj(merge_heads(attn @ split_heads(self.v(x), self.heads))), scores


def mait_masks(heads, mask_size, prefix, grid):
    """M (heads, N, N): 1 inside the R x R neighbourhood of the query patch, 0 outside; prefix
    tokens' rows and columns all 1; heads with R = 0 all 1."""
    ys, xs = torch.div(torch.arange(grid * grid), grid, rounding_mode="floor"), torch.arange(grid * grid) % grid
    N = prefix + grid * grid
    M = torch.ones(heads, N, N)
    for h, R in enumerate(mask_size):
        if R:
            near = ((ys[:, None] - ys[None, :]).abs() <= R // 2) & ((xs[:, None] - xs[None, :]).abs() <= R // 2)
            M[h, prefix:, prefix:] = near.float()
    return M


class MaiT(Attention):
    """MaiT masked heads: scores = M * (q k^T / sqrt(d)) (elementwise; masked entries become 0,
    so they still weigh e^0 in the softmax). soft: masked entries are scaled by a learnable
    per-head alpha in (0, 1) instead. neg_inf: masked entries are -inf (removed)."""

    def __init__(self, dim, heads, qkv_bias, mask_size, prefix, grid, mask_mode="zero", scale=None):
        super().__init__(dim, heads, qkv_bias, scale)
        self.mode = mask_mode
        self.register_buffer("M", mait_masks(heads, mask_size, prefix, grid), persistent=False)
        if mask_mode == "soft":
            self.mask_alpha = nn.Parameter(torch.full((heads,), 0.5))

    def scores_of(self, q, k):
        s = super().scores_of(q, k)
        if self.mode == "zero":
            return self.M * s
        if self.mode == "soft":
            a = self.mask_alpha.reshape(-1, 1, 1)
            return (self.M + (1 - self.M) * a) * s
        return s.masked_fill(self.M == 0, float("-inf"))


class Refiner(Attention):
    """Refiner: expansion of the H softmax maps to H' by a learnable linear combination, a
    head-wise k x k convolution of each expanded N x N map with zero padding (distributed local
    attention), a linear reduction back to H maps, which multiply V."""

    def __init__(self, dim, heads, qkv_bias, expanded_heads, kernel_size=3, scale=None):
        super().__init__(dim, heads, qkv_bias, scale)
        E = expanded_heads
        self.expand = nn.Linear(heads, E, bias=False)
        self.dla = nn.Conv2d(E, E, kernel_size, padding=kernel_size // 2, groups=E, bias=False)
        self.reduce = nn.Linear(E, heads, bias=False)

    def maps(self, attn):
        expanded = torch.einsum("eh,bhnm->benm", self.expand.weight, attn)
        convolved = self.dla(expanded)
        reduced = torch.einsum("he,benm->bhnm", self.reduce.weight, convolved)
        if self.record is not None:
            self.record.update(attn_expanded=expanded, attn_convolved=convolved)
        return reduced


def make_attention(spec, dim, heads, qkv_bias, prefix, grid):
    """One block's module from its entry of the config's "attention" list."""
    t = spec.get("type", "vanilla")
    scale = spec.get("scale")
    N = prefix + grid * grid
    if t == "vanilla":
        return Attention(dim, heads, qkv_bias, scale)
    if t == "lmsa":
        return LMSA(dim, heads, qkv_bias, spec["qk_dim"], scale)
    if t == "lsla":
        return LSLA(dim, heads, qkv_bias, N, grid if prefix == 0 else 0,
                    spec.get("dynamic_scale", True), spec.get("inner_bias", "full"),
                    spec.get("outer_bias", "full"), spec.get("values", "x"), spec.get("proj", True), scale,
                    spec.get("keys", "x"))
    if t == "less":
        return LessAttention(dim, heads, qkv_bias, N)
    if t == "mait":
        sizes = spec["mask_size"]
        if isinstance(sizes, int):  # one R for the heads listed (default: all)
            sizes = [sizes if h in spec.get("heads", range(heads)) else 0 for h in range(heads)]
        return MaiT(dim, heads, qkv_bias, sizes, prefix, grid, spec.get("mask_mode", "zero"), scale)
    if t == "refiner":
        return Refiner(dim, heads, qkv_bias, spec["expanded_heads"], spec.get("kernel_size", 3), scale)
    raise ValueError(f"unknown attention type {t}")


def init_mechanisms(model, seed):
    """Weights for the mechanisms' own tensors with enough spread that every term matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = p.shape[-1]
            if name.endswith("attn.ds"):
                p.copy_((0.6 + 0.8 * torch.rand(p.shape, generator=g)) * 0.25)
            elif "bias_table" in name or name.endswith("inner_bias") or name.endswith("outer_bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith("theta.weight") or name.endswith("psi.weight"):
                p.copy_(torch.eye(n) + 0.3 * torch.randn(p.shape, generator=g) / n ** 0.5)
            elif name.endswith("mask_alpha"):
                p.copy_(0.15 + 0.7 * torch.rand(p.shape, generator=g))
            elif name.endswith("expand.weight") or name.endswith("reduce.weight"):
                p.copy_(torch.randn(p.shape, generator=g) / n ** 0.5)
            elif name.endswith("dla.weight"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model
