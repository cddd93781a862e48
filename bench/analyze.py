#!/usr/bin/env python3
"""Analysis speed against recording speed, in alternating rounds of one invocation: recording
a trace with `attnscope record` and analysing it with `attnscope analyze` on the same model,
images and threads. The issue's target: analysing must not take longer than recording did
(ratio analyse/record <= 1). Benchmarks are not tests: nothing here asserts a time.

    python3 bench/analyze.py --images 64 --threads 2 --rounds 3

Uses the demo's synthetic DeiT-Tiny (attnscope demo writes the model and images once). Two
cases: attention maps only (the six map metrics run) and attn,q,k,tokens (all eight). Also
times the numpy reference (tools/analysis_ref.py) on the smaller trace when h5py is present.
OPENBLAS_CORETYPE=Haswell halves OpenBLAS's speed on AVX-512 machines (recording slows, the
analysis hardly uses BLAS): unset it for real figures.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnscope", default=os.path.join(ROOT, "build", "attnscope"))
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    A, th = a.attnscope, str(a.threads)
    if os.environ.get("OPENBLAS_CORETYPE"):
        print("note: OPENBLAS_CORETYPE=%s is set; recording runs slower than this CPU can" %
              os.environ["OPENBLAS_CORETYPE"])
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([A, "demo", "--out", d + "/demo", "--images", str(a.images)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        model, imgs = d + "/demo/model", d + "/demo/images"
        cases = [("attn", "attn", None), ("attn,q,k,tokens", "attn,q,k,tokens", None)]
        times = {c[0]: ([], []) for c in cases}
        for r in range(a.rounds):
            for name, rec, metrics in cases:
                tr = "%s/%s.h5" % (d, name.replace(",", "_"))
                t_rec = timed([A, "record", "--model", model, "--images", imgs, "--out", tr, "--record", rec,
                               "--threads", th, "--force", "-q"])
                t_an = timed([A, "analyze", tr, "--out", tr + ".res.h5", "--threads", th, "--quiet"])
                os.remove(tr + ".res.h5")
                times[name][0].append(t_rec)
                times[name][1].append(t_an)
        print("DeiT-Tiny (synthetic), %d images, %d threads, medians of %d rounds (wall time, "
              "process start included)" % (a.images, a.threads, a.rounds))
        print("%-18s %12s %12s %14s" % ("recorded", "record s", "analyze s", "analyze/record"))
        for name, _, _ in cases:
            tr, ta = statistics.median(times[name][0]), statistics.median(times[name][1])
            print("%-18s %12.2f %12.2f %13.2fx" % (name, tr, ta, ta / tr))
        py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        tr, n = "%s/attn_q_k_tokens.h5" % d, min(8, a.images)
        try:
            t_c = timed([A, "analyze", tr, "--out", tr + ".c.h5", "--threads", th, "--quiet",
                         "--max-images", str(n)])
            t_np = timed([py, "-c", "import sys; sys.path.insert(0, %r); import analysis_ref as r; "
                          "r.analyse(%r, r.DEFAULT, limit=%d)" % (os.path.join(ROOT, "tools"), tr, n)])
            print("naive path: numpy reference (tools/analysis_ref.py) on %d images %.2f s, attnscope "
                  "%.2f s: %.0fx" % (n, t_np, t_c, t_np / t_c))
        except (subprocess.CalledProcessError, FileNotFoundError):
            print("numpy reference skipped (needs python3-h5py, python3-numpy, python3-mpmath)")


if __name__ == "__main__":
    main()
