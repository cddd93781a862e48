#!/usr/bin/env python3
"""attnscope's Swin against torchvision's swin_t (independent code): logits and every window map
within 1e-4, at 224 and at 256 (the window does not divide the grids 64, 32 and 16) in both pad
orders. For the slow suite, when torch is installed:

    /usr/bin/python3 tools/check_swin_torchvision.py BUILD/attnscope [--keep DIR] [--sizes 224,256]

torchvision's swin_t gets a seeded init, then perturbed weights (tools/swin_ref.perturb: the
default init leaves the maps almost uniform), renamed to timm's names (tools/swin_names.py) and
written with a config.json (swin_tiny_patch4_window7_224, 10 classes) into a temporary folder.
`attnscope record --record all --dtype f32` writes the trace; h5py reads logits and
layers/LL/attn, (N, H, nW, M^2, M^2) per block. Logits are compared with torchvision's own
forward where torchvision computes the same thing (224, and pad_first at 256); every map with
tools/swin_ref.py, whose pad_first equals torchvision's logits here (checked too). roll_first
(timm's order, huggingface/pytorch-image-models#2438) has no oracle outside swin_ref: it is
checked against swin_ref's roll_first branch, which check_swin_ref.py checks against a dense
masked computation. Exits 1 with one line per failure, 77 (skipped) without torch or h5py."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    import torch
    from torchvision.models import swin_t
except ImportError as e:  # the slow suite skips this check
    print(f"skipped: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402
import swin_ref  # noqa: E402
from swin_names import from_torchvision  # noqa: E402

TOL = 1e-4
CFG = dict(img_size=224, patch_size=4, in_chans=3, embed_dim=96, depths=[2, 2, 6, 2],
           num_heads=[3, 6, 12, 24], window_size=7, mlp_ratio=4, qkv_bias=True, patch_norm=True,
           num_classes=10)
FAIL = []


def fail(msg):
    FAIL.append(msg)
    print("FAIL:", msg, flush=True)


def maxdiff(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def write_model(d, sd, size, pad_order):
    os.makedirs(d, exist_ok=True)
    st.save(os.path.join(d, "model.safetensors"), {k: v.numpy() for k, v in sd.items()},
            metadata={"format": "pt"})
    cfg = {"architecture": "swin_tiny_patch4_window7_224", "num_classes": CFG["num_classes"],
           "model_args": {"img_size": size, "pad_order": pad_order},
           "pretrained_cfg": {"input_size": [3, size, size], "crop_pct": 0.9, "interpolation": "bicubic",
                              "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def record(binary, model_dir, images, out):
    r = subprocess.run([binary, "record", "--model", model_dir, "--images", images, "--out", out,
                        "--record", "all", "--dtype", "f32", "-q"], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        last = last if len(last) <= 240 else last[:237] + "..."
        fail(f"attnscope record --model {model_dir} exited {r.returncode}: {last}")
        return None
    return out


def trace_logits(f):
    for name in ("images/logits", "logits"):
        if name in f:
            return f[name][:]
    return None


def compare(label, trace, ref_logits, tv_logits, rec):
    with h5py.File(trace, "r") as f:
        lg = trace_logits(f)
        if lg is None:
            fail(f"{label}: the trace has no logits dataset")
        else:
            d = maxdiff(lg, ref_logits)
            print(f"{label}: logits vs swin_ref {d:.3g}" + ("" if tv_logits is None else
                  f", vs torchvision {maxdiff(lg, tv_logits):.3g}"), flush=True)
            if d > TOL:
                fail(f"{label}: logits differ from swin_ref by {d:.3g} (> {TOL:g})")
            if tv_logits is not None and maxdiff(lg, tv_logits) > TOL:
                fail(f"{label}: logits differ from torchvision by {maxdiff(lg, tv_logits):.3g} (> {TOL:g})")
        worst = 0.0
        for l, r in enumerate(rec):
            name = f"layers/{l:02d}/attn"
            if name not in f:
                fail(f"{label}: the trace has no {name}")
                continue
            got, want = f[name][:], r["attn"].numpy()
            if got.shape != want.shape:
                fail(f"{label}: {name} has shape {got.shape}, expected {want.shape} (N, H, nW, M^2, M^2)")
                continue
            d = maxdiff(got, want)
            worst = max(worst, d)
            if d > TOL:
                fail(f"{label}: {name} differs from swin_ref by {d:.3g} (> {TOL:g})")
        print(f"{label}: {len(rec)} window maps, max diff {worst:.3g}", flush=True)


def main():
    args = [a for a in sys.argv[1:]]
    keep = None
    sizes = [224, 256]
    if "--keep" in args:
        i = args.index("--keep")
        keep = args[i + 1]
        del args[i:i + 2]
    if "--sizes" in args:
        i = args.index("--sizes")
        sizes = [int(s) for s in args[i + 1].split(",")]
        del args[i:i + 2]
    if len(args) != 1:
        print("usage: check_swin_torchvision.py BUILD/attnscope [--keep DIR] [--sizes 224,256]")
        sys.exit(2)
    binary = args[0]
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    torch.manual_seed(0)
    tv = swin_t(num_classes=CFG["num_classes"]).eval()
    sd = swin_ref.perturb(from_torchvision(tv.state_dict()), 1)
    swin_ref.load_torchvision(tv, sd)
    work = keep or tempfile.mkdtemp(prefix="swin_tv_")
    g = torch.Generator().manual_seed(7)
    for size in sizes:
        x = torch.randn(2, 3, size, size, generator=g)
        images = os.path.join(work, f"inputs{size}.npy")
        np.save(images, x.numpy())
        with torch.no_grad():
            tv_logits = tv(x).numpy()
        for order in ("pad_first", "roll_first"):  # identical at 224, where M divides every grid
            m = swin_ref.SwinRef(dict(CFG, img_size=size, pad_order=order)).eval()
            m.load_state_dict(sd, strict=True)
            rec = []
            with torch.no_grad():
                ref_logits = m(x, record=rec).numpy()
            same_as_tv = order == "pad_first" or size == 224
            d = maxdiff(ref_logits, tv_logits)
            print(f"swin_t {size} {order}: swin_ref vs torchvision {d:.3g}", flush=True)
            if same_as_tv and d > 1e-5:
                fail(f"swin_t {size} {order}: swin_ref differs from torchvision by {d:.3g}")
            label = f"swin_t {size} {order}"
            d_model = os.path.join(work, f"swin_t_{size}_{order}")
            write_model(d_model, sd, size, order)
            trace = record(binary, d_model, images, os.path.join(work, f"swin_t_{size}_{order}.h5"))
            if trace:
                compare(label, trace, ref_logits, tv_logits if same_as_tv else None, rec)
    if FAIL:
        print(f"{len(FAIL)} failure(s); files in {work}")
        sys.exit(1)
    if not keep:
        shutil.rmtree(work)
    print("swin_t against torchvision ok")


if __name__ == "__main__":
    main()
