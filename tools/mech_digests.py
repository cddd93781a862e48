#!/usr/bin/env python3
"""mech_digests.py: SHA-256 digests of every record of attnscope traces, for bit-identity tests.

    ATTNSCOPE_GEMM=openblas attnscope record --model tests/fixtures/M \
        --images tests/fixtures/inputs.npy --out M.h5 --record all --dtype f32
    tools/mech_digests.py M.h5 [...] > tests/fixtures/mech_exact.txt

One line per record: MODEL NAME SHA256 of its raw float32 bytes (C order, little-endian), where
MODEL is the trace's file name without .h5 and NAME is "logits" or "LAYER/QUANTITY". The digests
of tests/fixtures/mech_exact.txt came from the binary before the mechanisms became modules
(main at 1a6c192), whose linear layers ran on OpenBLAS (ATTNSCOPE_GEMM=openblas today);
tests/test_mech_exact.c checks that today's engine gives the same bytes.
"""
import hashlib
import os
import sys

import h5py
import numpy as np

RECORDS = {"attn", "scores", "q", "k", "tokens", "attn_softmax", "attn_expanded", "attn_convolved"}


def digest(a):
    a = np.ascontiguousarray(a, dtype="<f4")
    return hashlib.sha256(a.tobytes()).hexdigest()


def openblas_core():
    """The OpenBLAS kernel set of this CPU (its kernels round differently on other cores)."""
    import ctypes
    for lib in ("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", "libopenblas.so.0"):
        try:
            f = ctypes.CDLL(lib).openblas_get_corename
            f.restype = ctypes.c_char_p
            return f().decode()
        except OSError:
            continue
    return None


def main(paths):
    print("# MODEL RECORD SHA256 (tools/mech_digests.py)")
    core = openblas_core()
    if core:
        print(f"# openblas core: {core}")
    for p in paths:
        model = os.path.basename(p)[:-3] if p.endswith(".h5") else os.path.basename(p)
        with h5py.File(p, "r") as f:
            if f["images/logits"].dtype != np.float32:
                sys.exit(f"{p}: logits are not float32")
            print(model, "logits", digest(f["images/logits"][()]))
            for layer in sorted(f["layers"]):
                for q in sorted(f["layers"][layer]):
                    if q in RECORDS:
                        d = f["layers"][layer][q]
                        if d.dtype != np.float32:
                            sys.exit(f"{p}: {layer}/{q} is {d.dtype}: record with --dtype f32")
                        print(model, f"{int(layer)}/{q}", digest(d[()]))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
