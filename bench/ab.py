#!/usr/bin/env python3
"""ab.py: two attnscope binaries (a change and the commit before it) timed in alternating rounds
of `attnscope bench --record --json`, one invocation, so that a machine whose speed drifts by tens
of percent within a minute moves both sides alike. Prints, per binary, the medians and min-max
ranges of the plain forward, the forward recording every map and the recording cost, and the
ratio of the medians (B over A).

    git worktree add /tmp/base HEAD~1 && (cd /tmp/base && meson setup build && ninja -C build attnscope)
    python3 bench/ab.py /tmp/base/build/attnscope build/attnscope --arch deit_tiny_patch16_224 --batch 1

OPENBLAS_CORETYPE reaches both binaries as it is in the environment (the script prints it): on an
AVX-512 machine `OPENBLAS_CORETYPE=Haswell` slows OpenBLAS's products, so compare like with like.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def bench(binary, a):
    cmd = [binary, "bench", "--arch", a.arch, "--batch", str(a.batch), "--threads", str(a.threads),
           "--seconds", str(a.seconds), "--rounds", "1", "--record", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ab.py: {' '.join(cmd)} failed: {r.stderr.strip()}")
    j = json.loads(r.stdout)
    return j["forward"]["img_s"], j["recording"]["img_s"], j["recording"]["overhead_pct"], j["linear_gemm"]


def summary(xs, unit=""):
    return f"{statistics.median(xs):7.2f}{unit} [{min(xs):.2f}-{max(xs):.2f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="the reference binary (before)")
    ap.add_argument("b", help="the binary compared (after)")
    ap.add_argument("--arch", default="deit_tiny_patch16_224", help="as attnscope bench --arch")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seconds", type=float, default=3, help="per variant and round (forward, recording)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds; medians and ranges over them")
    a = ap.parse_args()
    for b in (a.a, a.b):
        if not os.access(b, os.X_OK):
            sys.exit(f"ab.py: {b}: not an executable: build it first (ninja -C DIR attnscope)")
    print(f"{a.arch}, batch {a.batch}, {a.threads} threads, {a.rounds} alternating rounds of {a.seconds} s; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)
    res = {a.a: ([], [], []), a.b: ([], [], [])}
    names = {}
    for r in range(a.rounds):
        order = (a.a, a.b) if r % 2 == 0 else (a.b, a.a)
        for b in order:
            f, rec, ov, names[b] = bench(b, a)
            for lst, v in zip(res[b], (f, rec, ov)):
                lst.append(v)
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(
            f"{'A' if b == a.a else 'B'} {res[b][0][-1]:.2f}/{res[b][1][-1]:.2f}" for b in order), flush=True)
    print(f"\n{'':3}{'forward img/s':>26}{'recording img/s':>26}{'recording cost':>26}")
    for tag, b in (("A", a.a), ("B", a.b)):
        f, rec, ov = res[b]
        print(f"{tag:3}{summary(f):>26}{summary(rec):>26}{summary(ov, '%'):>26}   {b}: {names[b]}")
    fa, fb = statistics.median(res[a.a][0]), statistics.median(res[a.b][0])
    ra, rb = statistics.median(res[a.a][1]), statistics.median(res[a.b][1])
    print(f"\nB / A: forward {fb / fa:.3f}x, recording {rb / ra:.3f}x (ratios of the medians)")


if __name__ == "__main__":
    main()
