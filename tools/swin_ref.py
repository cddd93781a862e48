"""Plain-PyTorch Swin Transformer v1 (eval), written from the paper's equations and the order in
the design note (hierarchical.md 3.1), with timm's parameter names so that timm state dicts load
as they are. Independent of attnscope's C code; the reference of tools/make_swin_fixtures.py and
tools/check_swin_ref.py. Needs only torch.

    z   = LN(conv_P(x))                                   patch_embed.proj, patch_embed.norm
    stage s >= 1 starts with a 2x2 merge: concat of the children (dy,dx) in the order
          (0,0),(1,0),(0,1),(1,1), LN(4C), Linear(4C -> 2C, no bias)     layers.s.downsample
    block: x = x + W-MSA(LN1(x));  x = x + fc2(GELU(fc1(LN2(x))))        shift M/2 on odd blocks
    W-MSA: windows of M x M tokens, S = (q d^-1/2) k^T + B_rel [+ mask], softmax, A v, proj
    head:  LN, mean over the grid, head.fc

LMSA (Low-relation MSA) in the windows of chosen blocks: the config's "attention" entries of type
"lmsa" give q and k their own projections attn.q, attn.k of qk_dim columns in total (qk_dim / H
per head, scale (qk_dim / H)^-1/2) beside attn.v; see lmsa_widths.

Choices that differ between implementations are options:
  pad_order   "pad_first": pad the grid to multiples of M, then roll (torchvision, official
              segmentation code); "roll_first": roll the unpadded grid, then pad (timm, whose
              shift mask then misses the wrap: huggingface/pytorch-image-models#2438).
  window_clamp "timm": a grid <= M makes the window the grid and never shifts (the relative
              table is then (2g-1)^2 rows, as timm builds it); "torchvision": keep M, pad, and
              do not shift when M >= the padded grid.
LayerNorm eps is 1e-5 everywhere, GELU is exact (erf), the shift mask value is -100 (not -inf)
and is added after the relative bias; pad tokens are zeros after LN1 and are not masked.

forward(x, record=list) appends one dict per block (global index l over the stages):
  attn, scores  (N, H, nW, M^2, M^2)  windows row-major over the shifted, padded grid, tokens
                                      row-major inside a window; scores enter the softmax
  q, k          (N, H, T, d)          unshifted grid order (token y * gw + x), pad slots dropped
  tokens        (N, T, D)             the block output
  input         (N, T, D)             the block input (for checks; not written to fixtures)
  window_token  (nW, M^2) int64       flat grid token of each window slot, -1 for a pad slot
  geom          dict(gh, gw, M, shift, ph, pw)
"""
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

EPS = 1e-5
MASK_VALUE = -100.0


def block_window(grid, M0, odd, clamp):
    """(M, shift) of a block on a grid x grid map; odd = the block is a shifted one."""
    if clamp == "timm":
        if grid <= M0:
            return grid, 0
        return M0, (M0 // 2 if odd else 0)
    if clamp == "torchvision":
        padded = -(-grid // M0) * M0
        return M0, (M0 // 2 if odd and M0 < padded else 0)
    raise ValueError(f"window_clamp {clamp!r}: use 'timm' or 'torchvision'")


def relative_index(M):
    """(M^2, M^2): idx[a, b] = (ya - yb + M - 1)(2M - 1) + (xa - xb + M - 1), tokens row-major."""
    y = torch.arange(M).repeat_interleave(M)
    x = torch.arange(M).repeat(M)
    return (y[:, None] - y[None, :] + M - 1) * (2 * M - 1) + (x[:, None] - x[None, :] + M - 1)


def shift_regions(n, M, s):
    """Region 0, 1, 2 of each coordinate of a padded axis of length n: Swin's slices
    [0, n - M), [n - M, n - s), [n - s, n)."""
    p = torch.arange(n)
    return (p >= n - M).long() + (p >= n - s).long()


def shift_mask(ph, pw, M, s):
    """(nW, M^2, M^2): 0 where two slots of a window lie in the same region of the shifted,
    padded grid, else -100; zeros without a shift."""
    nwh, nww = ph // M, pw // M
    if s == 0:
        return torch.zeros(nwh * nww, M * M, M * M)
    label = 3 * shift_regions(ph, M, s)[:, None] + shift_regions(pw, M, s)[None, :]
    lw = label.view(nwh, M, nww, M).permute(0, 2, 1, 3).reshape(nwh * nww, M * M)
    return (lw[:, :, None] != lw[:, None, :]).float() * MASK_VALUE


def shift_and_pad(t, M, s, pad_order, fill):
    """t (B, H, W, ...) -> the shifted, padded grid (B, ph, pw, ...) in the given order; pad
    slots hold fill."""
    H, W = t.shape[1], t.shape[2]
    ph, pw = -(-H // M) * M, -(-W // M) * M
    extra = t.dim() - 3

    def pad(u):
        return F.pad(u, (0, 0) * extra + (0, pw - W, 0, ph - H), value=fill)

    if pad_order == "pad_first":
        u = pad(t)
        return torch.roll(u, (-s, -s), (1, 2)) if s else u
    if pad_order == "roll_first":
        u = torch.roll(t, (-s, -s), (1, 2)) if s else t
        return pad(u)
    raise ValueError(f"pad_order {pad_order!r}: use 'pad_first' or 'roll_first'")


def unshift_and_crop(u, H, W, s, pad_order):
    """Inverse of shift_and_pad on (B, ph, pw, C)."""
    if pad_order == "pad_first":
        u = torch.roll(u, (s, s), (1, 2)) if s else u
        return u[:, :H, :W]
    u = u[:, :H, :W]
    return torch.roll(u, (s, s), (1, 2)) if s else u


def to_windows(u, M):
    """(B, ph, pw, C) -> (B, nW, M^2, C), windows row-major, slots row-major in a window."""
    B, ph, pw, C = u.shape
    return u.view(B, ph // M, M, pw // M, M, C).permute(0, 1, 3, 2, 4, 5).reshape(B, -1, M * M, C)


def from_windows(w, ph, pw, M):
    B, nW, N, C = w.shape
    return w.view(B, ph // M, pw // M, M, M, C).permute(0, 1, 3, 2, 4, 5).reshape(B, ph, pw, C)


LSLA_DEFAULTS = {"dynamic_scale": True, "inner_bias": "full", "outer_bias": "full", "keys": "x", "values": "x",
                 "proj": True, "outer_bias_masked": True}


class WindowAttention(nn.Module):
    def __init__(self, dim, heads, table_side, qkv_bias=True, qk_dim=None, lsla=None, rpb=True):
        super().__init__()
        self.heads = heads
        self.qk_dim = qk_dim
        self.lsla = None if lsla is None else dict(LSLA_DEFAULTS, **lsla)
        if self.lsla is not None:
            # ViT-LSLA (paper 000, Algorithm 1) on one window of N = M^2 rows: q = fc_q(x), keys
            # (and values for "x") x itself split into heads; DS (N, N) shared by the heads;
            # biases full (h, N, N) or relative ((2M - 1)^2, h) tables
            a, N, R = self.lsla, table_side ** 2, (2 * table_side - 1) ** 2
            self.q = nn.Linear(dim, dim, bias=qkv_bias)
            if a["keys"] == "k":  # Table 4's QKV: SLA on projected keys (and values)
                self.k = nn.Linear(dim, dim, bias=qkv_bias)
            if a["values"] == "v":
                self.v = nn.Linear(dim, dim, bias=qkv_bias)
            if a["dynamic_scale"]:
                self.ds = nn.Parameter(torch.ones(N, N))
            for which in ("inner", "outer"):
                kind = a[which + "_bias"]
                if kind == "full":
                    setattr(self, which + "_bias", nn.Parameter(torch.zeros(heads, N, N)))
                elif kind == "relative":
                    setattr(self, which + "_bias_table", nn.Parameter(torch.zeros(R, heads)))
        elif qk_dim is None:
            self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        else:  # LMSA (Low-relation MSA): q and k projected to qk_dim in total, v to dim
            self.q = nn.Linear(dim, qk_dim, bias=qkv_bias)
            self.k = nn.Linear(dim, qk_dim, bias=qkv_bias)
            self.v = nn.Linear(dim, dim, bias=qkv_bias)
        if rpb:  # False: no relative position bias ("rel_pos_bias": false, ViT-LSLA)
            self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * table_side - 1) ** 2, heads))
        if self.lsla is None or self.lsla["proj"]:
            self.proj = nn.Linear(dim, dim)

    def lsla_bias(self, which, M):
        """The (h, N, N) bias of one window, or None."""
        kind = self.lsla[which + "_bias"]
        if kind == "full":
            return getattr(self, which + "_bias")
        if kind == "relative":
            N = M * M
            return getattr(self, which + "_bias_table")[relative_index(M).reshape(-1)].view(N, N, -1).permute(2, 0, 1)
        return None

    def forward(self, xn, M, s, pad_order, rec):
        """xn (B, H, W, C) after LN1 -> attention output (B, H, W, C) before the residual."""
        B, H, W, C = xn.shape
        h, d = self.heads, C // self.heads
        table = getattr(self, "relative_position_bias_table", None)
        if table is not None and table.shape[0] != (2 * M - 1) ** 2:
            raise ValueError(f"relative table of {self.relative_position_bias_table.shape[0]} rows "
                             f"for a window of {M}: needs {(2 * M - 1) ** 2}")
        u = shift_and_pad(xn, M, s, pad_order, 0.0)
        ph, pw = u.shape[1], u.shape[2]
        win = to_windows(u, M)                                         # (B, nW, N, C)
        nW, N = win.shape[1], M * M
        if self.lsla is not None:
            dq = d
            q = self.q(win).view(B, nW, N, h, d).permute(0, 3, 1, 2, 4)
            xw = win.view(B, nW, N, h, d).permute(0, 3, 1, 2, 4)      # the window's x rows
            k = xw if self.lsla["keys"] == "x" else self.k(win).view(B, nW, N, h, d).permute(0, 3, 1, 2, 4)
            v = xw if self.lsla["values"] == "x" else self.v(win).view(B, nW, N, h, d).permute(0, 3, 1, 2, 4)
        elif self.qk_dim is None:
            qkv = self.qkv(win).view(B, nW, N, 3, h, d).permute(3, 0, 4, 1, 2, 5)
            q, k, v = qkv[0], qkv[1], qkv[2]                           # (B, h, nW, N, d)
            dq = d
        else:
            dq = self.qk_dim // h
            q = self.q(win).view(B, nW, N, h, dq).permute(0, 3, 1, 2, 4)
            k = self.k(win).view(B, nW, N, h, dq).permute(0, 3, 1, 2, 4)
            v = self.v(win).view(B, nW, N, h, d).permute(0, 3, 1, 2, 4)
        bias = 0.0
        if table is not None:
            bias = table[relative_index(M).reshape(-1)].view(N, N, h).permute(2, 0, 1)  # (h, N, N)
        mask = shift_mask(ph, pw, M, s)                                # (nW, N, N): 0 or -100
        if self.lsla is not None:
            scores = q @ k.transpose(-2, -1)
            scores = scores * self.ds if self.lsla["dynamic_scale"] else scores * dq ** -0.5
            inner = self.lsla_bias("inner", M)
            if inner is not None:
                scores = scores + inner[None, :, None]
        else:
            scores = (q * dq ** -0.5) @ k.transpose(-2, -1)
            if getattr(self, "mait", None):  # MaiT (paper 003): M * (q k^T / sqrt(d)) per head
                from attn_ref import mait_masks
                sizes = self.mait["mask_size"]
                sizes = [sizes] * h if isinstance(sizes, int) else sizes
                Mk = mait_masks(h, sizes, 0, M).to(scores.dtype)[None, :, None]   # (1, h, 1, N, N)
                mode = self.mait.get("mask_mode", "zero")
                if mode == "zero":
                    scores = Mk * scores
                elif mode == "neg_inf":
                    scores = scores.masked_fill(Mk == 0, float("-inf"))
                elif mode == "soft":  # (M + (1 - M) alpha_h) * scores: alpha_h where a score is masked
                    a = self.mask_alpha.to(scores.dtype).reshape(1, h, 1, 1, 1)
                    scores = (Mk + (1 - Mk) * a) * scores
                else:
                    raise ValueError(f"swin_ref: MaiT mask_mode {mode!r}")
        if table is not None:
            scores = scores + bias[None, :, None]
        scores = scores + mask[None, None]
        attn = scores.softmax(dim=-1)
        if self.lsla is not None:
            outer = self.lsla_bias("outer", M)
            if outer is not None:
                outer = outer[None, :, None]                           # (1, h, 1, N, N)
                if self.lsla["outer_bias_masked"]:                     # not on the pairs the mask separates
                    outer = outer * (mask == 0).to(outer.dtype)[None, None]
                attn = attn + outer
        o = (attn @ v).permute(0, 2, 3, 1, 4).reshape(B, nW, N, C)
        if hasattr(self, "proj"):
            o = self.proj(o)
        o = from_windows(o, ph, pw, M)
        if rec is not None:
            idx = torch.arange(H * W).view(1, H, W)
            wt = to_windows(shift_and_pad(idx[..., None], M, s, pad_order, -1), M)[0, :, :, 0]
            valid = wt >= 0
            order = wt[valid]                                          # grid token of each slot
            qg = torch.empty(B, h, H * W, dq)
            kg = torch.empty(B, h, H * W, dq)
            qg[:, :, order] = q[:, :, valid]
            kg[:, :, order] = k[:, :, valid]
            assert torch.equal(order.sort().values, torch.arange(H * W)), "every token in one slot"
            rec.update(attn=attn, scores=scores, q=qg, k=kg, window_token=wt,
                       geom=dict(gh=H, gw=W, M=M, shift=s, ph=ph, pw=pw))
        return unshift_and_crop(o, H, W, s, pad_order)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, table_side, mlp_ratio, qkv_bias, spec=None, rpb=True):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=EPS)
        qk_dim = spec["qk_dim"] if spec and spec["type"] == "lmsa" else None
        mait = spec if spec and spec["type"] == "mait" else None
        lsla = {k: v for k, v in spec.items() if k not in ("type", "blocks")} if spec and spec["type"] == "lsla" else None
        self.attn = WindowAttention(dim, heads, table_side, qkv_bias, qk_dim, lsla, rpb)
        self.attn.mait = mait  # MaiT's masks (global stages: the window is the whole grid)
        if mait and mait.get("mask_mode", "zero") == "soft":  # MaiT's soft mask: a learnt alpha per head
            self.attn.mask_alpha = nn.Parameter(torch.full((heads,), 0.5))
        self.norm2 = nn.LayerNorm(dim, eps=EPS)
        self.mlp = Mlp(dim, int(mlp_ratio * dim))

    def forward(self, x, M, s, pad_order, rec):
        x = x + self.attn(self.norm1(x), M, s, pad_order, rec)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim, eps=EPS)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        B, H, W, C = x.shape
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))  # an odd side gets one zero row or column
        # children (dy, dx) in the order (0,0), (1,0), (0,1), (1,1)
        x = torch.cat([x[:, dy::2, dx::2] for dx in (0, 1) for dy in (0, 1)], dim=-1)
        return self.reduction(self.norm(x))


class PatchEmbed(nn.Module):
    def __init__(self, patch, in_chans, dim, norm, proj=True):
        super().__init__()
        if proj:  # without: a convolutional stem (tools/stem_ref.py) embeds the patches
            self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)
        self.norm = nn.LayerNorm(dim, eps=EPS) if norm else nn.Identity()

    def forward(self, x):
        if hasattr(self, "proj"):
            x = self.proj(x)
        return self.norm(x.permute(0, 2, 3, 1))


class ConvMerge(nn.Module):
    """CSwin's Merge_Block (ViT-LSLA's merge): Conv2d(C, 2C, 3, 2, 1) with bias, then LayerNorm
    over channels, on the (B, H, W, C) grid."""

    def __init__(self, dim_in, dim):
        super().__init__()
        self.conv = nn.Conv2d(dim_in, dim, 3, 2, 1)
        self.norm = nn.LayerNorm(dim, eps=EPS)

    def forward(self, x):
        return self.norm(self.conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1))


class Stage(nn.Module):
    def __init__(self, dim_in, dim, depth, heads, table_side, mlp_ratio, qkv_bias, merge, qk_dims, conv=False,
                 rpb=True):
        super().__init__()
        self.downsample = (ConvMerge(dim_in, dim) if conv else PatchMerging(dim_in)) if merge else None
        self.blocks = nn.ModuleList(Block(dim, heads, table_side, mlp_ratio, qkv_bias, qk_dims[j], rpb)
                                    for j in range(depth))


def lmsa_widths(cfg):
    """Block -> its attention entry from the config's "attention" entries of type "lmsa" or "lsla"
    ("blocks": "a-b" or a list of block indices over the whole model; entries without "blocks", as
    attnscope writes them, are one per block in order); None for a vanilla block."""
    out = [None] * sum(cfg["depths"])
    for i, e in enumerate(cfg.get("attention", [])):
        if e.get("type", "vanilla") == "vanilla":
            continue
        if e["type"] not in ("lmsa", "lsla", "mait"):
            raise ValueError(f"swin_ref: attention type {e['type']!r} (vanilla, lmsa, lsla and mait only)")
        b = e.get("blocks", [i])
        if isinstance(b, str):
            lo, _, hi = b.partition("-")
            b = range(int(lo), int(hi or lo) + 1)
        for j in b:
            out[j] = e
    return out


class Head(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.fc = nn.Linear(dim, classes)


class SwinRef(nn.Module):
    """cfg: the model_args of config.json (img_size, patch_size, in_chans, embed_dim, depths,
    num_heads, window_size, mlp_ratio, qkv_bias, patch_norm, pad_order, window_clamp) plus
    num_classes."""

    def __init__(self, cfg):
        super().__init__()
        c = dict(cfg)
        self.c = c
        self.pad_order = c.get("pad_order", "pad_first")
        self.clamp = c.get("window_clamp", "timm")
        D, M0 = c["embed_dim"], c.get("window_size", 7)  # all-global models have none
        stem = c.get("stem")
        if stem:  # a convolutional stem is the patch embedding; patch_norm's LN follows it
            import stem_ref
            self.stem = stem_ref.ConvStem(stem, c.get("in_chans", 3), c.get("bn_eps", 1e-5))
            grid = stem_ref.side(stem, c["img_size"])
        else:
            grid = c["img_size"] // c["patch_size"]
        self.patch_embed = PatchEmbed(c.get("patch_size", 1), c.get("in_chans", 3), D, c.get("patch_norm", True),
                                      proj=not stem)
        conv_merge = c.get("downsample", "merge") == "conv"
        self.scopes = c.get("scopes", ["window"] * len(c["depths"]))  # "global": the whole grid, no table
        stages, qk, first = [], lmsa_widths(c), 0
        for s, (depth, heads) in enumerate(zip(c["depths"], c["num_heads"])):
            if s:
                grid = (grid + 1) // 2
            side = block_window(grid, M0, False, self.clamp)[0]  # the table timm builds
            stages.append(Stage(D // 2 if s else D, D, depth, heads, side, c.get("mlp_ratio", 4),
                                c.get("qkv_bias", True), s > 0, qk[first:first + depth], conv_merge,
                                c.get("rel_pos_bias", True) and self.scopes[s] == "window"))
            first += depth
            D *= 2
        self.layers = nn.ModuleList(stages)
        D //= 2
        self.norm = nn.LayerNorm(D, eps=EPS)
        self.head = Head(D, c["num_classes"])

    def forward(self, x, record=None):
        if hasattr(self, "stem"):
            x = self.stem(x)
        x = self.patch_embed(x)
        M0 = self.c.get("window_size", 7)
        for s, stage in enumerate(self.layers):
            if stage.downsample is not None:
                x = stage.downsample(x)
            B, H, W, C = x.shape
            for j, blk in enumerate(stage.blocks):
                M, sh = block_window(H, M0, j % 2 == 1, self.clamp) if self.scopes[s] == "window" else (H, 0)
                rec = {} if record is not None else None
                x_in = x
                x = blk(x, M, sh, self.pad_order, rec)
                if rec is not None:
                    rec["input"] = x_in.reshape(B, H * W, C)
                    rec["tokens"] = x.reshape(B, H * W, C)
                    rec["geom"].update(stage=s, j=j)
                    record.append(rec)
        x = self.norm(x).mean(dim=(1, 2))
        return self.head.fc(x)


def perturb(sd, seed, table_std=1.0):
    """Returns a copy of the timm-named state dict sd with its weights moved away from a (seeded)
    init, so that maps are far from uniform: relative tables get large distinct values (a
    transposed index shows), LayerNorm scales spread, every other weight gets noise of its own
    size."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name in sorted(sd):
        p = sd[name].detach().clone().float()
        ln = re.search(r"(^|\.)norm\d?\.weight$", name) is not None
        if "relative_position_bias_table" in name:
            p = table_std * torch.randn(p.shape, generator=g)
        elif ln:
            p = 1.0 + 0.2 * torch.randn(p.shape, generator=g)
        elif name.endswith("mask_alpha"):  # MaiT's soft masks: alpha strictly between 0 and 1
            p = 0.1 + 0.8 * torch.rand(p.shape, generator=g)
        elif name.endswith("bias"):
            p = p + 0.1 * torch.randn(p.shape, generator=g)
        else:
            p = p + 1.0 / math.sqrt(p[0].numel()) * torch.randn(p.shape, generator=g)
        out[name] = p
    return out


def load_torchvision(tv, sd_timm):
    """Loads timm-named weights into a torchvision SwinTransformer (index buffers kept)."""
    from swin_names import from_torchvision
    tv_sd = tv.state_dict()
    new = {}
    for k, v in tv_sd.items():
        r = from_torchvision({k: v})
        new[k] = sd_timm[next(iter(r))] if r else v
    tv.load_state_dict(new, strict=True)
    return tv
