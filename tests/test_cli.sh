#!/usr/bin/env bash
# test_cli.sh: attnscope as a user runs it: help, info, record on an ImageFolder, errors with
# one-line messages and non-zero exits, a trace that h5dump reads with no help from our code.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli cli

expect 0 "$A" --help;                     has "$T/out" "record"
expect 2 "$A";                            has "$T/err" "usage"
expect 2 "$A" frobnicate;                 has "$T/err" "unknown command"
expect 0 "$A" --version;                  has "$T/out" "attnscope 0"
for c in record info bench demo analyze plot experiment view train; do expect 0 "$A" $c --help; has "$T/out" "usage: attnscope $c"; done
expect 0 "$A" info --list-archs;          has "$T/out" "deit_base_distilled_patch16_224"
expect 0 "$A" info deit_tiny_patch16_224; has "$T/out" "5717416";  has "$T/out" "1.25 GMACs"
expect 0 "$A" info deit_small_patch16_224; has "$T/out" "22.05 M parameters"
expect 0 "$A" info deit_base_patch16_224;  has "$T/out" "86.57 M parameters"
expect 0 "$A" info "$FX/deit_dist";       has "$T/out" "cls,dist"
expect 1 "$A" info vit_huge_patch14_224;  has "$T/err" "unknown architecture"; one_line

# every mechanism on DeiT-Tiny: info's parameter count = the closed form worked by hand from
# the papers' definitions (D = 192, H = 3, T = 197; DeiT-Tiny itself has 5,717,416)
#   lmsa qk_dim 3:  qkv 3*192*193 -> (2*3+192)*193 per block: -72,954 x 12
#   lsla (DS, full inner and outer, QXX): -3*192*193 + 192*193 + 197^2 + 2*3*197^2 = +197,551 x 12
#   less in blocks 1-11: -3*192*193 + 192*193 + 2*197^2 = +3,506 x 11
#   mait soft: + 3 alphas per block; mait zero: no parameters (the paper's point)
#   refiner H' = 6, k = 3: + 6*3 + 6*9 + 3*6 = 90 per block
mech() { printf '{"architecture": "deit_tiny_patch16_224", "attention": %s}' "$1" >"$T/m.json"; }
for c in '{"type": "lmsa", "qk_dim": 3}|4841968' '{"type": "lsla"}|8088028' \
         '[{"blocks": "1-11", "type": "less"}]|5755982' \
         '{"type": "mait", "mask_size": 3, "mask_mode": "soft"}|5717452' \
         '{"type": "mait", "mask_size": 3}|5717416' \
         '{"type": "refiner", "expanded_heads": 6, "kernel_size": 3}|5718496'; do
    mech "${c%|*}"; expect 0 "$A" info "$T/m.json"; has "$T/out" "^total  *${c#*|} "
done
mech '{"type": "lmsa", "qk_dim": 3}'; expect 0 "$A" info "$T/m.json"; has "$T/out" "lmsa qk_dim=3 (1 per head)"
mech '{"type": "mait", "mask_size": 29}'; expect 1 "$A" info "$T/m.json"
has "$T/err" "use at most 27"; has "$T/err" "m.json"; one_line
mech '{"type": "lsla", "inner_bias": "relative"}'; expect 1 "$A" info "$T/m.json"
has "$T/err" "square M x M window"; one_line

# N x N weights cannot follow another input size: refused with the size to use
expect 1 "$A" info "$FX/mech_cls" --img-size 48; has "$T/err" "run at 32"; one_line
expect 0 "$A" info "$FX/mech_dist" --img-size 32

# a model mixing every mechanism: record all, then read layers, internals and params with h5dump
expect 0 "$A" record --model "$FX/mech_cls" --images "$FX/inputs.npy" --out "$T/mech.h5" --record all --dtype f32
expect 0 "$A" info "$T/mech.h5"; has "$T/out" "internals"; has "$T/out" "refiner"
if command -v h5dump >/dev/null; then
    expect 0 h5dump -A "$T/mech.h5"
    for s in 'ATTRIBUTE "mechanism"' '"mait"' '"lmsa"' '"less"' '"refiner"' '"lsla"' \
             'ATTRIBUTE "mask_size"' 'ATTRIBUTE "mask_mode"' '"neg_inf"' 'ATTRIBUTE "qk_dim"' \
             'ATTRIBUTE "scores_from_layer"' 'ATTRIBUTE "expanded_heads"' 'ATTRIBUTE "outer_bias"' \
             'DATASET "attn_softmax"' 'DATASET "attn_expanded"' 'DATASET "attn_convolved"' \
             'GROUP "params"' 'DATASET "ds"' 'DATASET "theta"' 'DATASET "mask"' 'DATASET "dla"'; do
        has "$T/out" "$s"
    done
    expect 0 h5dump -H -d /layers/05/attn_expanded "$T/mech.h5"; has "$T/out" "( 2, 4, 17, 17 )"
    expect 0 h5dump -H -d /layers/01/q "$T/mech.h5"; has "$T/out" "( 2, 3, 17, 1 )"
    expect 1 h5dump -H -d /layers/03/q "$T/mech.h5"
fi

# record an ImageFolder of generated images, then read the trace back with h5dump
mkdir -p "$T/imgs/a" "$T/imgs/b"
cp "$FX/img.png" "$T/imgs/a/1.png"; cp "$FX/img.jpg" "$T/imgs/b/2.jpg"; cp "$FX/img_rgba.png" "$T/imgs/b/3.png"
expect 0 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/run.h5" --record attn,qk,tokens --threads 1
has "$T/out" "recorded 3 images"
expect 0 "$A" info "$T/run.h5"; has "$T/out" "3 complete"; has "$T/out" "attn,q,k,tokens"
if command -v h5dump >/dev/null; then
    expect 0 h5dump -H "$T/run.h5"
    has "$T/out" 'DATASET "attn"'; has "$T/out" 'H5T_IEEE_F16LE\|16-bit little-endian floating-point'
    expect 0 h5dump -a /format "$T/run.h5"; has "$T/out" "attnscope-trace"
    expect 0 h5dump -d /images/label "$T/run.h5"; has "$T/out" "0, 1, 1"
    expect 0 h5dump -a /images/class_names "$T/run.h5"; has "$T/out" '"b"'
else
    bad "h5dump is not installed (apt-get install hdf5-tools)"
fi
# never overwrite without --force; --force works; --resume of a complete trace adds nothing
expect 1 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/run.h5"; has "$T/err" "\-\-force"; one_line
expect 0 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/run.h5" --force --layers 1 --heads 0,2 --query-rows prefix
expect 0 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/run.h5" --resume --layers 1 --heads 0,2 --query-rows prefix
has "$T/out" "recorded 0 images more"
# bad inputs: one line naming the file, the problem and the fix; non-zero exit; no trace left
expect 1 "$A" record --model "$T/nowhere" --images "$T/imgs" --out "$T/x.h5"; has "$T/err" "nowhere"; one_line
expect 1 "$A" record --model "$FX/vit_cls/model.safetensors" --arch deit_tiny_patch16_224 --images "$T/imgs" --out "$T/x.h5"
has "$T/err" "does not match deit_tiny_patch16_224"; has "$T/err" "attnscope info lists every mismatch"; one_line
expect 1 "$A" info "$FX/vit_cls/model.safetensors" --arch deit_tiny_patch16_224
has "$T/out" "wrong shape  blocks.2.mlp.fc2.weight expected \[192,768\], found \[48,96\]"
has "$T/out" "missing      blocks.11.norm1.weight"; one_line
head -c 300 "$FX/img.jpg" > "$T/imgs/b/4.jpg"
expect 1 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/y.h5" --batch 1
has "$T/err" "4.jpg: JPEG is corrupt or truncated"; has "$T/err" "\-\-resume"; one_line
rm "$T/imgs/b/4.jpg"
expect 0 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/y.h5" --resume --batch 1
expect 0 "$A" info "$T/y.h5"; has "$T/out" "3 complete"; has "$T/out" "state       complete"
expect 2 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/z.h5" --layers 7;   has "$T/err" "0..2"
expect 2 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/z.h5" --record maps; has "$T/err" "unknown quantity"
expect 2 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/z.h5" --batch 0
expect 1 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/no/such/dir/z.h5"; has "$T/err" "cannot create"; one_line
[ ! -e "$T/z.h5" ] && ok || bad "a failed record left z.h5"
expect 1 "$A" record --model "$FX/vit_cls" --images "$FX/inputs48.npy" --out "$T/z.h5"; has "$T/err" "img-size 48"
expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/inputs48.npy" --out "$T/z.h5" --img-size 48
expect 1 "$A" info "$FX/img.png"; one_line
expect 1 "$A" info "$FX/inputs.npy.h5"; one_line

# analyze: results beside the trace (an.analysis.h5) and as CSV; what a trace lacks is skipped or refused with the
# record flag to use; bad files give one line
cp "$FX/analysis/vit_gap.h5" "$T/an.h5"
expect 0 "$A" analyze "$T/an.h5" --csv "$T/csv" --threads 1
has "$T/out" "als (4 images)"; has "$T/out" "analysed 4 images"; has "$T/out" "7 metrics"; has "$T/err" "use --diag-map attn"
has "$T/out" "suggested\|no head reaches"
[ "$(head -1 "$T/csv/als.score.csv")" = "layer,head,mean,std,ci95_low,ci95_high,count" ] && ok || bad "als csv header"
[ "$(wc -l <"$T/csv/als.score.csv")" -eq 9 ] && ok || bad "als csv has $(wc -l <"$T/csv/als.score.csv") lines, want 1 + 2 layers x 4 heads"
[ "$(wc -l <"$T/csv/rollout.map.csv")" -eq 33 ] && ok || bad "rollout csv: 1 + 2 layers x 16 patches lines"
head -1 "$T/csv/rollout.map.csv" | grep -q "layer,patch,patch_row,patch_col,mean" && ok || bad "rollout csv header"
h5dump -A -g /analysis/similarity "$T/an.analysis.h5" >"$T/h5a" 2>&1; has "$T/h5a" "deepvit = mean over key columns"
has "$T/h5a" "ATTRIBUTE \"images\""; has "$T/h5a" "ATTRIBUTE \"version\""
h5dump -d /analysis/als/score/mean "$T/an.analysis.h5" >"$T/h5d" 2>&1; has "$T/h5d" "DATASPACE  SIMPLE { ( 2, 4 ) / ( 2, 4 ) }"
h5dump -A -d /layers/01/attn "$T/an.h5" >/dev/null 2>&1 && ok || bad "the recorded maps are still readable"
expect 0 "$A" info "$T/an.h5"; has "$T/out" "analysis    als v3, 4 images"; has "$T/out" "rollout v1, 4 images"
expect 0 "$A" analyze "$T/y.h5" --out "$T/res.h5"          # attn only: qk and evolution skipped
has "$T/err" "skipped"; has "$T/err" "record with --record attn,q,k"; has "$T/err" "record with --record attn,tokens"
has "$T/out" "5 metrics -> $T/res.h5"
expect 0 "$A" info "$T/res.h5"; has "$T/out" "attnscope analyze --out"; has "$T/out" "similarity v1, 3 images"
expect 1 "$A" analyze "$T/y.h5" --metrics qk --out "$T/res.h5"; has "$T/err" "\-\-record attn,q,k"; one_line
expect 1 "$A" analyze "$T/y.h5" --metrics evolution; has "$T/err" "\-\-record attn,tokens"; one_line
expect 1 "$A" analyze "$T/run.h5" --metrics als --out "$T/res2.h5"; has "$T/err" "\-\-query-rows all"; one_line
expect 0 "$A" analyze "$T/run.h5" --out "$T/res2.h5" --quiet   # prefix rows: similarity and entropy run
h5dump -H "$T/res2.h5" >"$T/h5h" 2>&1; has "$T/h5h" "GROUP \"similarity\""; has "$T/h5h" "GROUP \"entropy\""
expect 1 "$A" analyze "$T/y.h5" --out "$T/an.h5"; has "$T/err" "not an attnscope analysis file"; one_line
expect 2 "$A" analyze "$T/y.h5" --metrics bogus; has "$T/err" "unknown metric"
expect 2 "$A" analyze "$T/y.h5" --als-window 4 --metrics als; has "$T/err" "odd"
expect 1 "$A" analyze "$FX/img.png"; has "$T/err" "not an HDF5 file"; one_line
expect 1 "$A" analyze "$T/nosuch.h5"; has "$T/err" "no such file"; one_line

# plot: the list, a figure per format, several inputs, errors naming the fix
expect 0 "$A" plot --list; has "$T/out" "LaViT Fig. 3"; has "$T/out" "rollout"
expect 0 "$A" plot als "$T/an.h5" -o "$T/als.pdf"; has "$T/out" "wrote"
head -c 4 "$T/als.pdf" | grep -q "%PDF" && ok || bad "als.pdf is not a PDF"
expect 0 "$A" plot adjacent "$T/an.h5" "$T/res.h5" --labels gap,cls -o "$T/adj.svg" --double
grep -q "<svg" "$T/adj.svg" && ok || bad "adj.svg is not an SVG"
expect 0 "$A" plot attention "$T/an.h5" -o "$T/att.png" --dpi 72 --layer 1 --head 2 --query 5
head -c 4 "$T/att.png" | od -c | grep -q "P   N   G" && ok || bad "att.png is not a PNG"
expect 1 "$A" plot qk "$T/y.h5" -o "$T/qk.pdf"; has "$T/err" "attnscope analyze"; one_line
[ ! -e "$T/qk.pdf" ] && ok || bad "a failed plot left qk.pdf"
expect 2 "$A" plot nosuch "$T/an.h5" -o "$T/x.pdf"; has "$T/err" "plot --list"
expect 1 "$A" plot als "$T/an.h5" -o "$T/x.bmp"; has "$T/err" ".pdf, .svg or .png"; one_line

# view: the real window under SDL's dummy driver, driven by a script; 'e' exports a PNG and
# prints the attnscope plot command for the same view, which must then draw it
V() { env SDL_VIDEODRIVER=dummy "$A" view "$@"; }
printf 'key Right\nmove-cell 0 1 1\nstatus\nkey e\nkey g\nstatus\nkey s\nstatus\n' >"$T/v.txt"
expect 0 V "$T/an.h5" --script "$T/v.txt" --export-dir "$T" --layer 1 --head 0 --image 1
has "$T/out" "status: image 1/"; has "$T/out" "layer 1 "; has "$T/out" "head 1 "
has "$T/out" "attn at patch (1, 1): 0\.[0-9]"; has "$T/out" "saved $T/an-query-i1-l1-h1-q"
cmd=$(grep "^attnscope plot attention" "$T/out" | head -1)
[ -n "$cmd" ] && ok || bad "no plot command printed: $(cat "$T/out")"
expect 0 eval "\"$A\" ${cmd#attnscope }"; has "$T/out" "wrote $T/an-query-i1-l1-h1-q"
ls "$T"/an-query-i1-l1-h1-q*.png "$T"/an-query-i1-l1-h1-q*.pdf >/dev/null 2>&1 && ok || bad "export files missing"
printf 'key s\nstatus\n' >"$T/v2.txt"
expect 0 V "$T/run.h5" --image 2 --script "$T/v2.txt"; has "$T/out" "3.png  label 1 (b), pred [0-9]"  # ImageFolder class names
expect 0 V "$T/y.h5" --script "$T/v2.txt"; has "$T/out" "status: image 0/"
expect 1 V "$T/y.h5" --mode similarity --script "$T/v2.txt"; has "$T/err" "analyze .* --metrics similarity"; one_line
expect 1 V "$T/nosuch.h5"; has "$T/err" "no such file"; one_line
expect 1 V "$T/res.h5"; has "$T/err" "view the trace"; one_line
expect 1 V "$T/an.h5" --layer 99; has "$T/err" "layer 99"; one_line
expect 2 V "$T/an.h5" --size 10x10; has "$T/err" "320x240"
expect 2 "$A" view; has "$T/err" "usage"
printf 'frobnicate\n' >"$T/v3.txt"
expect 1 V "$T/an.h5" --script "$T/v3.txt"; has "$T/err" "unknown command"; one_line
expect 1 env -u DISPLAY -u WAYLAND_DISPLAY SDL_VIDEODRIVER=x11 "$A" view "$T/an.h5"
has "$T/err" "cannot open a window"; one_line
expect 1 "$A" plot rollout "$T/res.h5" -o "$T/x.pdf"; has "$T/err" "give the trace"; one_line
# plot never overwrites a file without --force, and --force replaces only figures (as record's)
echo "my notes" >"$T/mine.png"
expect 1 "$A" plot als "$T/an.h5" -o "$T/mine.png"; has "$T/err" "mine.png: already exists; pass --force"; one_line
has "$T/mine.png" "my notes"
expect 1 "$A" plot als "$T/an.h5" -o "$T/mine.png" --force; has "$T/err" "is not a figure"; one_line
has "$T/mine.png" "my notes"
expect 0 "$A" plot als "$T/an.h5" -o "$T/als.pdf" --force
expect 1 "$A" plot als "$T/an.h5" -o "$T/als.pdf"; has "$T/err" "pass --force"; one_line
mkdir "$T/adir.png"
expect 1 "$A" plot als "$T/an.h5" -o "$T/adir.png" --force; has "$T/err" "a folder, not a figure"; one_line
expect 0 "$A" plot --help; has "$T/out" "--force"
# the size of a PNG, --dpi's range, and one way to set the width
expect 1 "$A" plot als "$T/an.h5" -o "$T/big.png" --dpi 2400 --width 2000; has "$T/err" "pixels"
lacks "$T/err" "writable"; one_line
expect 2 "$A" plot als "$T/an.h5" -o "$T/d.png" --dpi 0; has "$T/err" "10..2400"; one_line
expect 2 "$A" plot als "$T/an.h5" -o "$T/c.pdf" --column --double; has "$T/err" "give one"; one_line
expect 2 "$A" plot als "$T/an.h5" -o "$T/c.pdf" --column --width 100; has "$T/err" "give one"; one_line
[ ! -e "$T/c.pdf" ] && ok || bad "plot drew with two widths"

# experiment: record -> analyze -> plot with an index; a rerun redoes only what changed
FXA=$(cd "$FX" && pwd)
exp_json() {
cat >"$T/exp.json" <<EOF
{"name": "tiny", "description": "test", "images": {"synthetic": 4, "size": 32, "seed": 3},
 "record": "attn,tokens",
 "models": [{"name": "a", "model": "$FXA/vit_cls"},
            {"name": "b", "config": {"architecture": "custom", "img_size": 32, "patch_size": 8, "embed_dim": 24,
              "depth": 2, "num_heads": 2, "num_classes": 3, "attention": {"type": "mait", "mask_size": 3}}, "seed": 5}],
 "analyze": {"metrics": "similarity,evolution,rollout"},
 "figures": [{"figure": "evolution", "models": ["a", "b"], "formats": ["pdf", "png"]},
             {"figure": "attention", "models": ["b"], "layer": $1, "formats": ["svg"]}]}
EOF
}
exp_json 1
expect 0 "$A" experiment "$T/exp.json" --out "$T/exp"
has "$T/out" "record     a"; has "$T/out" "figure     attention    drawn"
for f in evolution.pdf evolution.png attention.svg index.md a.h5 b.h5; do [ -s "$T/exp/$f" ] && ok || bad "experiment lacks $f"; done
has "$T/exp/index.md" "attnscope plot evolution"; has "$T/exp/index.md" "Numbers (a, .evolution.)"
has "$T/exp/index.md" "(evolution.png)"
# the index's redraw command runs as printed (it replaces the experiment's own figure)
cmd=$(grep "^attnscope plot evolution" "$T/exp/index.md" | head -1)
expect 0 bash -c "cd '$PWD' && ${cmd/attnscope/$A}"
expect 0 "$A" experiment "$T/exp.json" --out "$T/exp"
[ "$(grep -c "up to date" "$T/out")" -eq 6 ] && ok || bad "rerun is not all up to date: $(cat "$T/out")"
exp_json 0
expect 0 "$A" experiment "$T/exp.json" --out "$T/exp"
has "$T/out" "figure     attention    drawn"; has "$T/out" "figure     evolution    up to date"
has "$T/out" "record     b            up to date"
sed -i 's/"evolution", "models"/"nosuch", "models"/' "$T/exp.json"
expect 1 "$A" experiment "$T/exp.json" --out "$T/exp"; has "$T/err" "unknown figure"; one_line
echo '{"name": "x"}' >"$T/bad.json"
expect 1 "$A" experiment "$T/bad.json"; has "$T/err" "models"; one_line
echo '{"name": ' >"$T/bad.json"
expect 1 "$A" experiment "$T/bad.json"; has "$T/err" "not valid JSON"; one_line
# an experiment replaces only what it wrote (stamps in OUT/.state): a user's figure or index.md
# in OUT is refused, before anything runs, and kept
exp_json 1
mkdir -p "$T/own"; echo mine >"$T/own/index.md"; echo mine >"$T/own/evolution.png"
expect 1 "$A" experiment "$T/exp.json" --out "$T/own"; has "$T/err" "own/evolution.png: exists and was not written"
one_line; has "$T/own/evolution.png" "^mine"; [ ! -e "$T/own/a.h5" ] && ok || bad "recorded before refusing"
rm "$T/own/evolution.png"
expect 1 "$A" experiment "$T/exp.json" --out "$T/own"; has "$T/err" "own/index.md: exists and was not written"
one_line; has "$T/own/index.md" "^mine"
rm "$T/own/index.md"
expect 0 "$A" experiment "$T/exp.json" --out "$T/own"
exp_json 0   # its own figures and index are redrawn in place
expect 0 "$A" experiment "$T/exp.json" --out "$T/own"; has "$T/out" "figure     attention    drawn"
# every key and value of the file is checked before anything runs: refused in one line naming
# the file and the key, with nothing recorded
xj() { # TOP IMAGES MODEL FIGURE [TAIL]
local img='{"synthetic": 2, "size": 32, "seed": 3}' fig='{"figure": "entropy", "formats": ["png"]}' seed=', "seed": 5'
cat >"$T/x.json" <<EOF
{"name": "x", "images": ${2:-$img}${1:-},
 "models": [{"name": "b", "config": {"architecture": "custom", "img_size": 32, "patch_size": 8, "embed_dim": 24,
   "depth": 2, "num_heads": 2, "num_classes": 3}${3-$seed}}],
 "analyze": {"metrics": "entropy"},
 "figures": [${4:-$fig}]}${5:-}
EOF
}
xbad() { # PATTERN: the run is refused naming x.json and PATTERN, before anything is recorded
    rm -rf "$T/xo"
    expect 1 "$A" experiment "$T/x.json" --out "$T/xo"; has "$T/err" "x.json: .*$1"; one_line
    [ ! -e "$T/xo/b.h5" ] && ok || bad "recorded before refusing $1"
}
xj; expect 0 "$A" experiment "$T/x.json" --out "$T/xo"
# one list of quantities for every model: internals where a model has them (here none), as
# experiments/lsla.json records its two models
xj ', "record": "attn,internals"'; expect 0 "$A" experiment "$T/x.json" --out "$T/xi"
xj; sed -i 's/"analyze": {"metrics": "entropy"}/"analyze": {"metrics": "entropy", "fusion": "max"}/' "$T/x.json"
xbad 'analyze: "fusion" has no effect: its metric is not in "metrics"'
xj ', "colour": 1'; xbad 'unknown key "colour"'
xj '' '{"synthetic": 2, "sise": 32}'; xbad 'images: unknown key "sise"; did you mean "size"'
xj '' '{"synthetic": "2"}'; xbad '"synthetic": a string'
xj '' '{"synthetic": 1.9}'; xbad '"synthetic": 1.9: give a whole number'
xj '' '{"synthetic": 2, "seed": 1e12}'; xbad '"seed": 1e+12'
xj ', "limit": -1'; xbad '"limit": -1'
xj ', "record": "atn"'; xbad '"record": .*"atn"'
xj ', "analyze2": {}'; xbad 'did you mean "analyze"'
xj ', "train": {"data": "shapes:64", "epochs": 1.5}' '' ', "train": true'; xbad '"epochs": 1.5'
xj '' '' ', "seed": 5, "colour": 1'; xbad 'models\[0\] ("b"): unknown key "colour"'
xj '' '' ', "seed": -1'; xbad '"seed": -1'
xj '' '' ', "seed": 5, "arch": "deit_tiny_patch16_224"'; xbad '"arch" names a checkpoint'
xj '' '' '' '{"figure": "entropy", "colour": "red"}'; xbad 'figures\[0\]: unknown key "colour"'
xj '' '' '' '{"figure": "entropy", "formats": "svg"}'; xbad '"formats" must be a list'
xj '' '' '' '{"figure": "entropy", "formats": ["jpg"]}'; xbad 'format "jpg"'
xj '' '' '' '{"figure": "entropy", "dpi": -5}'; xbad '"dpi": -5: give a number in 10..2400'
xj '' '' '' '{"figure": "entropy", "models": ["zz"]}'; xbad 'unknown model "zz"'
xj '' '' '' '{"figure": "entropy", "cmap": "jet"}'; xbad 'cmap "jet"'
xj '' '' '' '{"figure": "entropy", "layer": 0}'; xbad 'figures\[0\]: the entropy figure does not use layer'
xj '' '' '' '{"figure": "attention", "layer": 5}'; xbad '"layer": 5: model "b" has layers 0..1'
xj '' '' '' '{"figure": "attention", "layer": "1"}'; xbad '"layer": a string'
xj '' '' '' '{"figure": "entropy"}, {"figure": "entropy", "formats": ["svg"]}'; xbad 'both named "entropy"'
xj '' '' ', "seed": 5, "seed": 6'; xbad '"seed" is given twice'
xj '' '' '' '' '{"name": "y"}'; xbad 'text after the JSON object'
xj; sed -i 's/"metrics": "entropy"/"metrics": "entrop"/' "$T/x.json"; xbad 'analyze: "metrics"'
# ---- attnscope train: every data source, checkpoints that record loads, errors ----
M=${MODELS:-$(dirname "$FX")/../experiments/models}
small() { printf '{"architecture": "custom", "img_size": %s, "patch_size": 4, "embed_dim": 16, "depth": 2, "num_heads": 2, "mlp_ratio": 2, "num_classes": %s, "attention": %s}' "$1" "$2" "${3:-{\"type\": \"vanilla\"\}}" >"$T/small.json"; }
small 32 6
expect 0 "$A" train --config "$T/small.json" --data shapes:240 --out "$T/tr" --epochs 2 --batch 16 \
    --record-every 1 --record-images 12
has "$T/out" "epoch   2/2"; has "$T/out" "held-out accuracy"
for f in epoch-001 epoch-002 latest log.csv trace-epoch-000.h5 trace-epoch-001.h5 trace-epoch-002.h5 heldout/circle/00000.png; do
    if [ -e "$T/tr/$f" ]; then ok; else bad "train did not write $f"; fi
done
if [ "$(wc -l <"$T/tr/log.csv")" -eq 3 ]; then ok; else bad "log.csv: $(cat "$T/tr/log.csv")"; fi
has "$T/tr/latest/state.json" '"format":	"attnscope-train-state"'
# the checkpoint is a model folder: info and record load it; the trace's labels are the classes
expect 0 "$A" info "$T/tr/latest";  has "$T/out" "6 classes"
expect 0 "$A" record --model "$T/tr/latest" --images "$T/tr/heldout" --out "$T/tr/again.h5"
expect 0 "$A" info "$T/tr/trace-epoch-002.h5"; has "$T/out" "images      12 complete"
expect 0 "$A" analyze "$T/tr/trace-epoch-002.h5" --metrics als,entropy
# refusing to mix runs; resuming a finished run only re-records the trace its last epoch was due
# (a stop during a trace leaves it incomplete); resuming with other options is refused
expect 1 "$A" train --config "$T/small.json" --data shapes:240 --out "$T/tr" --epochs 2 --batch 16
has "$T/err" "add --resume"; one_line
rm "$T/tr/trace-epoch-002.h5"
expect 0 "$A" train --config "$T/small.json" --data shapes:240 --out "$T/tr" --epochs 2 --batch 16 --resume \
    --record-every 1 --record-images 12
has "$T/out" "held-out accuracy"
expect 0 "$A" info "$T/tr/trace-epoch-002.h5"; has "$T/out" "images      12 complete"
if [ "$(ls -d "$T/tr"/epoch-* | wc -l)" -eq 2 ]; then ok; else bad "resume wrote epochs: $(ls "$T/tr")"; fi
expect 1 "$A" train --config "$T/small.json" --data shapes:240 --out "$T/tr" --epochs 2 --batch 16 --resume --lr 0.01
has "$T/err" "started with --lr"; one_line
expect 1 "$A" train --config "$T/small.json" --data shapes:240 --out "$T/nothing" --resume
has "$T/err" "no checkpoint to resume"; one_line
expect 2 "$A" train --config "$T/small.json" --out "$T/x";   has "$T/err" "required"
expect 1 "$A" train --config "$T/small.json" --data "$T/nope" --out "$T/x"; has "$T/err" "no such file"; one_line
expect 1 "$A" train --config "$T/small.json" --data shapes:abc --out "$T/x"; has "$T/err" "shapes"; one_line
small 32 10
expect 1 "$A" train --config "$T/small.json" --data shapes:240 --out "$T/x"; has "$T/err" '"num_classes": 6'; one_line
# every mechanism trains (one epoch, finite loss, a checkpoint record can run)
for m in vit lmsa lsla lavit mait refiner; do
    expect 0 "$A" train --config "$M/${m}_shapes.json" --data shapes:96 --out "$T/mech-$m" --epochs 1 --batch 32 --quiet
    expect 0 "$A" record --model "$T/mech-$m/latest" --images "$T/tr/heldout" --out "$T/mech-$m.h5"
done
# CIFAR-10 binary files (label byte + 3072 bytes), CIFAR-100 (two label bytes), MNIST IDX
mkdir -p "$T/cifar10" "$T/cifar100" "$T/mnist"
perl -e 'srand(1); for $i (0..119) { print chr($i % 10); print map { chr(int(rand(256))) } 1..3072 }' >"$T/cifar10/data_batch_1.bin"
perl -e 'srand(2); for $i (0..39) { print chr($i % 10); print map { chr(int(rand(256))) } 1..3072 }' >"$T/cifar10/test_batch.bin"
printf 'airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n' >"$T/cifar10/batches.meta.txt"
small 32 10
expect 0 "$A" train --config "$T/small.json" --data "$T/cifar10" --out "$T/c10" --epochs 1 --batch 16
has "$T/out" "cifar10 (120 train, 40 held out: the test set"
expect 0 "$A" train --config "$T/small.json" --data "$T/cifar10/data_batch_1.bin" --out "$T/c10b" --epochs 1 --batch 16 --val-fraction 0.25
has "$T/out" "90 train, 30 held out"
head -c 10000 "$T/cifar10/data_batch_1.bin" >"$T/cut.bin"
expect 1 "$A" train --config "$T/small.json" --data "$T/cut.bin" --out "$T/x"; has "$T/err" "truncated"; one_line
perl -e 'srand(3); for $i (0..99) { print chr(int($i / 10)), chr($i % 100); print map { chr(int(rand(256))) } 1..3072 }' >"$T/cifar100/train.bin"
small 32 100
expect 0 "$A" train --config "$T/small.json" --data "$T/cifar100" --out "$T/c100" --epochs 1 --batch 16 --val-fraction 0.2
has "$T/out" "cifar100 (80 train, 20 held out"
perl -e 'print pack("NNNN", 2051, 60, 28, 28); srand(4); print map { chr(int(rand(256))) } 1..(60*784)' >"$T/mnist/train-images-idx3-ubyte"
perl -e 'print pack("NN", 2049, 60); print map { chr($_ % 10) } 0..59' >"$T/mnist/train-labels-idx1-ubyte"
small 28 10
expect 0 "$A" train --config "$T/small.json" --data "$T/mnist" --out "$T/mn" --epochs 1 --batch 16
has "$T/out" "mnist (54 train, 6 held out"
small 32 10
expect 1 "$A" train --config "$T/small.json" --data "$T/mnist" --out "$T/x"; has "$T/err" '"img_size": 28'; one_line
perl -e 'print pack("NNNN", 2052, 60, 28, 28)' >"$T/mnist/train-images-idx3-ubyte"
small 28 10
expect 1 "$A" train --config "$T/small.json" --data "$T/mnist" --out "$T/x"; has "$T/err" "magic 2051"; one_line
# an ImageFolder tree (the held-out PNGs of the first run: 6 class folders)
small 32 6
expect 0 "$A" train --config "$T/small.json" --data "$T/tr/heldout" --out "$T/if" --epochs 1 --batch 4 --val-fraction 0.25
has "$T/out" "imagefolder (9 train, 3 held out"

t_done
