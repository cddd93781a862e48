#!/usr/bin/env python3
"""The viewer's speed on a multi-GB ViT-B trace: time to the first frame, and redraw times while
navigating (heads, layers, images, hovering queries, head grid, depth strip, analysis panels).
The issue's budgets: first frame under 0.5 s, redraws under 16 ms. Reported as ratios to those
budgets and against a reference run in the same invocation: h5py opening the same trace and
reading the one map and image the first frame shows (the least any viewer must do).
Benchmarks are not tests: nothing here asserts a time.

    python3 bench/view.py [--images 300] [--work /tmp/attnscope-bench-view] [--rounds 3] [--cold]

The trace (ViT-B/16, random weights, every map of every layer and head in float16, 11.2 MB per
image: 300 images are 3.4 GB) is made once with `attnscope experiment` and reused. The window
runs under SDL's dummy video driver, so frames are drawn and uploaded exactly as on screen but
not shown. OPENBLAS_CORETYPE=Haswell slows the recording (the engine), not the viewer.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SCRIPTS = {
    "heads and layers (keys)": ["key Right"] * 11 + ["key Down"] * 11 + ["key Left"] * 11 + ["key Up"] * 11,
    "images (PgDn, new maps)": ["key PageDown"] * 30,
    "hover over patches": [f"move-cell 0 {r} {c}" for r in range(0, 14, 2) for c in range(0, 14, 3)],
    "head grid (12 heads)": ["key g"] + ["key Down"] * 11,
    "depth strip (12 layers)": ["key d"] + ["key Right"] * 11,
    "similarity, ALS panels": ["key s", "key Tab", "key Tab", "key Escape", "key a", "key Escape"] * 3,
    "global normalisation": ["key o"] + ["key Right"] * 11,
    "rollout (12 layers)": ["key r"] + ["key Down"] * 11 + ["key PageDown"] * 3,
}


def run_view(attnscope, trace, lines, work, extra=()):
    path = os.path.join(work, "script.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = dict(os.environ, SDL_VIDEODRIVER="dummy")
    t0 = time.perf_counter()
    p = subprocess.run([attnscope, "view", trace, "--script", path, "--timing", *extra], env=env,
                       capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    first = float(re.search(r"first frame: (\d+) ms", p.stderr).group(1))
    m = re.search(r"redraws: (\d+), median ([\d.]+) ms, 95th percentile ([\d.]+) ms, max ([\d.]+) ms", p.stderr)
    red = tuple(float(x) for x in m.groups()) if m else None
    return first, red, wall


def h5py_first_read(trace):
    """Open the trace and read what the first frame shows: one map and one image."""
    import h5py
    t0 = time.perf_counter()
    with h5py.File(trace, "r") as f:
        layers = list(f.attrs["layers"])
        a = f[f"layers/{layers[-1]:02d}/attn"][0, 0]
        img = f["images/rgb"][0]
        _ = a.sum() + img.sum()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--work", default="/tmp/attnscope-bench-view")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="drop the page cache first (root only)")
    ap.add_argument("--attnscope", default=os.path.join(ROOT, "build", "attnscope"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    exp = {
        "name": "viewbench",
        "description": "ViT-B/16, random weights, synthetic images: a multi-GB trace for bench/view.py",
        "images": {"synthetic": a.images, "size": 224, "seed": 7},
        "record": "attn",
        "models": [{"name": "vitb", "config": {"architecture": "vit_base_patch16_224", "num_classes": 10}, "seed": 1}],
        "analyze": {"metrics": "als,similarity"},
        "figures": [],
    }
    ej = os.path.join(a.work, "vitb.json")
    with open(ej, "w") as f:
        json.dump(exp, f, indent=1)
    out = os.path.join(a.work, "out")
    print(f"making the trace (once; reused later): {a.images} ViT-B images", file=sys.stderr)
    subprocess.run([a.attnscope, "experiment", ej, "--out", out], check=True, stdout=subprocess.DEVNULL)
    trace = os.path.join(out, "vitb.h5")
    size = os.path.getsize(trace)
    print(f"trace: {trace}, {size / 1e9:.2f} GB, {a.images} images x 12 layers x 12 heads of 197 x 197 float16 maps")
    print(f"window: 1280 x 800 points, SDL dummy driver, {os.cpu_count()} cores")
    print()
    firsts, refs = [], []
    for _ in range(a.rounds):
        refs.append(h5py_first_read(trace) * 1e3)
        firsts.append(run_view(a.attnscope, trace, [], a.work)[0])
    walls = [run_view(a.attnscope, trace, [], a.work)[2] * 1e3 for _ in range(a.rounds)]
    f, r, w = statistics.median(firsts), statistics.median(refs), statistics.median(walls)
    print(f"first frame (median of {a.rounds}):")
    print(f"  attnscope view, command start to first frame   {f:7.1f} ms = {f / 500:.2f} of the 0.5 s budget")
    print(f"  attnscope view, whole process (start, frame, exit) {w:5.1f} ms")
    print(f"  h5py open + the same map and image             {r:7.1f} ms (reference: reads only, no window)")
    print(f"  ratio view / h5py                              {f / r:7.2f}")
    if a.cold:
        cf, cw = [], []
        for _ in range(a.rounds):
            subprocess.run(["sync"], check=True)
            with open("/proc/sys/vm/drop_caches", "w") as d:
                d.write("3\n")
            first, _, wall = run_view(a.attnscope, trace, [], a.work)
            cf.append(first)
            cw.append(wall * 1e3)
        print(f"  cold page cache (dropped before each run): first frame {statistics.median(cf):.1f} ms, "
              f"whole process {statistics.median(cw):.1f} ms")
    print()
    print(f"redraws (each frame: the reads it needs, drawing, upload; budget 16 ms):")
    print(f"  {'navigation':28s} {'frames':>6s} {'median':>8s} {'p95':>8s} {'max':>8s}  p95/budget")
    for name, lines in SCRIPTS.items():
        best = None
        for _ in range(a.rounds):
            _, red, _ = run_view(a.attnscope, trace, lines, a.work)
            if red and (best is None or red[2] < best[2]):
                best = red
        n, med, p95, mx = best
        print(f"  {name:28s} {int(n):6d} {med:6.1f}ms {p95:6.1f}ms {mx:6.1f}ms  {p95 / 16:.2f}")
    print("\n(best of the rounds per row; OPENBLAS_CORETYPE does not affect the viewer)")


if __name__ == "__main__":
    main()
