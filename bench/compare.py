#!/usr/bin/env python3
"""attnscope against PyTorch (and ONNX Runtime where installed) on the same architecture, batch
and thread count, in one invocation; prints img/s and the ratios. Benchmarks are not tests:
nothing here asserts a time.

    python3 bench/compare.py --arch deit_tiny_patch16_224 --batch 8 --threads 2
    python3 bench/compare.py --arch vit_base_patch16_224 --batch 8 --ort-dir /tmp/ort

Needs python3-torch. ONNX Runtime: `npm install --ignore-scripts onnxruntime-node` in a folder
given as --ort-dir (its install script fetches GPU extras from the internet; the CPU binary is
in the package). All runs use random weights and inputs: speed does not depend on the values.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TORCH_CODE = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
from vit_ref import ViT, init_random
cfg, B, threads, seconds, onnx_out = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
torch.set_num_threads(threads)
m = init_random(ViT(cfg).eval(), 0)
x = torch.randn(B, cfg["in_chans"], cfg["img_size"], cfg["img_size"])
with torch.inference_mode():
    m(x)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        m(x); n += B
    dt = time.perf_counter() - t0
if onnx_out:
    torch.onnx.export(m, x, onnx_out, opset_version=14, input_names=["x"], output_names=["y"])
print(json.dumps({"img_s": n / dt}))
"""

ORT_CODE = r"""
const ort = require('onnxruntime-node');
const [model, B, C, S, threads, seconds] = process.argv.slice(1);  // node -e: no script path
(async () => {
  const sess = await ort.InferenceSession.create(model, {intraOpNumThreads: +threads,
      interOpNumThreads: 1, graphOptimizationLevel: 'all', executionMode: 'sequential'});
  const n = +B * +C * +S * +S, data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.random() - 0.5;
  const feeds = {x: new ort.Tensor('float32', data, [+B, +C, +S, +S])};
  await sess.run(feeds);
  let k = 0; const t0 = process.hrtime.bigint();
  let dt = 0;
  while (dt < +seconds) { await sess.run(feeds); k += +B; dt = Number(process.hrtime.bigint() - t0) / 1e9; }
  console.log(JSON.stringify({img_s: k / dt}));
})();
"""


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {r.stderr.strip()[-500:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="deit_tiny_patch16_224")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seconds", type=float, default=4, help="per attnscope run; half that for the others")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--attnscope", default=os.path.join(ROOT, "build", "attnscope"))
    ap.add_argument("--ort-dir", default=os.environ.get("ORT_DIR", ""),
                    help="folder whose node_modules holds onnxruntime-node")
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable)
    a = ap.parse_args()

    cfg = json.loads(run([a.attnscope, "info", "--json", a.arch]))
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
               OMP_WAIT_POLICY="PASSIVE")
    print(f"{a.arch}, batch {a.batch}, {a.threads} threads, float32, {a.rounds} rounds")
    core = os.environ.get("OPENBLAS_CORETYPE")
    if core:
        print(f"note: OPENBLAS_CORETYPE={core} is set; it slows attnscope's OpenBLAS (and any "
              "OpenBLAS-based run) on AVX-512 CPUs; PyTorch and ONNX Runtime use their own kernels")

    # Rounds of (attnscope, PyTorch, ONNX Runtime), medians reported: on a shared machine the
    # speed drifts by tens of percent within a minute, and ratios of runs minutes apart would
    # measure the drift.
    samples = {}
    torch_name = "PyTorch " + run([a.python, "-c", "import torch; print(torch.__version__)"]).strip()
    ort_name = "ONNX Runtime (onnxruntime-node)"
    with tempfile.TemporaryDirectory() as tmp:
        onnx = os.path.join(tmp, "model.onnx") if a.ort_dir else ""
        for r in range(a.rounds):
            ours = json.loads(run([a.attnscope, "bench", "--arch", a.arch, "--batch", str(a.batch),
                                   "--threads", str(a.threads), "--seconds", str(a.seconds),
                                   "--rounds", "1", "--record", "--json"]))
            samples.setdefault("attnscope forward", []).append(ours["forward"]["img_s"])
            samples.setdefault("attnscope recording every map", []).append(ours["recording"]["img_s"])
            try:
                t = json.loads(run([a.python, "-c", TORCH_CODE, os.path.join(ROOT, "tools"), json.dumps(cfg),
                                    str(a.batch), str(a.threads), str(a.seconds / 2), onnx if r == 0 else ""],
                                   env=env).strip().splitlines()[-1])
                samples.setdefault(torch_name, []).append(t["img_s"])
            except RuntimeError as e:
                print("PyTorch: not run:", e)
                onnx = ""
            if onnx and os.path.exists(onnx):
                try:
                    node_env = dict(env, NODE_PATH=os.path.join(a.ort_dir, "node_modules"))
                    o = json.loads(run(["node", "-e", ORT_CODE, onnx, str(a.batch), str(cfg["in_chans"]),
                                        str(cfg["img_size"]), str(a.threads), str(a.seconds / 2)], env=node_env))
                    samples.setdefault(ort_name, []).append(o["img_s"])
                except RuntimeError as e:
                    print("ONNX Runtime: not run:", e)
                    onnx = ""
        if not a.ort_dir:
            print("ONNX Runtime: not run (give --ort-dir with onnxruntime-node installed)")
    rows = [(name, statistics.median(v)) for name, v in samples.items()]
    print(f"OpenBLAS kernel {ours['openblas_core']}"
          f"{' (SUBOPTIMAL for this CPU)' if ours['openblas_suboptimal'] else ''}; "
          f"SGEMM ceiling {ours['gemm_ceiling_gflops']:.0f} GFLOP/s; "
          f"forward at {ours['forward']['pct_ceiling']:.0f}% of it")
    base = {name: v for name, v in rows}
    print(f"\n{'':34s} {'img/s':>8s} {'ms/img':>8s}  ratios")
    refs = [n for n, _ in rows[2:]]
    for name, v in rows:
        ratio = "  ".join(f"{v / base[r]:.2f}x {r.split()[0]}" for r in refs if r != name)
        print(f"{name:34s} {v:8.1f} {1000 / v:8.2f}  {ratio}")
    print(f"recording costs {100 * (base['attnscope forward'] / base['attnscope recording every map'] - 1):.1f}% "
          f"over attnscope's plain forward (medians of {a.rounds} rounds; attnscope's forward "
          f"ranged {min(samples['attnscope forward']):.1f}-{max(samples['attnscope forward']):.1f} img/s)")


if __name__ == "__main__":
    main()
