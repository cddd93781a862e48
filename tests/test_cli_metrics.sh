#!/usr/bin/env bash
# test_cli_metrics.sh: the metrics' named choices from the command line (issue 15): listed in
# analyze --help with their defaults, refused with the values when misspelt, stored with the
# results, and the figures' default similarity definitions.
set -u
A=${ATTNSCOPE:-build/attnscope}
FX=${FIXTURES:-tests/fixtures}
T=$(mktemp -d "${TMPDIR:-/tmp}/attnscope-metrics.XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
expect() {
    local want=$1; shift
    "$@" >"$T/out" 2>"$T/err"
    local got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "exit $got (want $want): $* :: $(head -c 400 "$T/err")"; fi
}
has() { if grep -q -- "$2" "$1"; then ok; else bad "$1 lacks '$2': $(head -c 400 "$1")"; fi; }
one_line() { if [ "$(wc -l <"$T/err")" -eq 1 ]; then ok; else bad "error is not one line: $(cat "$T/err")"; fi; }
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

# refuse: a Refiner layer's maps do not sum to 1; the message names the map to analyse instead
expect 1 "$A" analyze "$MC" --out "$T/r.h5" --metrics als --als-rows refuse
has "$T/err" "layer 5"; has "$T/err" "--als-map softmax"; one_line
[ ! -e "$T/r.h5" ] && ok || bad "a refused run leaves no results"

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
 "analyze": {"metrics": "distance,als", "distance": "$1", "als_rule": "per-head"}, "figures": []}
JSON
}
exp centre; expect 0 "$A" experiment "$T/exp.json" --out "$T/exp"
h5dump -A -g /analysis/distance "$T/exp/a.analysis.h5" >"$T/a" 2>&1; has "$T/a" "distance=centre"
h5dump -A -g /analysis/als "$T/exp/a.analysis.h5" >"$T/a" 2>&1; has "$T/a" "rule=per-head"
exp pixels; expect 1 "$A" experiment "$T/exp.json" --out "$T/exp2"
has "$T/err" "exp.json: analyze: distance: --distance pixels: use one of pixel, centre"; one_line

echo "cli_metrics: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
