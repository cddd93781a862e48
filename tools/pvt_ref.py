#!/usr/bin/env python3
"""Plain-PyTorch PVT v2 (eval), written from the PVT v2 paper's equations and the order of the
design note (hierarchical.md 3.2), with timm's parameter names so that a timm state dict loads as
it is. Independent of attnscope's C code and of timm (not installed); the reference of
tools/make_pvt_fixtures.py and the ONNX export of the benchmark.

    stem:   x = LN_1e-5(Conv2d(k7, s4, p3)(img))                      patch_embed.proj, .norm
    stage s >= 1 starts with LN_1e-5(Conv2d(k3, s2, p1)(x))            stages.s.downsample
    block:  x = x + SRA(LN1(x));  x = x + MixFFN(LN2(x))               LN1, LN2 eps 1e-6
    SRA:    q = x Wq + b (T, C; LMSA: (T, qk_dim), k likewise, 1/sqrt(qk_dim / H)); x' = LN_1e-5(Conv2d(R x R, stride R)(x)) (T' = T / R^2) or, R = 1,
            x' = x; or (linear) x' = GELU(LN_1e-5(Conv1x1(AdaptiveAvgPool2d(7)(x)))) (T' = 49);
            [k | v] = x' Wkv + b; A_h = softmax((q_h k_h^T) d^-1/2) (T x T'); out = [A_h v_h] Wproj + b
            less-attention (LaViT eq. 5; a block with attn.theta): no q, k; v = x' Wv + b and
            S_h = Psi(Theta(S_prev,h)^T)^T with Theta = Linear(T', T') and Psi = Linear(T, T), no
            bias, S_prev the previous block's pre-softmax scores; A_h = softmax(S_h), unscaled
    MixFFN: fc1 -> [ReLU (linear)] -> depth-wise Conv2d(3x3, p1, bias) -> GELU -> fc2
    every stage ends with LN_1e-6 (stages.s.norm); mean over the grid; head (no other norm)
    LaViT's attention residual (its Eqs. 6-7, `attn_residual`; docs/models.md, "LaViT"): stage
            s >= 1's first block adds to its scores, before the softmax,
            A_init = gamma * Conv1x1_heads(Norm(DWConv_2x2,s2(A_last)))
            with A_last the previous stage's last block's scores (`ar_source` "scores") or softmax
            maps ("attn"), (h', Gq'^2, T'), the depth-wise conv striding over the QUERY grid
            (Gq' -> Gq'/2) with the key index as a batch, Norm a LayerNorm_1e-5 over each row of T'
            keys (`ar_norm` "layernorm") or none, the 1x1 conv mixing h' heads into h, gamma (h).

Usage:
    model = PVTv2(cfg, state_dict)                  # cfg: the model-config keys (embed_dims, ...)
    logits = model(images, record=list_or_None)     # record: one dict per block
    /usr/bin/python3 tools/pvt_ref.py CONFIG.json MODEL.safetensors --onnx out.onnx [--batch B]

record dicts: attn, scores (N, H, T, T'), q (N, H, T, d), k (N, H, T', d), tokens (N, T, C), and
key_grid (kgh, kgw)."""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

POOL = 7


def ln(x, sd, name, eps):
    return F.layer_norm(x, (x.shape[-1],), sd[name + ".weight"], sd[name + ".bias"], eps)


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / 2 ** 0.5))


def linear(x, sd, name):
    y = x @ sd[name + ".weight"].t()
    b = sd.get(name + ".bias")
    return y + b if b is not None else y


def to_grid(x, h, w):
    """(N, T, C) tokens row-major -> (N, C, h, w)."""
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], h, w)


def to_tokens(x):
    """(N, C, h, w) -> (N, h w, C)."""
    return x.flatten(2).transpose(1, 2)


def adaptive_pool(x, out):
    """AdaptiveAvgPool2d written out: bin i covers [floor(i n / out), ceil((i + 1) n / out))."""
    n, c, h, w = x.shape
    rows = []
    for i in range(out):
        y0, y1 = (i * h) // out, -((-(i + 1) * h) // out)
        cols = []
        for j in range(out):
            x0, x1 = (j * w) // out, -((-(j + 1) * w) // out)
            cols.append(x[:, :, y0:y1, x0:x1].mean(dim=(2, 3)))
        rows.append(torch.stack(cols, -1))
    return torch.stack(rows, -2)


class PVTv2(torch.nn.Module):
    def __init__(self, cfg, sd):
        super().__init__()
        self.cfg = cfg
        self.depths = cfg["depths"]
        self.heads = cfg["num_heads"]
        self.sr = cfg.get("sr_ratios", [1] * len(self.depths))
        self.linear = bool(cfg.get("linear", False))
        self.k = cfg.get("patch_kernel", 7)
        self.stride = cfg.get("patch_size", 4)
        self.eps = cfg.get("ln_eps", 1e-6)
        self.ar = bool(cfg.get("attn_residual", False))
        self.ar_source = cfg.get("ar_source", "scores")
        self.ar_norm = cfg.get("ar_norm", "layernorm")
        self.ceps = cfg.get("conv_ln_eps", 1e-5)
        self.names = list(sd.keys())
        for i, (name, v) in enumerate(sd.items()):  # buffers keep the names out of ONNX's way
            self.register_buffer("w%d" % i, torch.as_tensor(v, dtype=torch.float32))

    def params(self):
        return {n: getattr(self, "w%d" % i) for i, n in enumerate(self.names)}

    def attn_residual(self, A, sd, p, gh, gw, heads):
        """A (n, h', Gq'^2, T') -> (n, heads, (Gq'/2)^2, T'): Eqs. 6-7 read on the query grid."""
        n, hp, _, Tk = A.shape
        x = A.reshape(n, hp, gh, gw, Tk).permute(0, 4, 1, 2, 3).reshape(n * Tk, hp, gh, gw)
        y = F.conv2d(x, sd[p + "dw.weight"], sd[p + "dw.bias"], stride=2, groups=hp)
        oh, ow = y.shape[2:]
        y = y.reshape(n, Tk, hp, oh * ow).permute(0, 2, 3, 1)  # (n, h', Tq, T')
        if self.ar_norm == "layernorm":
            y = F.layer_norm(y, (Tk,), sd[p + "norm.weight"], sd[p + "norm.bias"], 1e-5)
        z = torch.einsum("oi,nitk->notk", sd[p + "pw.weight"].reshape(heads, hp), y)
        z = z + sd[p + "pw.bias"].view(1, heads, 1, 1)
        return z * sd[p + "gamma"].view(1, heads, 1, 1)

    def attention(self, x, h, w, sd, p, heads, R, rec, prev, bias=None):
        n, T, C = x.shape
        d = C // heads
        less = p + "attn.theta.weight" in sd
        if not less:
            q = linear(x, sd, p + "attn.q")
            Q = q.shape[-1]  # C, or LMSA's compressed q/k width (attn.q (Q, C), attn.kv (Q + C, C))
            dq = Q // heads
        if self.linear:
            xr = adaptive_pool(to_grid(x, h, w), POOL)
            xr = F.conv2d(xr, sd[p + "attn.sr.weight"], sd[p + "attn.sr.bias"])
            kh, kw = xr.shape[2:]
            xr = gelu(ln(to_tokens(xr), sd, p + "attn.norm", self.ceps))
        elif R > 1:
            xr = F.conv2d(to_grid(x, h, w), sd[p + "attn.sr.weight"], sd[p + "attn.sr.bias"], stride=R)
            kh, kw = xr.shape[2:]
            xr = ln(to_tokens(xr), sd, p + "attn.norm", self.ceps)
        else:
            xr, kh, kw = x, h, w
        if less:
            v = linear(xr, sd, p + "attn.v")
            Tk = v.shape[1]
            vh = v.reshape(n, Tk, heads, d).transpose(1, 2)
            # eq. 5 as printed: Theta over each row (the keys), transpose, Psi over the queries
            s = F.linear(F.linear(prev, sd[p + "attn.theta.weight"]).transpose(-1, -2),
                         sd[p + "attn.psi.weight"]).transpose(-1, -2)
        else:
            kv = linear(xr, sd, p + "attn.kv")
            Tk = kv.shape[1]
            k, v = kv[..., :Q], kv[..., Q:]
            qh = q.reshape(n, T, heads, dq).transpose(1, 2)
            kh_ = k.reshape(n, Tk, heads, dq).transpose(1, 2)
            vh = v.reshape(n, Tk, heads, d).transpose(1, 2)
            s = (qh @ kh_.transpose(-1, -2)) * dq ** -0.5
        if bias is not None:
            s = s + bias
        a = torch.softmax(s, -1)
        o = (a @ vh).transpose(1, 2).reshape(n, T, C)
        if rec is not None:
            rec.update(attn=a, scores=s, key_grid=(int(kh), int(kw)))
            if not less:
                rec.update(q=qh, k=kh_)
        return linear(o, sd, p + "attn.proj"), s, a

    def mixffn(self, x, h, w, sd, p):
        y = linear(x, sd, p + "mlp.fc1")
        if self.linear:
            y = torch.relu(y)
        hm = y.shape[-1]
        y = F.conv2d(to_grid(y, h, w), sd[p + "mlp.dwconv.weight"], sd[p + "mlp.dwconv.bias"], padding=1,
                     groups=hm)
        return linear(gelu(to_tokens(y)), sd, p + "mlp.fc2")

    def forward(self, img, record=None):
        sd = self.params()
        x = F.conv2d(img, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=self.stride,
                     padding=self.k // 2)
        h, w = x.shape[2:]
        x = ln(to_tokens(x), sd, "patch_embed.norm", self.ceps)
        last = None  # the previous stage's last block's scores or maps (the attention residual)
        for s, depth in enumerate(self.depths):
            ar = None
            if s > 0:
                if self.ar:
                    ar = self.attn_residual(last, sd, "stages.%d.attn_residual." % s, h, w, self.heads[s])
                y = F.conv2d(to_grid(x, h, w), sd["stages.%d.downsample.proj.weight" % s],
                             sd["stages.%d.downsample.proj.bias" % s], stride=2, padding=1)
                h, w = y.shape[2:]
                x = ln(to_tokens(y), sd, "stages.%d.downsample.norm" % s, self.ceps)
            prev = None  # the scores a less-attention block transforms (never across stages)
            for j in range(depth):
                p = "stages.%d.blocks.%d." % (s, j)
                rec = {} if record is not None else None
                y, prev, a = self.attention(ln(x, sd, p + "norm1", self.eps), h, w, sd, p, self.heads[s],
                                            self.sr[s], rec, prev, ar if j == 0 else None)
                last = a if self.ar_source == "attn" else prev
                x = x + y
                x = x + self.mixffn(ln(x, sd, p + "norm2", self.eps), h, w, sd, p)
                if rec is not None:
                    rec["tokens"] = x
                    record.append(rec)
            x = ln(x, sd, "stages.%d.norm" % s, self.eps)
        return linear(x.mean(1), sd, "head")


def count_params(cfg):
    """Closed form of the parameter count from the equations above (no tensors)."""
    dims, depths, mr = cfg["embed_dims"], cfg["depths"], cfg["mlp_ratios"]
    sr, lin, k = cfg.get("sr_ratios", [1] * len(dims)), cfg.get("linear", False), cfg.get("patch_kernel", 7)
    n = 3 * k * k * dims[0] + dims[0] + 2 * dims[0]
    for s, (c, d) in enumerate(zip(dims, depths)):
        if s:
            n += dims[s - 1] * 9 * c + c + 2 * c
        hm = int(c * mr[s])
        r2 = 1 if lin else sr[s] ** 2
        sra = (c * c * r2 + c + 2 * c) if (lin or sr[s] > 1) else 0
        n += d * (2 * c + 3 * c * c + 3 * c + sra + c * c + c + 2 * c + 2 * c * hm + hm + c + 10 * hm) + 2 * c
    return n + dims[-1] * cfg.get("num_classes", 1000) + cfg.get("num_classes", 1000)


def main():
    import safetensors_io as st
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("weights")
    ap.add_argument("--onnx", required=True, help="write the model as ONNX here")
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    with open(a.config) as f:
        raw = json.load(f)
    cfg = dict(raw, **raw.get("model_args", {}))
    sd = {k: torch.from_numpy(v.astype("float32")) for k, v in st.load(a.weights).items()}
    m = PVTv2(cfg, sd).eval()
    S = cfg.get("img_size", 224)
    x = torch.randn(a.batch, cfg.get("in_chans", 3), S, S)
    tmp = a.onnx + ".part"
    with torch.no_grad():
        torch.onnx.export(m, (x,), tmp, input_names=["images"], output_names=["logits"], opset_version=14)
    os.replace(tmp, a.onnx)


if __name__ == "__main__":
    main()
