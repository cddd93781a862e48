#!/usr/bin/env bash
# test_cli_metrics.sh: the metrics' named choices from the command line (issue 15): listed in
# analyze --help with their defaults, refused with the values when misspelt, stored with the
# results, and the figures' default similarity definitions.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_metrics metrics
MC="$FX/analysis/mech_cls.h5"

# every choice with its values and default in --help (the option's block: its label line and
# the help under it, joined), and accepted under its name
expect 0 "$A" analyze --help
cp "$T/out" "$T/help"
block() {
    awk -v n="$1" 'BEGIN { re = "^      " n " " } $0 ~ re { on = 1; print; next }
        on && substr($0, 1, 30) ~ /^ *$/ { print; next } { on = 0 }' "$T/help" | tr '\n' ' ' | tr -s ' '
}
for o in "--als-prefix|exclude, include|exclude" "--als-rows|normalise, raw, refuse|normalise" \
         "--als-map|attn, softmax|attn" "--als-rule|search, per-head|search" \
         "--distance|pixel, centre|pixel" "--qk-scale|scaled, raw|scaled" \
         "--diag-map|scores, attn|scores" "--cka-batch|4 or more|8"; do
    IFS='|' read -r name values def <<<"$o"
    b=$(block "$name")
    case "$b" in *"Values: $values. Default: $def."*) ok ;; *) bad "analyze --help: $name: $b" ;; esac
done
expect 2 "$A" analyze --als-rwos raw; has "$T/err" "did you mean --als-rows?"; one_line
expect 2 "$A" analyze "$MC" --als-rows sometimes; has "$T/err" "give normalise, raw, refuse"; one_line
expect 2 "$A" analyze "$MC" --cka-batch 3; has "$T/err" "cka-batch"; one_line
# an option of metrics that --metrics leaves out would do nothing: refused, nothing written; with
# its metric named (or every metric, no --metrics) it runs
for o in "--fusion max|rollout" "--als-window 5|als" "--als-rows raw|als" "--cka-batch 4|evolution" \
         "--entropy-normalize|entropy" "--qk-thresholds 0.5|qk" "--distance-prefix renormalise|distance"; do
    IFS='|' read -r opt metric <<<"$o"
    other=similarity
    expect 2 "$A" analyze "$MC" --out "$T/g.h5" --metrics $other $opt
    has "$T/err" "${opt%% *} has no effect: it is an option of $metric, which --metrics leaves out"; one_line
    [ ! -e "$T/g.h5" ] && ok || bad "$opt refused, yet $T/g.h5 written"
done
expect 0 "$A" analyze "$MC" --out "$T/g.h5" --metrics rollout --fusion max -q
expect 2 "$A" analyze "$MC" --metrics als --als-thresholds 0.9,0.1; has "$T/err" "0 <= LOW < HIGH <= 1"; one_line

# refuse: a Refiner layer's maps do not sum to 1; the message names the map to analyse instead
expect 1 "$A" analyze "$MC" --out "$T/r.h5" --metrics als --als-rows refuse
has "$T/err" "layer 5"; has "$T/err" "--als-map softmax"; one_line
[ ! -e "$T/r.h5" ] && ok || bad "a refused run leaves no results"

# notes reach the terminal and say what is true: a 5x5 window on the 4x4 grid does not reach
# every patch from a corner (only a 7x7 one does); every layer whose rows do not sum to 1 is
# named (Refiner's 5 and LSLA's 8); the image-example CKA's left-out images (5 = 4 + 1) are said
expect 0 "$A" analyze "$MC" --out "$T/n.h5" --metrics als,evolution --cka-batch 4 --threads 1
if grep -q "every patch is a neighbour" "$T/err"; then bad "5x5 on 4x4 is not every patch: $(cat "$T/err")"; else ok; fi
has "$T/err" "layers 5, 8:"; has "$T/err" "1 image at the end (fewer than 4) is left out"
expect 0 "$A" analyze "$MC" --out "$T/n7.h5" --metrics als --als-window 7 --threads 1
has "$T/err" "window 7 covers the whole 4x4 grid from every patch"

# a choice that cannot change anything says so: --als-prefix include on a model without prefix tokens
expect 0 "$A" analyze "$FX/analysis/vit_gap.h5" --out "$T/g.h5" --metrics als --als-prefix include --threads 1
has "$T/err" "no prefix tokens, so --als-prefix include changes nothing"

# the MaiT search's suggestion never turns another mechanism into MaiT: mech_gap's blocks are
# LSLA, LSLA, LMSA, Refiner (one mechanism per block), so step 1 masks none of them and says so
expect 0 "$A" record --model "$FX/mech_gap" --images "$FX/inputs.npy" --out "$T/gap.h5" --record attn --dtype f32 --threads 1
expect 0 "$A" analyze "$T/gap.h5" --out "$T/gapr.h5" --metrics als --threads 1
if grep -q '"type": "mait"' "$T/out"; then bad "suggestion replaces a mechanism: $(cat "$T/out")"; else ok; fi
has "$T/out" "layers 0, 1, 2, 3 (lsla, lsla, lmsa, refiner) cannot take a MaiT mask"
expect 0 "$A" analyze "$T/gap.h5" --out "$T/gapr2.h5" --metrics als --als-rule per-head --als-thresholds 0.1,0.2 --threads 1
if grep -q '"type": "mait"' "$T/out"; then bad "per-head suggestion replaces a mechanism: $(cat "$T/out")"; else ok; fi

# defaults and choices are stored with the results
expect 0 "$A" analyze "$MC" --out "$T/d.h5" --threads 1
has "$T/out" "MaiT search, step\|step 3 (calibration)"; has "$T/out" "suggested \"attention\" (MaiT search)"
h5dump -A -g /analysis/als "$T/d.h5" >"$T/a" 2>&1
has "$T/a" "prefix_columns=exclude; rows=normalise; map=attn; rule=search"; has "$T/a" "window=own mask or 3"
h5dump -A -g /analysis/distance "$T/d.h5" >"$T/a" 2>&1; has "$T/a" "distance=pixel"; has "$T/a" "every pixel u of patch i"
h5dump -A -g /analysis/qk "$T/d.h5" >"$T/a" 2>&1; has "$T/a" "q=scaled; q_scale=0.25,1,0.25,0\*2,0.25\*3,1"
h5dump -A -g /analysis/diag "$T/d.h5" >"$T/a" 2>&1; has "$T/a" "map=scores"; has "$T/a" "less-attention"
h5dump -A -g /analysis/rollout "$T/d.h5" >"$T/a" 2>&1; has "$T/a" "one entry fewer"
h5dump -d /analysis/evolution/cka_images_final "$T/d.h5" >"$T/a" 2>&1; has "$T/a" "DATASPACE  SIMPLE { ( 9 ) / ( 9 ) }"
expect 0 "$A" analyze "$MC" --out "$T/c.h5" --metrics als,distance --distance centre --als-rule per-head --threads 1
has "$T/out" "suggested \"attention\" (per-head rule)"
h5dump -A -g /analysis/distance "$T/c.h5" >"$T/a" 2>&1; has "$T/a" "distance=centre"

# figures: the distance figure refuses inputs analysed with different definitions; the
# similarity recipes name their paper's default definition
expect 1 "$A" plot distance "$T/d.h5" "$T/c.h5" -o "$T/dist.png"; has "$T/err" "different --distance"; one_line
expect 0 "$A" plot distance "$T/d.h5" -o "$T/dist.png"
expect 0 "$A" plot --list
# a recipe's block of the list: its first line and the indented ones after it
recipe() { awk -v n="$1" '$1 == n && /^[a-z]/ { on = 1; print; next } /^[a-z]/ { on = 0 } on' "$T/out" >"$T/recipe"; }
recipe similarity; has "$T/recipe" "options: --definition (default row), --cmap"
recipe adjacent; has "$T/recipe" "options: --definition (default map)"

# experiments take the same choices, with '_' for '-'; a bad value names the file and the key
FXA=$(cd "$FX" && pwd)
exp() {
cat >"$T/exp.json" <<JSON
{"name": "m", "description": "choices", "images": {"synthetic": 4, "size": 32, "seed": 3}, "record": "attn",
 "models": [{"name": "a", "model": "$FXA/vit_cls"}],
 "analyze": {"metrics": "distance,als", "distance": "$1", "als_rule": "per-head"${2:+, $2}}, "figures": []}
JSON
}
exp centre; expect 0 "$A" experiment "$T/exp.json" --out "$T/exp"
h5dump -A -g /analysis/distance "$T/exp/a.analysis.h5" >"$T/a" 2>&1; has "$T/a" "distance=centre"
h5dump -A -g /analysis/als "$T/exp/a.analysis.h5" >"$T/a" 2>&1; has "$T/a" "rule=per-head"
exp pixels; expect 1 "$A" experiment "$T/exp.json" --out "$T/exp2"
has "$T/err" 'exp.json: analyze: distance: --distance "pixels": give pixel, centre'; one_line
# and every other option of analyze about the analysis, parsed as analyze parses it; nothing
# else is taken silently (an unknown key, a wrong value, a flag given a string)
exp centre '"als_window": 5, "als_thresholds": [0.3, 0.6], "entropy_normalize": false'
expect 0 "$A" experiment "$T/exp.json" --out "$T/exp3"
h5dump -A -g /analysis/als "$T/exp3/a.analysis.h5" >"$T/a" 2>&1; has "$T/a" "window=5; low=0.3; high=0.6"
exp centre '"fusoin": "max"'; expect 1 "$A" experiment "$T/exp.json" --out "$T/exp4"
has "$T/err" 'exp.json: analyze: unknown key "fusoin"; it takes metrics and als_window,'; has "$T/err" " fusion,"; one_line
exp centre '"fusion": "maximum"'; expect 1 "$A" experiment "$T/exp.json" --out "$T/exp4"
has "$T/err" 'analyze: fusion: --fusion "maximum": give mean, max, min'; one_line
exp centre '"als_window": 4'; expect 1 "$A" experiment "$T/exp.json" --out "$T/exp4"
has "$T/err" 'analyze: als_window: --als-window "4": give odd, 1..99'; one_line
exp centre '"entropy_normalize": "yes"'; expect 1 "$A" experiment "$T/exp.json" --out "$T/exp4"
has "$T/err" 'analyze: entropy_normalize: --entropy-normalize takes no value'; one_line
exp centre '"qk_thresholds": [0.5, "x"]'; expect 1 "$A" experiment "$T/exp.json" --out "$T/exp4"
has "$T/err" 'analyze: qk_thresholds: give a string, a number, a list of numbers'; one_line
exp centre '"out": "x.h5"'; expect 1 "$A" experiment "$T/exp.json" --out "$T/exp4"
has "$T/err" 'unknown key "out"'
# refused before anything is trained, recorded or written
if [ ! -e "$T/exp4" ] || [ -z "$(ls -A "$T/exp4")" ]; then ok; else bad "exp4 written: $(ls -A "$T/exp4")"; fi

t_done
