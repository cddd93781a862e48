#!/usr/bin/env python3
"""Writes the tiny-Swin reference fixtures of tests/fixtures/ (swin_tiny, swin_pad, swin_pad_tv)
with PyTorch: /usr/bin/python3 tools/make_swin_fixtures.py [OUT_DIR]
Weights come from torchvision's SwinTransformer class (seeded, then perturbed by
swin_ref.perturb), renamed to timm's names; the expected tensors come from tools/swin_ref.py, and
the logits are checked here against torchvision's own forward of the same weights wherever
torchvision computes the same thing (pad_first with torchvision's clamp, or any setting where no
grid is padded or clamped). See tests/fixtures/README.md for every file."""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import swin_ref  # noqa: E402
import check_swin_ref  # noqa: E402
from swin_names import from_torchvision  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
IMAGENET = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
FAIL = []


def model_args(img, embed, heads, window, pad_order="pad_first", clamp="timm"):
    return {"family": "swin", "img_size": img, "patch_size": 2, "in_chans": 3, "embed_dim": embed,
            "depths": [2, 2], "num_heads": heads, "window_size": window, "mlp_ratio": 4,
            "qkv_bias": True, "patch_norm": True, "pad_order": pad_order, "window_clamp": clamp}


def config(args, classes=10):
    return {"architecture": "custom", "num_classes": classes, "model_args": args,
            "pretrained_cfg": {"input_size": [3, args["img_size"], args["img_size"]], "crop_pct": 0.875,
                               "interpolation": "bicubic", **IMAGENET}}


def torchvision_model(args, seed, classes=10):
    from torchvision.models.swin_transformer import SwinTransformer
    torch.manual_seed(seed)
    tv = SwinTransformer(patch_size=[2, 2], embed_dim=args["embed_dim"], depths=args["depths"],
                         num_heads=args["num_heads"], window_size=[args["window_size"]] * 2,
                         num_classes=classes).eval()
    sd = swin_ref.perturb(from_torchvision(tv.state_dict()), seed + 1)
    return swin_ref.load_torchvision(tv, sd), sd


def timm_tables(args, sd):
    """timm builds a block's relative table for its clamped window: a grid g < M gets the
    (2g-1)^2 centre of the (2M-1)^2 table (the same bias for every pair inside the window)."""
    out, grid, M = dict(sd), args["img_size"] // args["patch_size"], args["window_size"]
    for s in range(len(args["depths"])):
        if s:
            grid = (grid + 1) // 2
        m = swin_ref.block_window(grid, M, False, "timm")[0]
        if m == M:
            continue
        c = M - m
        for k, v in sd.items():
            if k.startswith(f"layers.{s}.") and k.endswith("relative_position_bias_table"):
                out[k] = v.view(2 * M - 1, 2 * M - 1, -1)[c:c + 2 * m - 1, c:c + 2 * m - 1].reshape((2 * m - 1) ** 2, -1)
    return out


def dense(label, model, x):
    """Every block of the fixture against check_swin_ref's dense masked computation."""
    w = check_swin_ref.run_dense(label, model, x)
    print(f"  {label}: every block against the dense computation {w:.3g}")
    FAIL.extend(check_swin_ref.FAIL)
    check_swin_ref.FAIL.clear()


def record(model, x, stage_end_tokens=False):
    """expected: logits and, per block l, attn.l, q.l, k.l, tokens.l, and scores.l where the
    block shifts (the mask is added there; without a shift the scores are the log of the map
    up to a constant per row, which the maps check). stage_end_tokens keeps tokens.l only for
    the last block of each stage (the others feed q.l+1 and k.l+1, which are checked). windows:
    window_token.l and geom.l = [stage, j, gh, gw, M, shift, ph, pw]."""
    rec = []
    with torch.no_grad():
        logits = model(x, record=rec)
    exp, win = {"logits": logits.numpy()}, {}
    for l, r in enumerate(rec):
        g = r["geom"]
        last = l + 1 == len(rec) or rec[l + 1]["geom"]["stage"] != g["stage"]
        keys = ["attn", "q", "k"] + (["scores"] if g["shift"] else [])
        keys += ["tokens"] if last or not stage_end_tokens else []
        for k in keys:
            exp[f"{k}.{l}"] = r[k].contiguous().numpy().astype(np.float32)
        win[f"window_token.{l}"] = r["window_token"].numpy().astype(np.float32)
        win[f"geom.{l}"] = np.array([g["stage"], g["j"], g["gh"], g["gw"], g["M"], g["shift"], g["ph"], g["pw"]],
                                    np.float32)
    return exp, win, logits


def compare_tv(label, logits, tv, x):
    with torch.no_grad():
        d = (logits - tv(x)).abs().max().item()
    print(f"  {label}: logits vs torchvision's forward {d:.3g}")
    if d > 1e-5:
        FAIL.append(f"{label}: logits differ from torchvision by {d:.3g}")


def write(folder, args, sd, files):
    d = os.path.join(OUT, folder)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config(args), f, indent=2)
        f.write("\n")
    st.save(os.path.join(d, "model.safetensors"), {k: v.numpy() for k, v in sd.items()},
            metadata={"format": "pt"})
    for name, tensors in files.items():
        st.save(os.path.join(d, name), tensors)


def main():
    x32 = torch.from_numpy(np.load(os.path.join(OUT, "inputs.npy")))  # (2, 3, 32, 32), make_fixtures.py
    # swin_tiny: grids 16 and 8, window 4, every block shifted or not as Swin does; both pad
    # orders and both clamps agree here, so torchvision is the oracle of everything
    args = model_args(32, 16, [2, 4], 4)
    tv, sd = torchvision_model(args, 300)
    m = swin_ref.SwinRef(dict(args, num_classes=10)).eval()
    m.load_state_dict(sd, strict=True)
    exp, win, logits = record(m, x32, stage_end_tokens=True)
    dense("swin_tiny", m, x32)
    compare_tv("swin_tiny", logits, tv, x32)
    write("swin_tiny", args, sd, {"expected.safetensors": exp, "windows.safetensors": win})

    # swin_pad: img 16, window 5 -> stage 0 grid 8 (padded to 10, shifted by 2: the pad orders
    # differ), stage 1 grid 4 < 5 (the clamps differ); one image (size)
    g = torch.Generator().manual_seed(16)
    x16 = torch.randn(1, 3, 16, 16, generator=g)
    np.save(os.path.join(OUT, "inputs16_1.npy"), x16.numpy())
    args = model_args(16, 8, [1, 2], 5)
    tv, sd = torchvision_model(args, 310)
    sd_timm = timm_tables(args, sd)
    files, outs = {}, {}
    for order in ("pad_first", "roll_first"):
        m = swin_ref.SwinRef(dict(args, num_classes=10, pad_order=order)).eval()
        m.load_state_dict(sd_timm, strict=True)
        exp, win, logits = record(m, x16)
        dense(f"swin_pad {order}", m, x16)
        outs[order] = logits
        suffix = "" if order == "pad_first" else "_roll_first"
        files[f"expected{suffix}.safetensors"] = exp
        files[f"windows{suffix}.safetensors"] = win
    d = (outs["pad_first"] - outs["roll_first"]).abs().max().item()
    print(f"  swin_pad: roll_first vs pad_first logits {d:.3g} (|logits| {outs['pad_first'].abs().max().item():.3g})")
    if d < 1e-3:
        FAIL.append(f"swin_pad: the pad orders should differ, differ by {d:.3g}")
    write("swin_pad", args, sd_timm, files)

    # swin_pad_tv: the same weights with torchvision's clamp (stage 1 keeps M = 5 and pads 4 to
    # 5, the table keeps (2M-1)^2 rows): exactly torchvision's forward. (The pad order only
    # matters in stage 0, where the clamps agree: swin_pad covers roll_first.)
    args_tv = dict(args, window_clamp="torchvision")
    m = swin_ref.SwinRef(dict(args_tv, num_classes=10)).eval()
    m.load_state_dict(sd, strict=True)
    exp, win, logits = record(m, x16)
    dense("swin_pad_tv", m, x16)
    compare_tv("swin_pad_tv", logits, tv, x16)
    d = (logits - outs["pad_first"]).abs().max().item()
    print(f"  swin_pad_tv: torchvision clamp vs timm clamp logits {d:.3g}")
    if d < 1e-3:
        FAIL.append(f"swin_pad_tv: the clamps should differ, differ by {d:.3g}")
    write("swin_pad_tv", args_tv, sd, {"expected.safetensors": exp, "windows.safetensors": win})
    if FAIL:
        print("\n".join(FAIL))
        sys.exit(1)
    total = 0
    for f in ("swin_tiny", "swin_pad", "swin_pad_tv"):
        for n in sorted(os.listdir(os.path.join(OUT, f))):
            total += os.path.getsize(os.path.join(OUT, f, n))
    total += os.path.getsize(os.path.join(OUT, "inputs16_1.npy"))
    print(f"Swin fixtures written to {os.path.abspath(OUT)} ({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
