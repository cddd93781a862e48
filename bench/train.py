#!/usr/bin/env python3
"""Training speed: attnscope train against PyTorch (Debian's python3-torch) on the same model,
batch and thread count, in one invocation; prints img/s and the ratio. Benchmarks are not
tests: nothing here asserts a time.

    python3 bench/train.py                       # experiments/models/vit_shapes.json
    python3 bench/train.py --all --threads 2     # every experiments/models/*_shapes.json

attnscope: `attnscope train` on the built-in shapes for one epoch of --steps batches; its
img/s counts the training steps (data transform, forward, backward, clipping, AdamW), not the
dataset generation or the evaluation. PyTorch: tools/vit_ref.py's ViT (tools/swin_ref.py's Swin
for a "family": "swin" config, tools/pvt_ref.py's PVT v2 for "pvt_v2",
tools/refiner_release_ref.py for the Refiner release's blocks, tools/cait_ref.py for "cait" with
weights from one short attnscope training epoch) in train mode on random
tensors already in memory (no data transform, which favours it), the same loss (cross-entropy
with label smoothing 0.1, plus LaViT's term where the model has less-attention blocks),
clip_grad_norm_(1.0) and torch.optim.AdamW, warmed up for 5 steps. Both use float32.

OPENBLAS_CORETYPE: attnscope's GEMMs are OpenBLAS's; if the variable names an older core than
the CPU (Haswell on an AVX-512 machine), SGEMM runs at about half speed. PyTorch's own kernels
may not read it. The script prints the setting; compare runs with the same environment.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TORCH_CODE = r"""
import json, sys, time, torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
from vit_ref import ViT
from swin_ref import SwinRef
from make_train_fixtures import dp_loss
cfg, B, threads, steps = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
torch.manual_seed(0)
pvt = cfg.get("family") == "pvt_v2"
if pvt:  # tools/pvt_ref.py takes its weights as tensors (make_pvt_fixtures' shapes and names)
    import pvt_ref, make_pvt_fixtures
    from make_stage_train_fixtures import pvt_dp_loss
    att = cfg.get("attention", [])
    cfg = dict(cfg, less={l for l, e in enumerate(att) if e.get("type") == "less"},
               lmsa={l: e["qk_dim"] for l, e in enumerate(att) if e.get("type") == "lmsa"})
    m = pvt_ref.PVTv2(cfg, make_pvt_fixtures.weights(cfg, 0)).train()
    named = [(n, getattr(m, "w%d" % i).requires_grad_(True)) for i, n in enumerate(m.names)]
elif cfg.get("family") == "cait":  # tools/cait_ref.py is a function of a state dict: attnscope's weights
    import cait_ref, safetensors_io
    sd = {k: torch.from_numpy(v).float().requires_grad_(True) for k, v in safetensors_io.load(sys.argv[6]).items()}
    mait = {b: e["mask_size"] for b, e in enumerate(cfg.get("attention", [])) if e.get("type") == "mait"}
    modes = {e.get("mask_mode", "zero") for e in cfg.get("attention", []) if e.get("type") == "mait"}
    assert len(modes) <= 1, "tools/cait_ref.py takes one mask mode for the whole model"
    ccfg = dict(cfg, mait=mait, mait_mode=modes.pop() if modes else "zero")
    class CaiTRef(torch.nn.Module):
        def forward(self, x, record=None):
            return cait_ref.forward(sd, ccfg, x)[0]
    m = CaiTRef()
    named = list(sd.items())
elif any(e.get("type") in ("refiner_release", "refiner_shared") for e in cfg.get("attention", [])):
    from refiner_release_ref import RefinerReleaseViT  # the Refiner release's blocks
    m = RefinerReleaseViT(cfg).train()
    named = list(m.named_parameters())
else:
    m = (SwinRef(cfg) if cfg.get("family") == "swin" else ViT(cfg)).train()
    named = list(m.named_parameters())
def decays(n, p):
    return p.dim() >= 2 and "token" not in n and "pos_embed" not in n and "relative_position_bias_table" not in n
decay = [p for n, p in named if decays(n, p)]
rest = [p for n, p in named if not decays(n, p)]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}], lr=1e-3)
xs = torch.randn(8, B, 3, cfg["img_size"], cfg["img_size"])
ys = torch.randint(0, cfg["num_classes"], (8, B))
less = cfg["less"] if pvt else any(type(b.attn).__name__ == "LessAttention" for b in getattr(m, "blocks", []))
def step(i):
    rec = [] if less else None
    out = m(xs[i % 8], record=rec)
    loss = F.cross_entropy(out, ys[i % 8], label_smoothing=0.1)
    if less:  # the dp terms carry make_train_fixtures' weight 0.5; attnscope train's default is 0.1
        loss = loss + 0.1 / 0.5 * (pvt_dp_loss(rec, less, B, "squared") if pvt else dp_loss(m, rec, B, "squared"))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
    opt.step()
for i in range(5):
    step(i)
t0 = time.perf_counter()
for i in range(steps):
    step(i)
dt = time.perf_counter() - t0
print(json.dumps({"img_s": steps * B / dt}))
"""


def model_cfg(path):
    """attnscope's config (with its defaults filled in) as tools/vit_ref.ViT takes it."""
    out = subprocess.run([ATTNSCOPE, "info", path, "--json"], capture_output=True, text=True)
    if out.returncode == 0:
        j = json.loads(out.stdout)
        return j.get("config", j)
    raise SystemExit(f"attnscope info {path} --json failed: {out.stderr.strip()}")


def run_attnscope(cfg_path, batch, threads, steps):
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([ATTNSCOPE, "train", "--config", cfg_path, "--data", f"shapes:{batch * steps}",
                            "--epochs", "1", "--batch", str(batch), "--threads", str(threads),
                            "--val-fraction", "0.1", "--out", os.path.join(d, "run")],
                           capture_output=True, text=True)
        m = re.search(r"done: .*?, ([0-9.]+) img/s", r.stdout)
        if r.returncode != 0 or not m:
            raise SystemExit(f"attnscope train failed: {r.stderr.strip()}")
        return float(m.group(1))


def init_weights(cfg_path, d):
    """Weights with the model's names and shapes, for the references that take a state dict:
    those of one short attnscope training epoch (their values do not matter for speed)."""
    r = subprocess.run([ATTNSCOPE, "train", "--config", cfg_path, "--data", "shapes:64", "--epochs", "1",
                        "--batch", "32", "--quiet", "--out", os.path.join(d, "init")], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"attnscope train (weights for the PyTorch side) failed: {r.stderr.strip()}")
    return os.path.join(d, "init", "epoch-001", "model.safetensors")


def run_torch(cfg, batch, threads, steps, weights=""):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, "-c", TORCH_CODE, os.path.join(ROOT, "tools"), json.dumps(cfg),
                        str(batch), str(threads), str(steps), weights], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"PyTorch run failed: {r.stderr.strip()[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["img_s"]


def main():
    global ATTNSCOPE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=os.path.join(ROOT, "experiments", "models", "vit_shapes.json"))
    ap.add_argument("--all", action="store_true", help="every experiments/models/*_shapes.json")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=3, help="alternating runs of each; medians are compared")
    ap.add_argument("--attnscope", default=os.path.join(ROOT, "build", "attnscope"))
    a = ap.parse_args()
    ATTNSCOPE = a.attnscope
    import torch
    print(f"threads {a.threads}, batch {a.batch}, {a.steps} timed steps; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; torch {torch.__version__}")
    configs = sorted(glob.glob(os.path.join(ROOT, "experiments", "models", "*_shapes.json"))) if a.all else [a.config]
    print(f"median of {a.repeat} alternating runs each (range in brackets); ratio of the medians")
    print(f"{'model':<16} {'attnscope img/s':>22} {'PyTorch img/s':>20} {'ratio':>7}")
    for c in configs:
        cfg = model_cfg(c)
        ours, theirs = [], []
        with tempfile.TemporaryDirectory() as d:
            weights = init_weights(c, d) if cfg.get("family") == "cait" else ""
            for _ in range(a.repeat):  # alternate, so that a slow spell of the machine hits both
                ours.append(run_attnscope(c, a.batch, a.threads, a.steps))
                theirs.append(run_torch(cfg, a.batch, a.threads, a.steps, weights))
        mo, mt = statistics.median(ours), statistics.median(theirs)
        print(f"{os.path.basename(c)[:-5]:<16} {mo:>6.0f} [{min(ours):>5.0f}-{max(ours):<5.0f}]"
              f"    {mt:>5.0f} [{min(theirs):>4.0f}-{max(theirs):<4.0f}] {mo / mt:>6.2f}x", flush=True)


if __name__ == "__main__":
    main()
