#!/usr/bin/env bash
# test_cli_trace3.sh: staged traces (format 3, issue 16) as a user meets them: info shows each
# layer's geometry; every metric runs on them (issue 19); every figure and the viewer either work
# on them or refuse in one line that names it, the trace and that stage-aware support is not
# there yet, leaving no file behind; --windows is refused where it cannot apply; version 2 traces work as before.
# The staged trace comes from $MKTRACE3 (tests/staged.h: closed forms through the real writer).
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_trace3 trace3
MK=${MKTRACE3:-build/tests/mktrace3}

expect 0 "$MK" "$T/s.h5"
# info: per-layer geometry instead of one grid
expect 0 "$A" info "$T/s.h5"
has "$T/out" "format attnscope-trace v3"
has "$T/out" "staged (swin)"
has_wrapped "$T/out" "layer 1: stage 0, 14x14 tokens every 2 px, width 8, heads 1; windows 4x4 of 4x4 tokens (padded grid 16x16), shift 2"
has_wrapped "$T/out" "layer 4: stage 2, 4x4 tokens every 8 px"
has "$T/out" "heads       all of each layer's"
lacks "$T/out" "^tokens"
expect 0 "$A" info --json "$T/s.h5"
py 'import json,sys; j=json.load(open(sys.argv[1])); g=j["layer_geometry"]
assert j["format_version"] == 3 and j["tokens"] is None and j["heads"] == "all", j
assert [x["stage"] for x in g] == [0, 0, 1, 1, 2, 2] and g[1]["shift"] == 2 and g[2]["grid"] == [7, 7], g
assert g[0]["window_grid"] == [4, 4] and g[5]["num_heads"] == 4, g' "$T/out"

# every metric is stage-aware (issue 19; numbers: test_cli_stagemetrics.sh): all run but diag,
# whose default reads less-attention layers, which Swin has none of
expect 0 "$A" analyze "$T/s.h5"
has "$T/err" "skipped: diag: LaViT defines its terms on the pre-softmax scores of less-attention layers"
has "$T/out" "7 metrics -> $T/s.analysis.h5"
expect 0 "$A" analyze "$T/s.h5" --metrics diag --diag-map attn
# the figures of analysis results draw staged traces (stage boundaries against depth); so do the
# map figures attention and grid (each layer's row by its own geometry: tests/test_keymap.c);
# lsla refuses a staged trace without an LSLA layer in one line, writing nothing (it draws LSLA
# window layers: tests/test_cli_stem.sh)
figs=$("$A" plot --list | awk 'NR > 1 && /^[a-z]/ {print $1}')
[ "$(echo "$figs" | wc -w)" -ge 12 ] && ok || bad "plot --list gave: $figs"
for f in $figs; do
    case $f in
    lsla)
        expect 1 "$A" plot $f "$T/s.h5" -o "$T/f.pdf"
        has "$T/err" "no recorded layer uses LSLA: the lsla figure needs an LSLA layer (--layer)"
        one_line
        [ ! -e "$T/f.pdf" ] && ok || bad "refused figure $f left f.pdf" ;;
    evolution) ;; # needs the image-example CKA of 4 images or more (tests/test_cli_stagemetrics.sh)
    *)
        expect 0 "$A" plot $f "$T/s.h5" -o "$T/f_$f.pdf"
        [ -s "$T/f_$f.pdf" ] && ok || bad "plot $f on a staged trace wrote nothing" ;;
    esac
done
# the map figures' query is a cell of the first layer's 14 x 14 grid; a layer's own heads
expect 0 "$A" plot attention "$T/s.h5" --layer 3 --head 1 --query 0 -o "$T/att.png" --dpi 40
[ -s "$T/att.png" ] && ok || bad "plot attention on a staged trace wrote nothing"
expect 1 "$A" plot attention "$T/s.h5" --query 196 -o "$T/no.png"
has "$T/err" "--query 196: a staged trace's query is a cell of its first recorded layer's 14 x 14 grid, 0..195"
one_line
expect 1 "$A" plot attention "$T/s.h5" --layer 0 --head 1 -o "$T/no.png"
has "$T/err" "layer 0 has no recorded head 1 (it has 1: 0..0)"
one_line
[ ! -e "$T/no.png" ] && ok || bad "a refused figure left no.png"
# the viewer opens it (window maps per window, tests/test_view_staged.c); rollout refuses in one
# line
printf 'key Down\nkey .\nstatus\nkey r\nstatus\n' >"$T/s.txt"
expect 0 env SDL_VIDEODRIVER=dummy "$A" view "$T/s.h5" --layer 0 --script "$T/s.txt" --screenshot "$T/s.png"
has "$T/out" "layer 1 (stage 0, block 1, window 6 (of 16), grid 14 x 14, M 4, shift 2; vanilla)  |  attn head 0  |  query token (7, 11) (fixed)"
[ -s "$T/s.png" ] && ok || bad "view wrote no screenshot of the staged trace"
# the similarity and ALS panels of the analysed trace (tests/test_view_staged.c: their cells)
printf 'title\nkey a\ntitle\n' >"$T/r.txt"
expect 0 env SDL_VIDEODRIVER=dummy "$A" view "$T/s.h5" --mode similarity --script "$T/r.txt" --screenshot "$T/r.png"
has "$T/out" "similarity view"
has "$T/out" "als view"

# --windows: refused with the fix where no recorded layer is windowed
expect 2 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/w.h5" --windows 0
has "$T/err" "--windows 0: no recorded layer uses window attention (this model's attention is global): leave --windows out"
one_line
[ ! -e "$T/w.h5" ] && ok || bad "a refused record left w.h5"
expect 0 "$A" record --help; has_wrapped "$T/out" "--windows LIST"

# version 2 traces: written and read as before
expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/v.h5" --windows all --threads 1 --quiet
py 'import h5py,sys; f=h5py.File(sys.argv[1]); a=f.attrs
assert a["format_version"] == 2 and list(a["grid"]) and "num_tokens" in a, dict(a)
assert "scope" not in f["layers/00"].attrs and f["layers/00/attn"].ndim == 4' "$T/v.h5"
expect 0 "$A" analyze "$T/v.h5" --metrics entropy,distance --quiet
expect 0 "$A" plot attention "$T/v.h5" -o "$T/v.png" --dpi 40
expect 0 "$A" info "$T/v.h5"; has "$T/out" "^tokens"
printf 'key q\n' >"$T/v.txt"
expect 0 env SDL_VIDEODRIVER=dummy "$A" view "$T/v.h5" --script "$T/v.txt"
t_done
