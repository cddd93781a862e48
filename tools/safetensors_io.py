"""Minimal safetensors writer/reader with numpy (the safetensors package is not in Debian)."""
import json
import struct

import numpy as np

_DT = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("uint16"): "BF16",
       np.dtype("int64"): "I64", np.dtype("uint8"): "U8"}


def to_bf16_bits(a):
    """float32 array -> uint16 bf16 bits, round to nearest even (as torch)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def save(path, tensors, dtype_override=None, metadata=None):
    """tensors: name -> np.ndarray. dtype_override: name of dtype for float arrays
    ('F16' or 'BF16'); BF16 arrays are converted from float32."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = _DT[a.dtype]
        if dtype_override and a.dtype == np.float32:
            if dtype_override == "F16":
                a, dt = a.astype(np.float16), "F16"
            elif dtype_override == "BF16":
                a, dt = to_bf16_bits(a), "BF16"
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[8 + n + b:8 + n + e]
        if t["dtype"] == "F32":
            a = np.frombuffer(raw, np.float32)
        elif t["dtype"] == "F16":
            a = np.frombuffer(raw, np.float16).astype(np.float32)
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "I64":  # BatchNorm's num_batches_tracked
            a = np.frombuffer(raw, np.int64)
        else:
            raise ValueError(t["dtype"])
        out[name] = a.reshape(t["shape"])
    return out
