#!/usr/bin/env python3
"""attnscope against PyTorch and ONNX Runtime on the same architecture, batch and thread count,
in one invocation: rounds of (attnscope plain + recording every map, PyTorch, ONNX Runtime, and
whole processes on --process-images images: `attnscope record` and ONNX Runtime from start to
exit), img/s medians and ranges, and the ratios. Every program runs with its own default thread
waiting (OMP_WAIT_POLICY is not set: forcing PASSIVE slowed attnscope's many short parallel
regions by a quarter at batch 1). Benchmarks are not tests: nothing here asserts a time.

    python3 bench/compare.py --arch deit_tiny_patch16_224 --batch 8 --threads 2 --ort-dir /tmp/ort
    python3 bench/compare.py --arch swin_tiny_patch4_window7_224 --batch 1 --threads 2 --ort-dir /tmp/ort
    python3 bench/compare.py --arch pvt_v2_b2 --batch 1 --threads 2 --ort-dir /tmp/ort
    python3 bench/compare.py --arch vit_small_patch14_dinov2 --batch 1 --threads 2 --ort-dir /tmp/ort

Families: ViT/DeiT names (and CONFIG.json) run in PyTorch as tools/vit_ref.py built from
`attnscope info --json`, the modern ViT family (DeiT III, DINOv2, CLIP, SigLIP) as
tools/vitfam_ref.py, PVT v2 as tools/pvt_ref.py; swin_{tiny,small,base}_patch4_window7_224 as
torchvision's swin_t/s/b.
Both are exported to ONNX (--opset, default 17) for ONNX Runtime, which must reproduce PyTorch's
logits (checked every round). Where the attnscope binary refuses the architecture, its line says
so and the PyTorch and ONNX Runtime figures are still measured.

Needs python3-torch (python3-torchvision for Swin). ONNX Runtime: `npm install --ignore-scripts
onnxruntime-node` in a folder given as --ort-dir (its install script fetches GPU extras from the
internet; the CPU binary is in the package). All runs use random weights and inputs: speed does not
depend on the values. OPENBLAS_CORETYPE: see --openblas-coretype and docs/performance.md.
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

# attnscope names -> torchvision builders (random weights). torchvision pads before it rolls;
# at 224 every Swin grid divides by the window, so pad order does not arise.
TORCHVISION = {
    "swin_tiny_patch4_window7_224": ("swin_t", 224),
    "swin_small_patch4_window7_224": ("swin_s", 224),
    "swin_base_patch4_window7_224": ("swin_b", 224),
}

# One PyTorch program for every family: build the model, then "export" (ONNX + the input and the
# logits, raw float32, for ONNX Runtime's check) or "time" (img/s over SECONDS). It also reports the
# OpenBLAS kernels its GEMMs ran: Debian's torch takes SGEMM from OpenBLAS (libblas.so.3), so
# OPENBLAS_CORETYPE moves PyTorch as it moves attnscope.
TORCH_CODE = r"""
import ctypes, json, os, sys, time, torch
spec, B, threads, mode, arg = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
torch.set_num_threads(threads)
torch.manual_seed(0)
if spec["builder"] == "vit_ref":
    sys.path.insert(0, spec["tools"])
    from vit_ref import ViT, init_random
    m = init_random(ViT(spec["cfg"]).eval(), 0)
elif spec["builder"] == "vitfam_ref":
    sys.path.insert(0, spec["tools"])
    from vit_ref import init_random
    from vitfam_ref import VitFam
    m = init_random(VitFam(spec["cfg"]).eval(), 0)
elif spec["builder"] == "pvt_ref":
    sys.path.insert(0, spec["tools"])
    from make_pvt_fixtures import weights
    from pvt_ref import PVTv2
    sd = weights(spec["cfg"], 0)
    m = PVTv2(spec["cfg"], sd).eval()
else:
    import torchvision
    m = getattr(torchvision.models, spec["builder"])().eval()
x = torch.randn(B, spec["in_chans"], spec["img_size"], spec["img_size"])
try:
    lib = ctypes.CDLL("libopenblas.so.0")
    lib.openblas_get_corename.restype = ctypes.c_char_p
    core = lib.openblas_get_corename().decode()
except (OSError, AttributeError):
    core = "(not OpenBLAS)"
out = {"openblas_core": core}
if mode == "save":
    # the same weights in timm's names for `attnscope record`, and N random images (.npy)
    sys.path.insert(0, spec["tools"])
    import numpy as np, safetensors_io
    sd = sd if spec["builder"] == "pvt_ref" else m.state_dict()
    safetensors_io.save(os.path.join(arg, "weights.safetensors"),
                        {k: v.detach().float().contiguous().numpy() for k, v in sd.items()})
    n = int(sys.argv[6])
    np.save(os.path.join(arg, "images.npy"),
            torch.randn(n, spec["in_chans"], spec["img_size"], spec["img_size"]).numpy())
elif mode == "export":
    with torch.inference_mode():
        y = m(x)
    torch.onnx.export(m, x, os.path.join(arg, "model.onnx"), opset_version=spec["opset"],
                      input_names=["x"], output_names=["y"])
    x.numpy().tofile(os.path.join(arg, "x.f32"))
    y.numpy().tofile(os.path.join(arg, "y.f32"))
else:
    seconds = float(arg)
    with torch.inference_mode():
        m(x)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            m(x); n += B
        out["img_s"] = n / (time.perf_counter() - t0)
print(json.dumps(out))
"""

# ONNX Runtime's plain forward on the exported input; its first run's logits are compared with
# PyTorch's (the export is only worth timing if it computes the same thing).
ORT_CODE = r"""
const ort = require('onnxruntime-node'), fs = require('fs');
const [dir, B, C, S, threads, seconds] = process.argv.slice(1);  // node -e: no script path
const f32 = (p) => { const b = fs.readFileSync(p); return new Float32Array(b.buffer, b.byteOffset, b.length / 4); };
(async () => {
  const sess = await ort.InferenceSession.create(dir + '/model.onnx', {intraOpNumThreads: +threads,
      interOpNumThreads: 1, graphOptimizationLevel: 'all', executionMode: 'sequential'});
  const feeds = {x: new ort.Tensor('float32', f32(dir + '/x.f32'), [+B, +C, +S, +S])};
  const y = (await sess.run(feeds)).y.data, ref = f32(dir + '/y.f32');
  let err = y.length == ref.length ? 0 : Infinity;
  for (let i = 0; i < y.length && err < Infinity; i++) err = Math.max(err, Math.abs(y[i] - ref[i]));
  let k = 0, dt = 0; const t0 = process.hrtime.bigint();
  while (dt < +seconds) { await sess.run(feeds); k += +B; dt = Number(process.hrtime.bigint() - t0) / 1e9; }
  console.log(JSON.stringify({img_s: k / dt, max_abs_err: err}));
})().catch((e) => { console.error(String(e)); process.exit(1); });
"""

# ONNX Runtime as a whole process: start, session, ceil(N / B) batches, exit (timed from outside).
ORT_PROCESS_CODE = r"""
const ort = require('onnxruntime-node'), fs = require('fs');
const [dir, B, C, S, threads, N] = process.argv.slice(1);
(async () => {
  const sess = await ort.InferenceSession.create(dir + '/model.onnx', {intraOpNumThreads: +threads,
      interOpNumThreads: 1, graphOptimizationLevel: 'all', executionMode: 'sequential'});
  const b = fs.readFileSync(dir + '/x.f32');
  const feeds = {x: new ort.Tensor('float32', new Float32Array(b.buffer, b.byteOffset, b.length / 4), [+B, +C, +S, +S])};
  for (let k = 0; k < +N; k += +B) await sess.run(feeds);
})().catch((e) => { console.error(String(e)); process.exit(1); });
"""


def timed(cmd, env=None):
    """Wall seconds of cmd as a whole process (Failed as run's)."""
    t0 = time.perf_counter()
    run(cmd, env=env)
    return time.perf_counter() - t0


class Failed(Exception):
    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status  # exit status; negative: killed by that signal; None: not started


def run(cmd, env=None):
    """stdout of cmd; Failed with its last stderr line (the tool's own one-line reason) if not 0."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise Failed(f"{cmd[0]}: not found")
    if r.returncode != 0:
        lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
        why = lines[-1] if lines else "nothing on stderr"
        why = why if len(why) <= 400 else why[:400] + " ..."
        how = f"was killed by signal {-r.returncode}" if r.returncode < 0 else f"exited {r.returncode}"
        raise Failed(f"{os.path.basename(cmd[0])} {how}: {why}", r.returncode)
    return r.stdout


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


def torch_spec(a):
    """What the PyTorch side builds for --arch: torchvision's Swin or tools/vit_ref.py's ViT."""
    if a.arch in TORCHVISION:
        builder, size = TORCHVISION[a.arch]
        return {"builder": builder, "img_size": size, "in_chans": 3, "opset": a.opset}
    if a.arch.startswith("swin_"):
        sys.exit(f"compare.py: {a.arch} has no torchvision counterpart; use one of "
                 f"{', '.join(TORCHVISION)}")
    try:
        cfg = json.loads(run([a.attnscope, "info", "--json", a.arch]))
    except Failed as e:
        sys.exit(f"compare.py: attnscope info cannot describe {a.arch} ({e}); build attnscope "
                 f"(ninja -C build) or give --attnscope")
    cfg.pop("cost", None)
    # PVT v2 as tools/pvt_ref.py, the modern ViT family's options as tools/vitfam_ref.py, a
    # plain ViT/DeiT as tools/vit_ref.py (all written from the equations, random weights)
    modern = (cfg.get("init_values") or cfg.get("reg_tokens") or cfg.get("no_embed_class") or
              cfg.get("pre_norm") or cfg.get("act_layer", "gelu") != "gelu" or cfg.get("global_pool") == "map")
    builder = "pvt_ref" if cfg.get("family") == "pvt_v2" else "vitfam_ref" if modern else "vit_ref"
    return {"builder": builder, "cfg": cfg, "tools": os.path.join(ROOT, "tools"),
            "img_size": cfg["img_size"], "in_chans": cfg["in_chans"], "opset": a.opset}


def blas_env(a):
    """The environment of the OpenBLAS users (attnscope, PyTorch) under --openblas-coretype."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads))
    if a.openblas_coretype == "unset":
        env.pop("OPENBLAS_CORETYPE", None)
    elif a.openblas_coretype != "inherit":
        env["OPENBLAS_CORETYPE"] = a.openblas_coretype
    return env


def span(v):
    return f"{min(v):.1f}-{max(v):.1f}" if len(v) > 1 else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="deit_tiny_patch16_224",
                    help="an attnscope architecture name or CONFIG.json (ViT family), or a Swin name: "
                         + ", ".join(TORCHVISION))
    ap.add_argument("--batch", type=int, default=8, help="images per forward pass, every side")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads, every side")
    ap.add_argument("--seconds", type=float, default=4,
                    help="per attnscope variant per round; half that for PyTorch and ONNX Runtime")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians and ranges over them")
    ap.add_argument("--attnscope", default=os.path.join(ROOT, "build", "attnscope"), help="the binary timed")
    ap.add_argument("--process-images", type=int, default=64,
                    help="also time whole processes on this many images each round: `attnscope record` "
                         "(start-up, weights file, trace, every map) and ONNX Runtime (start-up, "
                         "session, batches); 0: not. Default: 64")
    ap.add_argument("--ort-dir", default=os.environ.get("ORT_DIR", ""),
                    help="folder whose node_modules holds onnxruntime-node")
    ap.add_argument("--opset", type=int, help="ONNX opset of the export, with --ort-dir (torch 1.13: "
                    "7-17; Swin needs 11 or later: its pad amounts are traced values). Default: 17")
    ap.add_argument("--openblas-coretype", default="inherit", metavar="inherit|unset|NAME",
                    help="OPENBLAS_CORETYPE for attnscope and PyTorch (both run OpenBLAS's SGEMM; "
                         "ONNX Runtime has its own kernels): inherit the environment's (default), "
                         "unset it (OpenBLAS picks the CPU's best), or set NAME, e.g. SkylakeX")
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
                    help="the Python with torch (and torchvision) that runs the PyTorch side")
    a = ap.parse_args()
    if a.rounds < 1 or a.seconds <= 0 or a.batch < 1 or a.threads < 1 or a.process_images < 0:
        sys.exit("compare.py: --rounds, --batch and --threads must be >= 1, --seconds > 0 and "
                 "--process-images >= 0")
    if a.opset is not None and not a.ort_dir:
        sys.exit("compare.py: --opset is the ONNX export's, which runs only for ONNX Runtime: give --ort-dir too")
    a.opset = 17 if a.opset is None else a.opset
    if a.ort_dir and not os.path.isdir(os.path.join(a.ort_dir, "node_modules", "onnxruntime-node")):
        sys.exit(f"compare.py: --ort-dir {a.ort_dir}: no node_modules/onnxruntime-node there; "
                 f"run `npm install --ignore-scripts onnxruntime-node` in it")

    if not os.access(a.attnscope, os.X_OK):
        sys.exit(f"compare.py: no attnscope binary at {a.attnscope}: build it (meson setup build "
                 f"--buildtype=release && ninja -C build) or give --attnscope")
    spec = torch_spec(a)
    env = blas_env(a)
    core_env = env.get("OPENBLAS_CORETYPE")
    print(f"{a.arch}, batch {a.batch}, {a.threads} threads, float32, {a.rounds} rounds, "
          f"OPENBLAS_CORETYPE{'=' + core_env if core_env else ' unset'} for attnscope and PyTorch")
    if core_env and a.openblas_coretype == "inherit":
        print(f"note: OPENBLAS_CORETYPE={core_env} comes from the environment; on an AVX-512 CPU a "
              f"value such as Haswell halves OpenBLAS's SGEMM (attnscope's and PyTorch's). Measure "
              f"with the CPU's best kernels: --openblas-coretype unset (or SkylakeX)")

    torch_name = "PyTorch " + run([a.python, "-c", "import torch; print(torch.__version__)"]).strip()
    ort_name = "ONNX Runtime"
    if a.ort_dir:
        with open(os.path.join(a.ort_dir, "node_modules", "onnxruntime-node", "package.json")) as f:
            ort_name += " " + json.load(f)["version"]
    N = a.process_images
    names = {"fwd": "attnscope forward", "rec": "attnscope recording every map",
             "torch": torch_name, "ort": ort_name,
             "proc": f"attnscope record, process, {N} img", "ortproc": f"ONNX Runtime, process, {N} img"}
    samples = {k: [] for k in names}
    overheads, ours, ours_why, cores, ort_err = [], None, "", {}, 0.0
    ours_ok, torch_ok = True, True
    with tempfile.TemporaryDirectory() as tmp:
        ort_ok = bool(a.ort_dir)
        if ort_ok:
            try:
                print(f"exporting to ONNX (opset {a.opset}) ...", flush=True)
                run([a.python, "-c", TORCH_CODE, json.dumps(spec), str(a.batch), str(a.threads),
                     "export", tmp], env=env)
            except Failed as e:
                print(f"ONNX Runtime: not run: the ONNX export failed: {e}")
                ort_ok = False
        node_env = dict(env, NODE_PATH=os.path.join(a.ort_dir, "node_modules"))
        # whole processes: the PyTorch model's weights in timm's names for `attnscope record`
        proc_ok, proc_why = N > 0 and spec["builder"] != "torchvision" and "cfg" in spec, ""
        if N > 0 and not proc_ok:
            proc_why = f"whole process: not measured for {a.arch} (torchvision's names are not timm's)"
            print(proc_why)
        if proc_ok:
            try:
                run([a.python, "-c", TORCH_CODE, json.dumps(spec), str(a.batch), str(a.threads), "save",
                     tmp, str(N)], env=env)
            except Failed as e:
                proc_why = f"whole process: not measured: saving the weights failed: {e}"
                print(proc_why)
                proc_ok = False
        proc_cmd = [a.attnscope, "record", "--model", os.path.join(tmp, "weights.safetensors"), "--arch",
                    a.arch, "--images", os.path.join(tmp, "images.npy"), "--out", os.path.join(tmp, "whole.h5"),
                    "--force", "--batch", str(a.batch), "--threads", str(a.threads)]
        # Rounds of (attnscope, PyTorch, ONNX Runtime), medians reported: on a shared machine the
        # speed drifts by tens of percent within a minute, and ratios of runs minutes apart would
        # measure the drift.
        for r in range(a.rounds):
            if ours_ok:
                try:
                    ours = json.loads(run([a.attnscope, "bench", "--arch", a.arch, "--batch", str(a.batch),
                                           "--threads", str(a.threads), "--seconds", str(a.seconds),
                                           "--rounds", "1", "--record", "--json"], env=env))
                    samples["fwd"].append(ours["forward"]["img_s"])
                    samples["rec"].append(ours["recording"]["img_s"])
                    overheads.append(100 * (ours["forward"]["img_s"] / ours["recording"]["img_s"] - 1))
                    cores["attnscope"] = ours.get("openblas_core", "?")
                except Failed as e:
                    # a refusal is a one-line error and exit 1; anything else is a failure to report
                    ours_why = (f"attnscope cannot run {a.arch} yet ({e})" if r == 0 and e.status == 1
                                else f"attnscope bench failed in round {r + 1}: {e}")
                    print(ours_why)
                    ours_ok = False
            if torch_ok:
                try:
                    t = last_json(run([a.python, "-c", TORCH_CODE, json.dumps(spec), str(a.batch),
                                       str(a.threads), "time", str(a.seconds / 2)], env=env))
                    samples["torch"].append(t["img_s"])
                    cores["PyTorch"] = t["openblas_core"]
                except Failed as e:
                    print(f"PyTorch: not run: {e}")
                    torch_ok = False
            if ort_ok:
                try:
                    o = json.loads(run(["node", "-e", ORT_CODE, tmp, str(a.batch), str(spec["in_chans"]),
                                        str(spec["img_size"]), str(a.threads), str(a.seconds / 2)],
                                       env=node_env))
                    samples["ort"].append(o["img_s"])
                    ort_err = max(ort_err, o["max_abs_err"] if o["max_abs_err"] is not None else float("inf"))
                except Failed as e:
                    print(f"ONNX Runtime: not run: {e}")
                    ort_ok = False
            if proc_ok and ours_ok:
                try:
                    samples["proc"].append(N / timed(proc_cmd, env=env))
                except Failed as e:
                    proc_why = f"whole process: attnscope record failed: {e}"
                    print(proc_why)
                    proc_ok = False
            if proc_ok and ort_ok:
                try:
                    samples["ortproc"].append(N / timed(["node", "-e", ORT_PROCESS_CODE, tmp, str(a.batch),
                                                         str(spec["in_chans"]), str(spec["img_size"]),
                                                         str(a.threads), str(N)], env=node_env))
                except Failed as e:
                    print(f"ONNX Runtime whole process: not run: {e}")
            print(f"round {r + 1}/{a.rounds}: " + ", ".join(f"{names[k].split()[0] if k != 'rec' else 'recording'} "
                                                          f"{v[-1]:.1f}" for k, v in samples.items()
                                                          if len(v) == r + 1), flush=True)
    if not a.ort_dir:
        print("ONNX Runtime: not run (give --ort-dir with onnxruntime-node installed)")

    if cores:
        print("OpenBLAS kernels: " + ", ".join(f"{k} {v}" for k, v in cores.items())
              + ("; attnscope finds them SUBOPTIMAL for this CPU: rerun with --openblas-coretype unset"
                 if ours and ours.get("openblas_suboptimal") else ""))
        want = env.get("OPENBLAS_CORETYPE")
        if want and any(v.lower() != want.lower() for v in cores.values()):
            print(f"note: OPENBLAS_CORETYPE={want} asked for, OpenBLAS ran other kernels (a name it "
                  f"does not know, or one this CPU cannot run)")
    if ours and "gemm_ceiling_gflops" in ours:
        print(f"SGEMM ceiling {ours['gemm_ceiling_gflops']:.0f} GFLOP/s; attnscope's forward at "
              f"{ours['forward']['pct_ceiling']:.0f}% of it (last round)")
    if samples["ort"]:
        print(f"ONNX export (opset {a.opset}) checked: ONNX Runtime's logits within {ort_err:.1e} of PyTorch's")
        if not ort_err <= 1e-3:
            print("WARNING: ONNX Runtime does not compute PyTorch's model (logits differ by more than "
                  "1e-3): its figures are not comparable; try another --opset")
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    refs = [k for k in ("ort", "torch") if k in med]
    print(f"\n{'':34s} {'img/s':>8s} {'range':>12s} {'ms/img':>8s}  "
          + "  ".join(f"{'vs ' + names[k].split()[0]:>12s}" for k in refs))
    for k, v in med.items():
        ratio = "  ".join(f"{(f'{v / med[r]:.2f}x' if r != k else ''):>12s}" for r in refs)
        print(f"{names[k]:34s} {v:8.1f} {span(samples[k]):>12s} {1000 / v:8.2f}  {ratio}")
    if "fwd" in med:
        print(f"\nrecording every map costs {100 * (med['fwd'] / med['rec'] - 1):.1f}% over attnscope's "
              f"plain forward (ratio of medians; per round from {min(overheads):.1f}% to {max(overheads):.1f}%)")
    if "proc" in med:
        vs = "".join(f"; {med['proc'] / med[k]:.2f}x {names[k]}" for k in ("ort", "ortproc", "torch") if k in med)
        print(f"whole process: `attnscope record` of {N} images (start-up, weights file, trace, every map) "
              f"at {med['proc']:.1f} img/s{vs}")
    print(f"medians of {a.rounds} alternating rounds; ranges are min-max over the rounds")
    if ours_why:
        print(ours_why)


if __name__ == "__main__":
    main()
