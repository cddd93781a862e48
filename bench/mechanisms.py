#!/usr/bin/env python3
"""Speed of each attention mechanism against plain attention on the same backbone, and against
the PyTorch reference implementation of the same mechanism (tools/attn_ref.py), in alternating
rounds of one invocation; prints medians and ratios. Benchmarks are not tests: nothing here
asserts a time.

    python3 bench/mechanisms.py --arch deit_tiny_patch16_224 --threads 2 --rounds 3

Needs a built attnscope (build/attnscope or --attnscope); python3-torch for the PyTorch column
(skipped without it). OPENBLAS_CORETYPE=Haswell halves OpenBLAS's speed on AVX-512 machines:
attnscope bench warns about it; unset it for real figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MECHANISMS = {
    "vanilla": None,
    "lmsa qk_dim=D/4": lambda D, H: {"type": "lmsa", "qk_dim": D // 4},
    "lmsa extreme (1/head)": lambda D, H: {"type": "lmsa", "qk_dim": H},
    "lsla (DS, full biases)": lambda D, H: {"type": "lsla"},
    "less (blocks 1..L-1)": "less",
    "mait R=5 zero": lambda D, H: {"type": "mait", "mask_size": 5},
    "refiner H'=2H k=3": lambda D, H: {"type": "refiner", "expanded_heads": 2 * H, "kernel_size": 3},
}

TORCH_CODE = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
from vit_ref import ViT, init_random
cfg, B, threads, seconds = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
torch.set_num_threads(threads)
m = init_random(ViT(cfg).eval(), 0)
x = torch.randn(B, 3, cfg["img_size"], cfg["img_size"])
with torch.inference_mode():
    m(x)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        m(x); n += B
print(n / (time.perf_counter() - t0))
"""


def attnscope_img_s(exe, cfg_path, batch, threads, seconds):
    out = subprocess.run([exe, "bench", "--arch", cfg_path, "--batch", str(batch), "--threads",
                          str(threads), "--seconds", str(seconds), "--rounds", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["forward"]["img_s"]


def torch_img_s(cfg, batch, threads, seconds):
    # Debian's torch runs on OpenBLAS + OpenMP: without these it oversubscribes the cores
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               OMP_WAIT_POLICY="PASSIVE")
    try:
        out = subprocess.run(["/usr/bin/python3", "-c", TORCH_CODE, os.path.join(ROOT, "tools"),
                              json.dumps(cfg), str(batch), str(threads), str(seconds)],
                             check=True, capture_output=True, text=True, env=env).stdout
        return float(out.strip())
    except (subprocess.CalledProcessError, FileNotFoundError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="deit_tiny_patch16_224")
    ap.add_argument("--attnscope", default=os.path.join(ROOT, "build", "attnscope"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    base = json.loads(subprocess.run([a.attnscope, "info", a.arch, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    D, H, L = base["embed_dim"], base["num_heads"], base["depth"]
    tmp = tempfile.mkdtemp(prefix="attnscope-mech-")
    configs = {}
    for name, make in MECHANISMS.items():
        cfg = dict(base)
        if make == "less":
            cfg["attention"] = [{"type": "vanilla"}] + [{"type": "less"}] * (L - 1)
        elif make is not None:
            cfg["attention"] = [make(D, H)] * L
        path = os.path.join(tmp, f"{len(configs)}.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        configs[name] = (path, cfg)
    ours = {n: [] for n in configs}
    theirs = {n: [] for n in configs}
    for r in range(a.rounds):
        for name, (path, cfg) in configs.items():  # alternate: drift hits every mechanism alike
            ours[name].append(attnscope_img_s(a.attnscope, path, a.batch, a.threads, a.seconds))
            if not a.no_torch:
                t = torch_img_s(cfg, a.batch, a.threads, a.seconds)
                if t:
                    theirs[name].append(t)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    van = statistics.median(ours["vanilla"])
    print(f"{a.arch}, batch {a.batch}, {a.threads} threads, medians of {a.rounds} alternating rounds")
    print(f"{'mechanism':26s} {'img/s':>8s} {'vs vanilla':>11s} {'PyTorch':>9s} {'vs PyTorch':>11s}")
    for name in configs:
        m = statistics.median(ours[name])
        t = statistics.median(theirs[name]) if theirs[name] else None
        print(f"{name:26s} {m:8.1f} {m / van:10.2f}x " +
              (f"{t:9.1f} {m / t:10.2f}x" if t else f"{'-':>9s} {'-':>11s}"))


if __name__ == "__main__":
    main()
