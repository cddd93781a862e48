#!/usr/bin/env python3
"""Writes tests/fixtures/refiner_release/ and refiner_release_wide/: Refined-ViT as released (zhoudaquan/Refiner_ViT at
b11ebb8: PatchEmbed_cnn's stem, blocks that compute a softmax map and add the carried one
(share=False) alternating with blocks that refine the carried map with DLA and BatchNorm
(share=True), the 0.5 adjust ratio, scale_channel on the MLP, the dense aux_head), tiny: 32 px,
D 24, 3 heads, 5 blocks release, shared, release, release, shared, 7 classes. The model is
tools/refiner_release_ref.py, written from the equations in its docstring.

  config.json          attnscope's custom config (CONFIG below)
  model.safetensors    seeded float32 weights in the release's names, perturbed far from init;
                       num_batches_tracked (int64) for every BatchNorm
  expected.safetensors logits (N, C); per block l attn.l (N, H, T, T), the map multiplying v;
                       soft.l, the softmax P, for refiner_release blocks; tokens.l (N, T, D)
  grads.safetensors    grad.NAME of every trainable tensor for the cross-entropy (label smoothing
                       0.1, mean over the images) of those logits with labels (3 + 5 i) % C,
                       BatchNorm in eval mode, float64 autograd from the float32 weights as saved;
                       labels, loss.ce, loss.dp.squared (0: no less-attention block)

refiner_release_wide (WIDE below) has 65 tokens, where the maps' convolution runs its register
blocks, a 5 x 5 kernel, the default H' = 3 H, two shared blocks in a row, and none of the three ViT
options (their absent forms).

Inputs: tests/fixtures/inputs.npy (2, 3, 32, 32). The script prints the checks it makes (ReLU6
clamps reached at both ends in both DLA layers of both shared blocks, what the carry and DLA's
identity branch change in the logits, the margin of the aux max, a finite-difference spot check
of the gradients) and stops if one fails.

Rerun: /usr/bin/python3 tools/make_refiner_release_fixtures.py (FIXTURES_OUT=DIR to write elsewhere)"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import refiner_release_ref as ref  # noqa: E402

OUT = os.environ.get("FIXTURES_OUT", os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
NAME = "refiner_release"
SEED = 521
SMOOTHING = 0.1

CONFIG = {"architecture": "custom", "img_size": 32, "in_chans": 3, "embed_dim": 24, "depth": 5, "num_heads": 3,
          "mlp_hidden": 72, "num_classes": 7, "qkv_bias": True, "class_token": True, "distilled": False,
          "global_pool": "token", "fc_norm": False, "ln_eps": 1e-6, "bn_eps": 1e-5, "adjust_ratio": 0.5,
          "mlp_scale": 1e-5, "aux_head": 0.5,
          "stem": [{"out": 8, "kernel": 7, "stride": 2, "padding": 3, "bias": False, "bn": True, "act": "relu",
                    "conv_name": "patch_embed.conv1", "bn_name": "patch_embed.bn1"},
                   {"out": 12, "kernel": 3, "stride": 1, "padding": 1, "bias": False, "bn": True, "act": "relu",
                    "conv_name": "patch_embed.conv2", "bn_name": "patch_embed.bn2"},
                   {"out": 16, "kernel": 3, "stride": 1, "padding": 1, "bias": False, "bn": True, "act": "relu",
                    "conv_name": "patch_embed.conv3", "bn_name": "patch_embed.bn3"},
                   {"out": 24, "kernel": 4, "stride": 4, "padding": 0, "bias": True, "bn": False, "act": "none",
                    "conv_name": "patch_embed.proj"}],
          "attention": [{"blocks": "0,2,3", "type": "refiner_release"},
                        {"blocks": "1,4", "type": "refiner_shared", "expanded_heads": 9, "kernel_size": 3}]}

# The second fixture: 65 tokens (a 4 x 4 projection onto an 8 x 8 grid), so that the maps'
# convolution runs its 16-column register blocks and the moved-back last block (at 17 tokens it
# does every column one by one); H' = 4 with a 5 x 5 kernel, then the default H' = 3 H with 3 x 3;
# two shared blocks in a row; no adjust_ratio, mlp_scale or aux_head (their absent forms).
WIDE_NAME = "refiner_release_wide"
WIDE_SEED = 522
WIDE = {"architecture": "custom", "img_size": 32, "in_chans": 3, "embed_dim": 16, "depth": 4, "num_heads": 2,
        "mlp_hidden": 32, "num_classes": 5, "qkv_bias": True, "class_token": True, "distilled": False,
        "global_pool": "token", "fc_norm": False, "ln_eps": 1e-6, "bn_eps": 1e-5,
        "stem": [{"out": 16, "kernel": 4, "stride": 4, "padding": 0, "bias": True, "bn": False, "act": "none",
                  "conv_name": "patch_embed.proj"}],
        "attention": [{"blocks": "0,3", "type": "refiner_release"},
                      {"blocks": "1", "type": "refiner_shared", "expanded_heads": 4, "kernel_size": 5},
                      {"blocks": "2", "type": "refiner_shared"}]}

# Weight gains over std 1/sqrt(fan_in). The maps DLA reads have entries of O(1/T), not O(1), so
# conv_exp needs a large gain for its BatchNorm + ReLU6 to reach both clamps; conv_pro a small one
# so that the refinement Y stays comparable with the map X it is added to; the computing blocks'
# qkv 1.5 + 0.5 l in block l (1.5, 2.5, 3 in blocks 0, 2, 3), as the tokens grow a part common to
# all of them, so that the softmax maps stay far from uniform.
GAIN = {"conv_exp.weight": 15.0, "depth_sep_conv.weight": 1.5, "conv_pro.weight": 0.25}
RUNNING = ("running_mean", "running_var", "num_batches_tracked")


def perturb(sd, seed, qkv_gain=lambda l: 1.5 + 0.5 * l):
    """Seeded values for every tensor of a state dict in the release's names: conv and linear
    weights N(0, 1) gain / sqrt(fan_in) (GAIN above; the computing blocks' qkv 1.5 + 0.5 l; else
    1); linear and conv biases N(0, 0.1); BatchNorm weights 1 + N(0, 0.2), biases N(0, 0.2),
    running means N(0, 0.3), running vars U[0.5, 1.5), num_batches_tracked 7; LayerNorm weights
    1 + N(0, 0.2), biases N(0, 0.1); scale_channel 0.5 + 0.5 N(0, 1) (not the release's 1e-5, so
    the MLP branch matters); cls_token and pos_embed N(0, 0.5)."""
    g = torch.Generator().manual_seed(seed)
    bns = {k[:-len(".running_mean")] for k in sd if k.endswith(".running_mean")}
    out = {}
    for k, v in sd.items():
        mod, leaf = k.rsplit(".", 1) if "." in k else ("", k)
        if leaf == "num_batches_tracked":
            out[k] = torch.tensor(7, dtype=torch.int64)
            continue
        if leaf == "running_mean":
            t = 0.3 * torch.randn(v.shape, generator=g)
        elif leaf == "running_var":
            t = 0.5 + torch.rand(v.shape, generator=g)
        elif mod in bns:
            t = (1.0 if leaf == "weight" else 0.0) + 0.2 * torch.randn(v.shape, generator=g)
        elif mod.endswith("norm1") or mod.endswith("norm2") or mod == "norm":  # LayerNorm
            w = leaf == "weight"
            t = (1.0 if w else 0.0) + (0.2 if w else 0.1) * torch.randn(v.shape, generator=g)
        elif leaf == "scale_channel":
            t = 0.5 + 0.5 * torch.randn(v.shape, generator=g)
        elif k in ("cls_token", "pos_embed"):
            t = 0.5 * torch.randn(v.shape, generator=g)
        elif leaf == "bias":
            t = 0.1 * torch.randn(v.shape, generator=g)
        else:
            gain = next((a for s, a in GAIN.items() if k.endswith(s)), 1.0)
            if k.endswith("attn.qkv.weight") and v.shape[0] == 3 * v.shape[1]:
                gain = qkv_gain(int(k.split(".")[1]))
            t = gain * torch.randn(v.shape, generator=g) / math.sqrt(v[0].numel())
        out[k] = t.float()
    return out


def as64(sd):
    return {k: v if v.dtype == torch.int64 else v.double() for k, v in sd.items()}


def model64(sd, cfg):
    return ref.load_release(ref.RefinerReleaseViT(cfg).double(), as64(sd))


def shared_hands_own_map(m, x):
    """Logits under the wrong reading where a shared block hands on its refined map."""
    orig = [ref.SharedAttention.forward]

    def fwd(self, x, carry, rec, use_carry=True):
        y, _ = orig[0](self, x, carry, rec, use_carry)
        return y, rec["attn"]
    ref.SharedAttention.forward = fwd
    try:
        return m(x)
    finally:
        ref.SharedAttention.forward = orig[0]


def no_dla_identity(m, x):
    """Logits with DLA(X) = Y, without the identity branch (a wrong reading)."""
    orig = ref.DLA.forward
    ref.DLA.forward = lambda self, X: orig(self, X) - X
    try:
        return m(x)
    finally:
        ref.DLA.forward = orig


def check(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what)
    if not cond:
        raise SystemExit(f"check failed: {what}")


def write(name, cfg, seed, picks, **gains):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(seed)
    base = ref.state_dict_release(ref.RefinerReleaseViT(cfg))
    sd = perturb(base, seed, **gains)
    assert list(sd) == list(base)

    ref.stem_ref.write_fixture_model(d, cfg, sd)

    # float64 from the float32 weights as saved
    m = model64(sd, cfg)
    m.train()  # nothing depends on the mode: every BatchNorm uses its running statistics
    x = torch.from_numpy(np.load(os.path.join(OUT, "inputs.npy"))).double()
    N, C = x.shape[0], cfg["num_classes"]
    for blk in m.blocks:
        if hasattr(blk.attn, "DLA"):
            blk.attn.DLA.record = {}
    record = []
    logits = m(x, record)
    labels = torch.tensor([(3 + 5 * i) % C for i in range(N)], dtype=torch.long)
    loss = F.cross_entropy(logits, labels, label_smoothing=SMOOTHING)
    loss.backward()

    expected = {"logits": logits.detach().numpy().astype(np.float32)}
    for l, rec in enumerate(record):
        expected[f"attn.{l}"] = rec["attn"].detach().numpy().astype(np.float32)
        if "soft" in rec:
            expected[f"soft.{l}"] = rec["soft"].detach().numpy().astype(np.float32)
        expected[f"tokens.{l}"] = rec["tokens"].detach().numpy().astype(np.float32)
    st.save(os.path.join(d, "expected.safetensors"), expected)

    named = {k: p for k, p in m.named_parameters()}
    grads = ref.stem_ref.rename({k: p.grad for k, p in named.items()}, cfg["stem"])
    trainable = [k for k in sd if k.rsplit(".", 1)[-1] not in RUNNING]
    assert sorted(grads) == sorted(trainable), set(grads) ^ set(trainable)
    out = {f"grad.{k}": grads[k].numpy().astype(np.float32) for k in trainable}
    out["labels"] = labels.numpy().astype(np.float32)
    out["loss.ce"] = np.array([loss.item()], np.float32)
    out["loss.dp.squared"] = np.zeros(1, np.float32)  # no less-attention blocks
    st.save(os.path.join(d, "grads.safetensors"), out, metadata={"smoothing": str(SMOOTHING),
                                                                "loss_ce": repr(loss.item())})

    print(f"{name}: ce {loss.item():.6f} (labels {labels.tolist()}), {len(out) - 3} gradients, "
          f"{len(sd)} checkpoint tensors")
    print("  logits", [[round(v, 4) for v in row] for row in logits.detach().tolist()])
    print("checks:")
    with torch.no_grad():
        # ReLU6 clamps in both DLA layers of both shared blocks
        for l, blk in enumerate(m.blocks):
            if not hasattr(blk.attn, "DLA"):
                continue
            for n in ("pre1", "pre2"):
                z = blk.attn.DLA.record[n]
                lo, hi = int((z < 0).sum()), int((z > 6).sum())
                check(lo > 0 and hi > 0, f"block {l} DLA {n} (before ReLU6 {n[-1]}): {lo} below 0, {hi} above 6 "
                      f"of {z.numel()}, range [{z.min().item():.2f}, {z.max().item():.2f}]")
            blk.attn.DLA.record = None
        # the maps
        for l, rec in enumerate(record):
            A = rec["attn"]
            line = f"block {l} {m.specs[l]['type']}: attn in [{A.min().item():.3f}, {A.max().item():.3f}], " \
                   f"row sums [{A.sum(-1).min().item():.3f}, {A.sum(-1).max().item():.3f}]"
            if "soft" in rec:
                P = rec["soft"]
                ent = -(P * P.clamp_min(1e-300).log()).sum(-1).mean().item()
                line += f", softmax max {P.max().item():.3f}, mean entropy {ent:.3f} " \
                        f"(uniform {math.log(P.shape[-1]):.3f})"
                if l > 0:
                    line += f", max |A - P| = s |carry| {(A - P).abs().max().item():.3f}"
                check(ent < 0.9 * math.log(P.shape[-1]), line)
            else:
                print("  --   " + line)
        if name == NAME:  # the carries: block 2 gets block 0's map, 3 block 2's, 4 refines 3's
            s = m.blocks[0].attn.scale
            check(record[0]["carry"] is None and all(record[l]["carry"] is record[src]["attn"]
                                                     for l, src in ((1, 0), (2, 0), (3, 2), (4, 3))),
                  "carries: none, A0, A0 (block 1 passes it on), A2, A3")
            check(torch.allclose(record[2]["attn"] - record[2]["soft"], s * record[0]["attn"], atol=1e-12) and
                  torch.allclose(record[3]["attn"] - record[3]["soft"], s * record[2]["attn"], atol=1e-12),
                  "A = P + s carry in blocks 2 and 3")
        # what the carry and DLA's identity change
        m.use_carry = False
        d_carry = (logits - m(x)).abs().max().item()
        m.use_carry = True
        check(d_carry > 0.05, f"logits without '+ s carry' in the refiner_release blocks after the first differ by {d_carry:.4f}")
        d_own = (logits - shared_hands_own_map(m, x)).abs().max().item()
        check(d_own > 0.05, f"logits if shared blocks handed on their own map differ by {d_own:.4f}")
        d_id = (logits - no_dla_identity(m, x)).abs().max().item()
        check(d_id > 0.05, f"logits without DLA's identity branch differ by {d_id:.4f}")
        if cfg.get("aux_head"):  # the aux max: no near-ties (its gradient picks one token per class)
            xs = m.norm(record[-1]["tokens"])
            aux = m.aux_head(xs[:, 1:]).sort(dim=1, descending=True)[0]
            gap = (aux[:, 0] - aux[:, 1]).min().item()
            check(gap > 1e-3, f"aux_head max over patch tokens: smallest top-1 minus top-2 gap {gap:.4f}")
            aux_part = (cfg["aux_head"] * aux[:, 0]).abs().max().item()
            print(f"  --   0.5 max aux term up to {aux_part:.3f} in magnitude")
        # float32 forward of the same weights (what the C engine computes) is close
        m32 = ref.load_release(ref.RefinerReleaseViT(cfg), sd)
        d32 = (m32(x.float()).double() - logits).abs().max().item()
        check(d32 < 1e-4, f"float32 forward within {d32:.2e} of float64")
    # gradient spot check by central differences
    worst = 0.0
    names = ref.stem_ref.rename({k: k for k in named}, cfg["stem"])  # release name -> module name
    with torch.no_grad():
        for name in picks:
            p = named[names[name]]
            idx = int(torch.argmax(p.grad.abs().flatten()))
            old = p.flatten()[idx].item()
            h = 1e-6
            vals = []
            for sgn in (1, -1):
                p.view(-1)[idx] = old + sgn * h
                vals.append(F.cross_entropy(m(x), labels, label_smoothing=SMOOTHING).item())
            p.view(-1)[idx] = old
            fd = (vals[0] - vals[1]) / (2 * h)
            g = p.grad.flatten()[idx].item()
            worst = max(worst, abs(fd - g) / max(abs(g), 1e-12))
    check(worst < 1e-5, f"central differences on {len(picks)} gradient entries: worst relative error {worst:.1e}")
    for f in ("config.json", "model.safetensors", "expected.safetensors", "grads.safetensors"):
        print(f"  {f}: {os.path.getsize(os.path.join(d, f))} bytes")


def main():
    write(NAME, CONFIG, SEED, ["blocks.1.attn.DLA.conv_exp.weight", "blocks.4.attn.adapt_bn.weight",
                               "blocks.3.mlp.scale_channel", "patch_embed.bn2.bias", "aux_head.weight",
                               "blocks.0.attn.qkv.weight"])
    write(WIDE_NAME, WIDE, WIDE_SEED, ["blocks.1.attn.DLA.depth_sep_conv.weight", "blocks.2.attn.DLA.conv_exp.weight",
                                       "blocks.1.attn.adapt_bn.bias", "blocks.3.attn.qkv.weight"],
          qkv_gain=lambda l: 2.0 + 1.0 * l)  # 65 keys: sharper maps need larger scores


if __name__ == "__main__":
    main()
