#!/usr/bin/env bash
# bench/compare.py's plumbing, not its figures: what it refuses, the rows and ratios it prints,
# OPENBLAS_CORETYPE reaching attnscope and PyTorch, a clear line when attnscope refuses Swin, and
# (with $ORT_DIR holding onnxruntime-node) Swin-T's ONNX export checked against PyTorch's logits.
# Timings are tiny and never checked. Needs python3-torch and python3-torchvision, else skipped.
set -u
. "$(dirname "$0")/lib.sh"
t_init bench_compare bench
CMP="$(dirname "$0")/../bench/compare.py"
SWIN=swin_tiny_patch4_window7_224
quick=(--batch 1 --threads 1 --rounds 2 --seconds 0.05 --attnscope "$A")
ort=${ORT_DIR:-}
unset ORT_DIR OPENBLAS_CORETYPE   # compare.py's --ort-dir defaults to $ORT_DIR

# refusals come before anything runs, in one line naming the fix
expect 1 "$PY" "$CMP" --ort-dir "$T/nothing" --attnscope "$A"
one_line; has "$T/err" "npm install --ignore-scripts onnxruntime-node"
expect 1 "$PY" "$CMP" --opset 14 --attnscope "$A"
one_line; has "$T/err" "give --ort-dir"
expect 1 "$PY" "$CMP" --process-images -1 --attnscope "$A"
one_line; has "$T/err" "--process-images >= 0"
expect 1 "$PY" "$CMP" --attnscope "$T/none"
one_line; has "$T/err" "no attnscope binary at $T/none"
expect 1 "$PY" "$CMP" --arch swin_base_patch4_window12_384 --attnscope "$A"
one_line; has "$T/err" "no torchvision counterpart"

if ! "$PY" -c "import torch, torchvision" 2>/dev/null; then
    echo "note: python3-torch or python3-torchvision not installed; skipping the runs" >&2
    t_done
fi

# ViT: every row with a range over the 2 rounds and its ratio to PyTorch; the environment's
# OPENBLAS_CORETYPE reaches both OpenBLAS users and draws the offer to unset it
if grep -q avx2 /proc/cpuinfo; then core=Haswell; else core=""; fi
expect 0 env ${core:+OPENBLAS_CORETYPE=$core} "$PY" "$CMP" --arch deit_tiny_patch16_224 "${quick[@]}" --process-images 3
has "$T/out" "^attnscope forward  *[0-9.]*  *[0-9.]*-[0-9.]*  *[0-9.]*  *[0-9.]*x$"
# the whole `attnscope record` process on the PyTorch model's own weights (timm names)
has "$T/out" "^attnscope record, process, 3 img  *[0-9.]*  *[0-9.]*-[0-9.]*  *[0-9.]*  *[0-9.]*x$"
has "$T/out" "^whole process: .attnscope record. of 3 images .* at [0-9.]* img/s; [0-9.]*x PyTorch"
has "$T/out" "^attnscope recording every map  *[0-9.]*  *[0-9.]*-[0-9.]*  *[0-9.]*  *[0-9.]*x$"
has "$T/out" "^PyTorch [0-9]"
has "$T/out" "ONNX Runtime: not run (give --ort-dir"
has "$T/out" "^recording every map costs -*[0-9.]*% over attnscope's plain forward"
if [ -n "$core" ]; then
    has "$T/out" "^note: OPENBLAS_CORETYPE=Haswell comes from the environment.*--openblas-coretype unset"
    has "$T/out" "^OpenBLAS kernels: attnscope Haswell, PyTorch Haswell"
fi

# Swin: attnscope's side runs or says in one line that it cannot yet; PyTorch's runs either way;
# --openblas-coretype unset overrides the environment for both
expect 0 env ${core:+OPENBLAS_CORETYPE=$core} "$PY" "$CMP" --arch $SWIN "${quick[@]}" --openblas-coretype unset
has "$T/out" "OPENBLAS_CORETYPE unset for attnscope and PyTorch"
lacks "$T/out" "Haswell"
has "$T/out" "^whole process: not measured for $SWIN (torchvision's names are not timm's)"
has "$T/out" "^PyTorch [0-9][^ ]*  *[0-9.]*  *[0-9.]*-[0-9.]*"
if "$A" info $SWIN >/dev/null 2>&1; then
    has "$T/out" "^attnscope recording every map  *[0-9.]*  *[0-9.]*-[0-9.]*  *[0-9.]*  *[0-9.]*x$"
else
    has "$T/out" "^attnscope cannot run $SWIN yet (attnscope exited 1: attnscope bench: "
    lacks "$T/out" "Traceback"
fi

# ONNX Runtime where installed: the export's logits checked, the row and both ratios printed
if [ -n "$ort" ] && [ -d "$ort/node_modules/onnxruntime-node" ] && command -v node >/dev/null; then
    expect 0 "$PY" "$CMP" --arch $SWIN "${quick[@]}" --ort-dir "$ort"
    has "$T/out" "^ONNX export (opset 17) checked: ONNX Runtime's logits within [0-9.]*e-0[5-9] of PyTorch's"
    has "$T/out" "^ONNX Runtime [0-9.]*  *[0-9.]*  *[0-9.]*-[0-9.]*  *[0-9.]*  *[0-9.]*x$"
    lacks "$T/out" "WARNING"
else
    echo "note: ORT_DIR (a folder with node_modules/onnxruntime-node) not given; ONNX Runtime not checked" >&2
fi
t_done
