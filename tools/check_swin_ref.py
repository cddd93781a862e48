#!/usr/bin/env python3
"""Validates tools/swin_ref.py (run: /usr/bin/python3 tools/check_swin_ref.py [--quick]).

1. Logits against torchvision's swin_t (independent code) with seeded, perturbed weights renamed
   by tools/swin_names.py: at 224, and at 256 (the window does not divide 64, 32, 16: pad and
   shift interact). pad_first must equal torchvision; roll_first (timm's order) is checked only
   by reading and by 3 below, and its difference from torchvision is printed.
2. Every recorded attention row sums to 1.
3. The maps, scores, q, k, window_token and block outputs of every block against a dense
   computation written separately: every slot of the shifted, padded grid attends to every other
   under a block-diagonal -inf mask (same window), with the relative bias from window-relative
   coordinates and the shift mask from regions, the slot's source token found by modular
   arithmetic instead of roll/pad/view. Run at 224 and 256 in both pad orders, and on tiny
   models that exercise both clamps.
4. swin_t, swin_s and swin_b renamed from torchvision's and from the official layout agree,
   load strictly into SwinRef, and have the published parameter counts.
Exits 1 with one line per failure."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swin_ref  # noqa: E402
from swin_names import from_official, from_torchvision  # noqa: E402

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
FAIL = []


def check(ok, msg):
    if not ok:
        FAIL.append(msg)
        print("FAIL:", msg)


def maxdiff(a, b):
    return (a.double() - b.double()).abs().max().item()


def slot_sources(g, pad_order):
    """Source grid token (or -1) of every slot P = py * pw + px of the shifted, padded grid."""
    gh, gw, s, ph, pw = g["gh"], g["gw"], g["shift"], g["ph"], g["pw"]
    py = torch.arange(ph)[:, None].expand(ph, pw)
    px = torch.arange(pw)[None, :].expand(ph, pw)
    if pad_order == "pad_first":  # the padded grid rolled: slot p holds padded cell p + s
        oy, ox = (py + s) % ph, (px + s) % pw
        valid = (oy < gh) & (ox < gw)
    else:  # the unpadded grid rolled, pad slots appended after it
        valid = (py < gh) & (px < gw)
        oy, ox = (py + s) % gh, (px + s) % gw
    return torch.where(valid, oy * gw + ox, torch.full_like(oy, -1)).reshape(-1)


def dense_check(label, blk, rec, pad_order):
    g = rec["geom"]
    M, s, ph, pw = g["M"], g["shift"], g["ph"], g["pw"]
    x_in = rec["input"]
    B, T, C = x_in.shape
    h = blk.attn.heads
    d = C // h
    with torch.no_grad():
        qkv_tok = blk.attn.qkv(blk.norm1(x_in))                         # (B, T, 3C)
        pad = blk.attn.qkv.bias if blk.attn.qkv.bias is not None else torch.zeros(3 * C)
        src = slot_sources(g, pad_order)
        P = ph * pw
        feats = torch.where((src >= 0)[None, :, None], qkv_tok[:, src.clamp(min=0)], pad)
        q, k, v = feats.view(B, P, 3, h, d).permute(2, 0, 3, 1, 4)     # (B, h, P, d)
        py, px = torch.arange(P) // pw, torch.arange(P) % pw
        same = ((py[:, None] // M) == (py[None, :] // M)) & ((px[:, None] // M) == (px[None, :] // M))
        ry, rx = py % M, px % M
        idx = (ry[:, None] - ry[None, :] + M - 1) * (2 * M - 1) + (rx[:, None] - rx[None, :] + M - 1)
        table = blk.attn.relative_position_bias_table
        if s:
            def reg(p, n):
                return torch.where(p < n - M, 0, torch.where(p < n - s, 1, 2))
            lab = 3 * reg(py, ph) + reg(px, pw)
            mask = torch.where(lab[:, None] == lab[None, :], 0.0, -100.0)
        else:
            mask = torch.zeros(P, P)
        # slot of window w, row i: the dense index of that slot
        nww = pw // M
        w = torch.arange((ph // M) * nww)
        i = torch.arange(M * M)
        slot = ((w[:, None] // nww) * M + i[None, :] // M) * pw + (w[:, None] % nww) * M + i[None, :] % M
        check(torch.equal(rec["window_token"], src[slot]), f"{label}: window_token differs from the dense slot sources")
        out = torch.zeros(B, h, P, d)
        dq = dk = da = ds = 0.0
        valid = src >= 0
        order = src[valid]
        for hh in range(h):
            S = (q[:, hh] * d ** -0.5) @ k[:, hh].transpose(-1, -2) + table[idx, hh] + mask
            S = S.masked_fill(~same, float("-inf"))
            A = S.softmax(-1)
            out[:, hh] = A @ v[:, hh]
            da = max(da, maxdiff(rec["attn"][:, hh], A[:, slot[:, :, None], slot[:, None, :]]))
            ds = max(ds, maxdiff(rec["scores"][:, hh], S[:, slot[:, :, None], slot[:, None, :]]))
        qg = torch.empty(B, h, T, d)
        kg = torch.empty(B, h, T, d)
        qg[:, :, order] = q[:, :, valid]
        kg[:, :, order] = k[:, :, valid]
        dq, dk = maxdiff(rec["q"], qg), maxdiff(rec["k"], kg)
        o = blk.attn.proj(out.permute(0, 2, 1, 3).reshape(B, P, C))
        o_tok = torch.empty(B, T, C)
        o_tok[:, order] = o[:, valid]
        x = x_in + o_tok
        x = x + blk.mlp(blk.norm2(x))
        dt = maxdiff(rec["tokens"], x)
        rows = maxdiff(rec["attn"].sum(-1), torch.ones(1))
    worst = max(da, ds, dq, dk, dt)
    for name, v, tol in (("attn", da, 1e-5), ("scores", ds, 1e-4), ("q", dq, 1e-5), ("k", dk, 1e-5),
                         ("tokens", dt, 1e-4), ("row sums", rows, 1e-5)):
        check(v <= tol, f"{label}: {name} differs from the dense computation by {v:.3g} (> {tol:g})")
    return worst


def build(cfg, seed, tv_kwargs):
    """A torchvision SwinTransformer with a seeded init, perturbed; the same weights in SwinRef."""
    from torchvision.models.swin_transformer import SwinTransformer
    torch.manual_seed(seed)
    tv = SwinTransformer(**tv_kwargs).eval()
    sd = swin_ref.perturb(from_torchvision(tv.state_dict()), seed + 1)
    swin_ref.load_torchvision(tv, sd)
    return tv, sd


def ref_model(cfg, sd, **over):
    m = swin_ref.SwinRef(dict(cfg, **over)).eval()
    m.load_state_dict(sd, strict=True)
    return m


def run_dense(label, m, x):
    rec = []
    with torch.no_grad():
        m(x, record=rec)
    blocks = [b for st in m.layers for b in st.blocks]
    worst = 0.0
    for l, (blk, r) in enumerate(zip(blocks, rec)):
        g = r["geom"]
        worst = max(worst, dense_check(f"{label} block {l} (grid {g['gh']}, M {g['M']}, shift {g['shift']})",
                                       blk, r, m.pad_order))
    return worst


def official_layout(tv_sd):
    """microsoft/Swin-Transformer's names for a torchvision state dict, written from the
    official model's module tree (merge at the end of stage i, head.*, attn_mask buffers)."""
    out = {}
    for k, v in tv_sd.items():
        p = k.split(".")
        if p[0] == "features" and p[1] == "0":
            out[f"patch_embed.{'proj' if p[2] == '0' else 'norm'}.{p[3]}"] = v
        elif p[0] == "features" and int(p[1]) % 2 == 1:
            i, rest = (int(p[1]) - 1) // 2, ".".join(p[3:])
            rest = rest.replace("mlp.0.", "mlp.fc1.").replace("mlp.3.", "mlp.fc2.")
            out[f"layers.{i}.blocks.{p[2]}.{rest}"] = v
            if rest == "norm1.weight" and int(p[2]) % 2 == 1:
                out[f"layers.{i}.blocks.{p[2]}.attn_mask"] = torch.zeros(1)
        elif p[0] == "features":
            out[f"layers.{int(p[1]) // 2 - 1}.downsample.{'.'.join(p[2:])}"] = v
        else:
            out[k] = v
    return out


def check_names():
    """swin_t/s/b: torchvision and official layouts give the same timm state dict, which loads
    strictly into SwinRef with the published parameter counts."""
    from torchvision.models import swin_b, swin_s, swin_t
    for name, make, C, depths, heads, want in (
            ("swin_t", swin_t, 96, [2, 2, 6, 2], [3, 6, 12, 24], 28.29),
            ("swin_s", swin_s, 96, [2, 2, 18, 2], [3, 6, 12, 24], 49.61),
            ("swin_b", swin_b, 128, [2, 2, 18, 2], [4, 8, 16, 32], 87.77)):
        tv_sd = make().state_dict()
        a, b = from_torchvision(tv_sd), from_official(official_layout(tv_sd))
        check(sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a),
              f"{name}: torchvision and official renames disagree")
        m = swin_ref.SwinRef(dict(img_size=224, patch_size=4, embed_dim=C, depths=depths, num_heads=heads,
                                  window_size=7, num_classes=1000))
        try:
            m.load_state_dict(a, strict=True)
        except RuntimeError as e:
            check(False, f"{name}: renamed state dict does not load: {str(e).splitlines()[0]}")
        n = sum(v.numel() for v in a.values()) / 1e6
        print(f"{name}: {len(a)} tensors renamed, {n:.2f} M parameters (published {want})")
        check(round(n, 2) == want, f"{name}: {n:.2f} M parameters, published {want}")


def main():
    quick = "--quick" in sys.argv
    check_names()
    T_CFG = dict(img_size=224, patch_size=4, in_chans=3, embed_dim=96, depths=[2, 2, 6, 2],
                 num_heads=[3, 6, 12, 24], window_size=7, mlp_ratio=4, qkv_bias=True, patch_norm=True,
                 num_classes=1000)
    tv, sd = build(T_CFG, 0, dict(patch_size=[4, 4], embed_dim=96, depths=[2, 2, 6, 2],
                                  num_heads=[3, 6, 12, 24], window_size=[7, 7], stochastic_depth_prob=0.2))
    g = torch.Generator().manual_seed(5)
    for size in (224, 256):
        x = torch.randn(2, 3, size, size, generator=g)
        with torch.no_grad():
            want = tv(x)
            pf = ref_model(T_CFG, sd, pad_order="pad_first")(x)
            rf = ref_model(T_CFG, sd, pad_order="roll_first")(x)
        dpf, drf = maxdiff(pf, want), maxdiff(rf, want)
        print(f"swin_t {size}: |logits| max {want.abs().max().item():.3g}; pad_first vs torchvision "
              f"{dpf:.3g}; roll_first vs torchvision {drf:.3g}")
        check(dpf <= 1e-5, f"swin_t {size}: pad_first logits differ from torchvision by {dpf:.3g}")
        if size == 224:
            check(drf <= 1e-5, f"swin_t 224: roll_first logits differ from torchvision by {drf:.3g}")
        else:
            check(drf > 1e-3, f"swin_t {size}: roll_first should differ from torchvision (timm#2438), "
                              f"differs by {drf:.3g}")
        if not quick:
            for order in ("pad_first", "roll_first"):
                w = run_dense(f"swin_t {size} {order}", ref_model(T_CFG, sd, pad_order=order), x[:1])
                print(f"swin_t {size} {order}: every block against the dense computation, max diff {w:.3g}")

    # tiny models: clamps (stage 1 grid 3 < M = 4) and a non-divisible shifted stage 0 (grid 6)
    tiny = dict(img_size=12, patch_size=2, in_chans=3, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                window_size=4, mlp_ratio=4, qkv_bias=True, patch_norm=True, num_classes=10)
    tv, sd = build(tiny, 3, dict(patch_size=[2, 2], embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                                 window_size=[4, 4], num_classes=10))
    x = torch.randn(2, 3, 12, 12, generator=g)
    for order in ("pad_first", "roll_first"):
        m = ref_model(tiny, sd, pad_order=order, window_clamp="torchvision")
        with torch.no_grad():
            d = maxdiff(m(x), tv(x))
        print(f"tiny 12 torchvision clamp {order}: vs torchvision {d:.3g}")
        if order == "pad_first":
            check(d <= 1e-5, f"tiny 12: torchvision clamp differs from torchvision by {d:.3g}")
        w = run_dense(f"tiny 12 torchvision clamp {order}", m, x)
        print(f"tiny 12 torchvision clamp {order}: dense max diff {w:.3g}")
        sd_t = dict(sd)
        for k, v in sd.items():  # timm's table for a 3 x 3 window: the centre of the 4 x 4 one
            if k.startswith("layers.1.") and k.endswith("relative_position_bias_table"):
                sd_t[k] = v.view(7, 7, -1)[1:6, 1:6].reshape(25, -1)
        m = ref_model(tiny, sd_t, pad_order=order, window_clamp="timm")
        w = run_dense(f"tiny 12 timm clamp {order}", m, x)
        with torch.no_grad():
            d = maxdiff(m(x), tv(x))
        print(f"tiny 12 timm clamp {order}: dense max diff {w:.3g}; vs torchvision {d:.3g}")
    if FAIL:
        print(f"{len(FAIL)} check(s) failed")
        sys.exit(1)
    print("swin_ref ok")


if __name__ == "__main__":
    main()
