"""Refined-ViT as released, in plain PyTorch: the reference of tests/fixtures/refiner_release/
(tools/make_refiner_release_fixtures.py). Written from the model's equations (below), which are
read off the released code, zhoudaquan/Refiner_ViT at b11ebb8 (models/refined_transformer.py;
models/refiner_utils.py as stored at 6d37817); independent of attnscope's C code. Needs only
torch and tools/stem_ref.py.

Where each piece comes from
  stem       refined_transformer.py, PatchEmbed_cnn.forward: conv1-bn1-relu, conv2-bn2-relu,
             conv3-bn3-relu, proj (with bias). Here the config's "stem" list (any sizes; names
             conv_name / bn_name), built by tools/stem_ref.py (its BatchNorm is in eval mode).
  tokens     Refiner_ViT.forward_features: x.flatten(2).transpose(1, 2) (patches row-major),
             cls_token prepended, pos_embed (1, 1 + patches, D) added.
  blocks     Block.forward with adjust_ratio r = 0.5:
               x = x + attn(norm1(r x), carry) / r ;  x = x + mlp(norm2(r x)) / r
             Mlp.forward: scale_channel (D) * fc2(GELU(fc1(z))) (nn.GELU: the exact erf form).
  attention  Refined_Attention.forward, apply_transform=False (every released model):
    "refiner_release" (share=False): qkv Linear(D, 3D) as timm's (B, T, 3, H, hd); s = hd^-0.5;
             P = softmax(s q k^T) (the release scales q and k by sqrt(s) each: the same map);
             A = P + s * carry when a carry exists, else P; out = proj(A v); hands A on.
    "refiner_shared" (share=True): qkv Linear(D, D) gives v alone, (B, T, H, hd); no q, k or
             softmax; A = s * adapt_bn(DLA(carry)) (the release: adapt_bn(DLA(atten)) * scale);
             out = proj(A v); hands on the carry it received, UNCHANGED (attn_next = atten).
  DLA        refiner_utils.py, DLA.forward with refine_mode 'conv_exapnd', stride 1, inp = oup = H
             (so the identity branch is on), expand_ratio 3 (the share branch passes neither
             kernel_size nor expand_ratio: E = 3H, k = 3 in every release; here the config's
             expanded_heads and kernel_size):
               Y = ReLU6(bn1(conv_exp(X)))   1x1, H -> E, no bias
               Y = ReLU6(bn2(dw(Y)))         k x k depth-wise (groups E), no bias, stride 1
               Y = bn3(conv_pro(Y))          1x1, E -> H, no bias
               DLA(X) = X + Y
             X (B, H, T, T) is an image batch of H channels and T x T pixels. The release's
             Conv2dSamePadding pads TF-"same" (k - 1 split as (k-1)//2 before, the rest after):
             for odd k that is nn.Conv2d's padding k // 2 on each side, zeros.
  head       Refiner_ViT.forward, eval branch (return_dense, not training):
               logits = head(x[:, 0]) + 0.5 * max_t>=1 aux_head(x[:, t])   after norm (eps 1e-6)
             the max is per class over the patch tokens (x_aux.max(1)[0]); the weight is the
             config's "aux_head". (In training the release returns head and aux_head outputs
             apart, with MixToken, for token labelling; the fixture's loss uses these eval logits.)

The two readings that matter
  * The carry. Block.forward threads `atten` from block to block. A release block hands on the
    map that multiplied its values, A = P + s carry (carry included); a shared block hands on the
    map it RECEIVED, not its refined one. So in release, shared, release, release, shared the
    carries are None, A0, A0, A2, A3: block 2 gets block 0's map through block 1, block 3 block
    2's, block 4 refines block 3's. The first block has no carry (A = P); a shared block always
    has one (the config must not put one first).
  * BatchNorm in eval mode. Every BatchNorm (the stem's, DLA's bn1, bn2, bn3 and adapt_bn)
    normalises with its running statistics (F.batch_norm(training=False), eps bn_eps), also under
    model.train() and during the gradient computation (attnscope's "frozen" BatchNorm). The
    release would use batch statistics while training; the reference does not.
LayerNorm eps is ln_eps (1e-6: the release's partial(nn.LayerNorm, eps=1e-6)) everywhere.

Parameter names are the release's (patch_embed.* through stem_ref.rename, blocks.i.attn.DLA.*,
blocks.i.attn.adapt_bn.*, blocks.i.mlp.scale_channel, aux_head.*); state_dict_release() and
load_release() convert."""
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

import stem_ref


def parse_blocks(spec, depth):
    """A config "blocks" value (a number, a list, or a string like "0-3,5") -> list of ints."""
    if isinstance(spec, int):
        return [spec]
    if isinstance(spec, (list, tuple)):
        return [int(b) for b in spec]
    out = []
    for part in re.split(r"\s*,\s*", str(spec).strip()):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    for b in out:
        if not 0 <= b < depth:
            raise ValueError(f"block {b} outside 0..{depth - 1}")
    return out


def block_specs(cfg):
    """One attention dict per block from the config's "attention" list."""
    depth = cfg["depth"]
    att = cfg["attention"]
    if isinstance(att, dict):
        return [att] * depth
    if all("blocks" not in a for a in att):
        assert len(att) == depth
        return list(att)
    specs = [None] * depth
    for a in att:
        for b in parse_blocks(a["blocks"], depth):
            if specs[b] is not None:
                raise ValueError(f"block {b} named twice")
            specs[b] = a
    if any(s is None for s in specs):
        raise ValueError("a block has no attention entry")
    return specs


class FrozenBN(nn.BatchNorm2d):
    """nn.BatchNorm2d's tensors (weight, bias, running_mean, running_var, num_batches_tracked),
    always applied with the running statistics."""

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training=False, eps=self.eps)


class DLA(nn.Module):
    def __init__(self, heads, expanded, kernel, eps):
        super().__init__()
        assert kernel % 2 == 1, "even kernels: TF-same padding is asymmetric, not modelled"
        self.conv_exp = nn.Conv2d(heads, expanded, 1, bias=False)
        self.bn1 = FrozenBN(expanded, eps=eps)
        self.depth_sep_conv = nn.Conv2d(expanded, expanded, kernel, 1, kernel // 2, groups=expanded, bias=False)
        self.bn2 = FrozenBN(expanded, eps=eps)
        self.conv_pro = nn.Conv2d(expanded, heads, 1, bias=False)
        self.bn3 = FrozenBN(heads, eps=eps)
        self.record = None  # dict receiving the pre-activations of the two ReLU6 when set

    def forward(self, X):
        z1 = self.bn1(self.conv_exp(X))
        y = F.relu6(z1)
        z2 = self.bn2(self.depth_sep_conv(y))
        y = F.relu6(z2)
        y = self.bn3(self.conv_pro(y))
        if self.record is not None:
            self.record.update(pre1=z1, pre2=z2)
        return X + y


class ReleaseAttention(nn.Module):
    """share=False: computes P = softmax(s q k^T); A = P (+ s carry); hands A on."""

    def __init__(self, dim, heads, qkv_bias):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, carry, rec, use_carry=True):
        B, T, D = x.shape
        q, k, v = self.qkv(x).reshape(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        P = (self.scale * (q @ k.transpose(-2, -1))).softmax(dim=-1)
        A = P + self.scale * carry if (carry is not None and use_carry) else P
        rec.update(soft=P, attn=A)
        out = (A @ v).transpose(1, 2).reshape(B, T, D)
        return self.proj(out), A


class SharedAttention(nn.Module):
    """share=True: A = s adapt_bn(DLA(carry)) multiplies v = qkv(x); the carry passes unchanged."""

    def __init__(self, dim, heads, qkv_bias, expanded, kernel, eps):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.DLA = DLA(heads, expanded, kernel, eps)
        self.adapt_bn = FrozenBN(heads, eps=eps)
        self.qkv = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, carry, rec, use_carry=True):
        if carry is None:
            raise ValueError("a refiner_shared block needs the map of a block before it")
        B, T, D = x.shape
        A = self.scale * self.adapt_bn(self.DLA(carry))
        v = self.qkv(x).reshape(B, T, self.heads, D // self.heads).permute(0, 2, 1, 3)
        rec.update(attn=A)
        out = (A @ v).transpose(1, 2).reshape(B, T, D)
        return self.proj(out), carry


class Mlp(nn.Module):
    def __init__(self, dim, hidden, scale_init):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        if scale_init:  # the config's "mlp_scale" (the release's 1e-5); absent: no LayerScale
            self.scale_channel = nn.Parameter(scale_init * torch.ones(dim))

    def forward(self, x):
        y = self.fc2(F.gelu(self.fc1(x)))
        return self.scale_channel * y if hasattr(self, "scale_channel") else y


class Block(nn.Module):
    def __init__(self, cfg, spec):
        super().__init__()
        D, H = cfg["embed_dim"], cfg["num_heads"]
        eps = cfg.get("ln_eps", 1e-6)
        self.r = cfg.get("adjust_ratio") or 1.0  # the release's 0.5 when the config says so
        self.norm1 = nn.LayerNorm(D, eps=eps)
        if spec["type"] == "refiner_release":
            self.attn = ReleaseAttention(D, H, cfg["qkv_bias"])
        elif spec["type"] == "refiner_shared":
            self.attn = SharedAttention(D, H, cfg["qkv_bias"], spec.get("expanded_heads", 3 * H),
                                        spec.get("kernel_size", 3), cfg.get("bn_eps", 1e-5))
        else:
            raise ValueError(spec["type"])
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(D, cfg["mlp_hidden"], cfg.get("mlp_scale"))

    def forward(self, x, carry, rec, use_carry=True):
        rec["carry"] = carry
        y, carry = self.attn(self.norm1(self.r * x), carry, rec, use_carry)
        x = x + y / self.r
        x = x + self.mlp(self.norm2(self.r * x)) / self.r
        return x, carry


class RefinerReleaseViT(nn.Module):
    """cfg: attnscope's JSON config (embed_dim, depth, num_heads, mlp_hidden, num_classes,
    qkv_bias, ln_eps, bn_eps, adjust_ratio, mlp_scale, aux_head, stem, attention)."""

    def __init__(self, cfg):
        super().__init__()
        c = self.c = dict(cfg)
        assert c.get("class_token", True) and not c.get("distilled", False)
        assert c.get("global_pool", "token") == "token" and not c.get("fc_norm", False)
        D = c["embed_dim"]
        self.stem = stem_ref.ConvStem(c["stem"], c["in_chans"], c.get("bn_eps", 1e-5))
        assert c["stem"][-1]["out"] == D
        grid = stem_ref.side(c["stem"], c["img_size"])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + grid * grid, D))
        self.specs = block_specs(c)
        if self.specs[0]["type"] != "refiner_release":
            raise ValueError("the first block has no map to share")
        self.blocks = nn.ModuleList(Block(c, s) for s in self.specs)
        self.norm = nn.LayerNorm(D, eps=c.get("ln_eps", 1e-6))
        self.head = nn.Linear(D, c["num_classes"])
        self.aux_weight = c.get("aux_head")
        if self.aux_weight:
            self.aux_head = nn.Linear(D, c["num_classes"])
        # checks only (tools/make_refiner_release_fixtures.py): False drops the "+ s carry" of
        # refiner_release blocks; the release keeps it
        self.use_carry = True

    def forward(self, x, record=None):
        """record: a list that receives one dict per block: attn (the map multiplying v), soft
        (refiner_release: P), tokens (the block's output), carry (the map it received, or None)."""
        B = x.shape[0]
        x = self.stem(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1) + self.pos_embed
        carry = None
        for blk in self.blocks:
            rec = {}
            x, carry = blk(x, carry, rec, self.use_carry)
            rec["tokens"] = x
            if record is not None:
                record.append(rec)
        x = self.norm(x)
        logits = self.head(x[:, 0])
        if self.aux_weight:
            logits = logits + self.aux_weight * self.aux_head(x[:, 1:]).max(dim=1)[0]
        return logits


def state_dict_release(model):
    """The model's state dict under the release's names (stem per conv_name / bn_name)."""
    return stem_ref.rename(dict(model.state_dict()), model.c["stem"])


def load_release(model, sd):
    """Loads a state dict in the release's names (strict)."""
    model.load_state_dict(stem_ref.rename(sd, model.c["stem"], to_config=False), strict=True)
    return model
