#!/usr/bin/env bash
# test_cli_conventions.sh: the command line's conventions, for every command: --help lists every
# option the command accepts with its values and default, `help CMD` works, misspellings get one
# line with "did you mean", a missing argument is named, every error line starts with
# "attnscope CMD:", and help and summaries fit 100 columns with tables aligned under their headers.
set -u
. "$(dirname "$0")/lib.sh"
t_init test_cli_conventions conv
T_SHOW_ERR=300 T_SHOW_HAS=300
export COLUMNS=100 # a terminal's width must not matter in a pipe; this is what one would say
# err_line CMD: stderr is one line that starts with "attnscope CMD: "
err_line() {
    if [ "$(wc -l <"$T/err")" -eq 1 ]; then ok; else bad "$1: error is not one line: $(head -c 600 "$T/err")"; fi
    if grep -qv "^attnscope $1: " "$T/err"; then bad "$1: error line without 'attnscope $1: ': $(cat "$T/err")"; else ok; fi
}
# narrow FILE WHAT [SKIP]: no line over 100 columns (lines matching SKIP, e.g. commands naming a path, aside)
narrow() {
    local long
    long=$(awk -v skip="${3:-}" 'length($0) > 100 && !(skip != "" && index($0, skip)) { print length($0) ": " $0 }' "$1")
    if [ -z "$long" ]; then ok; else bad "$2: lines over 100 columns: $long"; fi
}
# aligned FILE HEADER_REGEX N FIRST LAST: the N lines after the header line end their columns
# FIRST..LAST where the header's words end: right-aligned numbers under their headers
aligned() {
    local msg
    msg=$(awk -v re="$2" -v n="$3" -v first="$4" -v last="$5" '
        function ends(s, e,   i, k, c) { k = 0; for (i = 1; i <= length(s); i++) { c = substr(s, i, 1)
            if (c != " " && (i == length(s) || substr(s, i + 1, 1) == " ")) e[++k] = i } return k }
        !found && $0 ~ re { found = 1; hk = ends($0, h); next }
        found && left < n { left++; rk = ends($0, r)
            if (rk < last || hk < last) { print "fewer than " last " columns: " $0; exit }
            for (i = first; i <= last; i++) if (r[i] != h[i]) { print "column " i " ends at " r[i] " under a header ending at " h[i] ": " $0; exit } }
        END { if (!found) print "no header /" re "/" }' "$1")
    if [ -z "$msg" ]; then ok; else bad "$1: table not aligned: $msg"; fi
}

cmds="record info analyze plot view train experiment bench demo"
for c in $cmds; do
    expect 0 "$A" $c --help
    has "$T/out" "^usage: attnscope $c "
    has "$T/out" "^options:"
    narrow "$T/out" "$c --help"
    cp "$T/out" "$T/help"
    expect 0 "$A" help $c
    if cmp -s "$T/out" "$T/help"; then ok; else bad "attnscope help $c differs from attnscope $c --help"; fi

    # every option the command accepts is in --help, with its values and default
    expect 0 "$A" $c --list-options
    cp "$T/out" "$T/list"
    [ "$(wc -l <"$T/list")" -ge 2 ] && ok || bad "$c --list-options lists nothing"
    while read -r name arg; do
        [ "$name" = "--help" ] && continue
        # the option's block: its label line and the indented lines after it
        awk -v n="$name" 'BEGIN { re = "^  (-., |    )" n "( |$)" }
            $0 ~ re { on = 1; print; next }
            on && length($0) > 30 && substr($0, 1, 30) ~ /^ *$/ { print; next } { on = 0 }' \
            "$T/help" >"$T/block"
        if [ -s "$T/block" ]; then ok; else bad "$c --help does not list $name"; continue; fi
        if [ -n "$arg" ]; then
            if grep -qF -- "$name $arg" "$T/block"; then ok; else bad "$c --help: $name without its value $arg"; fi
            if grep -q "Default:\|Required\." "$T/block"; then ok; else bad "$c --help: $name $arg states no default: $(cat "$T/block")"; fi
        fi
    done <"$T/list"
    # and nothing in the command's source table escapes --list-options: each table line's long name
    src=$(dirname "$0")/../cli/cmd_$c.c
    if [ -f "$src" ]; then
        sed -n '/^static const cli_opt [a-z_]*\[\] = {/,/^    {0}};/p' "$src" |
            grep -o "^    {[^,]*, *[^,]*, *\"[a-z0-9-]*\"" | grep -o '"[a-z0-9-]*"$' | tr -d '"' >"$T/names"
        [ -s "$T/names" ] && ok || bad "cli/cmd_$c.c has no option table"
        while read -r n; do grep -q -- "^--$n\( \|$\)" "$T/list" && ok || bad "$c accepts --$n but does not list it"; done <"$T/names"
    fi

    # a misspelt option: one line with "did you mean"
    name=$(grep -v -- "--help" "$T/list" | awk '{ sub(/^--/, "", $1); if (length($1) >= 5) { print $1; exit } }')
    if [ -n "$name" ]; then
        typo=${name:0:1}${name:2:1}${name:1:1}${name:3}
        expect 2 "$A" $c --$typo
        err_line $c; has "$T/err" "did you mean --$name?"
    else
        bad "$c: no option to misspell"
    fi
    # an abbreviated option (getopt_long would take any unique prefix) is refused, not read as
    # the option it abbreviates: every option the command lists, cut by one letter where no other
    # option shares that prefix
    while read -r full; do
        short=${full%?}
        [ ${#short} -ge 3 ] || continue
        [ "$(grep -c -- "^--$short" "$T/list")" -eq 1 ] || continue
        expect 2 "$A" $c --$short x
        err_line $c; has "$T/err" "did you mean --$full?"
    done < <(grep -v -- "--help" "$T/list" | awk '{ sub(/^--/, "", $1); print $1 }')
    expect 2 "$A" $c --zzzzzzzz
    err_line $c; has "$T/err" "unknown option --zzzzzzzz"
    # a misspelt command
    typo=${c:0:1}${c:2:1}${c:1:1}${c:3}
    expect 2 "$A" $typo --help
    has "$T/err" "did you mean $c?"; [ "$(wc -l <"$T/err")" -eq 1 ] && ok || bad "$typo: not one line"
    expect 2 "$A" help $typo
    has "$T/err" "did you mean $c?"
    # an option without its value names the option and what it wants
    name=$(awk '$2 != "" { print $1; exit }' "$T/list")
    if [ -n "$name" ]; then # (bench and demo would run without one)
        expect 2 "$A" $c $name
        err_line $c; has "$T/err" "^attnscope $c: $name needs "
    else
        bad "$c: no option with a value"
    fi
done

# a missing argument is named, in one line, instead of the usage
for spec in "record|--model PATH is required" "info|missing MODEL" "analyze|missing TRACE.h5" \
            "plot|missing FIGURE: one of als" "view|missing TRACE.h5" "train|--config MODEL.json|ARCH is required" \
            "experiment|missing EXPERIMENT.json"; do
    c=${spec%%|*}
    expect 2 "$A" $c
    err_line $c; has "$T/err" "${spec#*|}"
done
expect 2 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy"; err_line record; has "$T/err" "\-\-out FILE is required"
expect 2 "$A" train --config x.json --out "$T/tr"; err_line train; has "$T/err" "\-\-data DATA is required"
expect 2 "$A" plot als "$T/x.h5"; err_line plot; has "$T/err" "\-\-out FIG is required"
expect 2 "$A" analyze "$T/a.h5" "$T/b.h5"; err_line analyze; has "$T/err" "unexpected argument"
expect 2 "$A" record --force=1; err_line record; has "$T/err" "takes no value"
expect 2 "$A" train --rec x; err_line train; has "$T/err" "\-\-rec is ambiguous: did you mean .*--record-every"
expect 2 "$A" record --batch 0 --model a --images b --out c; err_line record; has "$T/err" "\-\-batch \"0\": give 1..256"
expect 2 "$A" demo --epochs 0; err_line demo; has "$T/err" "\-\-epochs \"0\""

# failures past the options start with the command too
expect 1 "$A" info "$T/nosuch.h5"; err_line info
expect 1 "$A" analyze "$T/nosuch.h5"; err_line analyze
expect 1 "$A" plot als "$T/nosuch.h5" -o "$T/x.pdf"; err_line plot
SDL_VIDEODRIVER=dummy expect 1 "$A" view "$T/nosuch.h5"; err_line view
expect 1 "$A" experiment "$T/nosuch.json"; err_line experiment
expect 1 "$A" train --config "$T/nosuch.json" --data shapes --out "$T/tr"; err_line train
expect 1 "$A" record --model "$T/nosuch" --images "$FX/inputs.npy" --out "$T/x.h5"; err_line record
expect 1 "$A" bench --arch nosuch_arch --seconds 0.1; err_line bench
mkdir -p "$T/ro" && touch "$T/ro/file"
expect 1 "$A" demo --out "$T/ro/file/sub" --epochs 1; has "$T/err" "^attnscope demo: "
expect 2 "$A" frobnicate; has "$T/err" "^attnscope: unknown command"

# help and summaries within 100 columns
expect 0 "$A" --help; narrow "$T/out" "attnscope --help"
expect 0 "$A" plot --list; narrow "$T/out" "plot --list"
expect 0 "$A" info --list-archs; narrow "$T/out" "info --list-archs"
aligned "$T/out" "^architecture" 3 2 3
expect 0 "$A" info deit_base_distilled_patch16_224; narrow "$T/out" "info deit_base_distilled_patch16_224"
aligned "$T/out" "^component" 11 2 4
expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/run.h5" --record attn,qk,tokens
narrow "$T/out" "record"
expect 0 "$A" analyze "$T/run.h5"; narrow "$T/out" "analyze" "$T/"
aligned "$T/out" "^  layer  deepvit" 2 1 4
# Q/K fractions under their thresholds (the "|q| >" labels blanked); ALS values under their heads
# (the ? and * marks after the values blanked)
sed 's/|[qk]| >/     /g' "$T/out" >"$T/qk.txt"; aligned "$T/qk.txt" "^  layer   *0.1  *0.5  *1  *2  *0.1" 3 1 9
sed '/^  layer  *h0/,/^  (/ s/[?*]/ /g' "$T/out" >"$T/als.txt"; aligned "$T/als.txt" "^  layer  *h0  *h1  *h2" 3 1 4
expect 0 "$A" info "$T/run.h5"; narrow "$T/out" "info TRACE" "$T/"

# info --json: machine-readable, for a trace (with its analysis), a results file and a model
expect 0 "$A" info "$T/run.h5" --json
cp "$T/out" "$T/info.json"
if command -v python3 >/dev/null; then
    python3 - "$T/info.json" <<'EOF' && ok || bad "info TRACE --json: $(head -c 400 "$T/info.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["images"] == 2 and j["complete"] is True, j
assert j["quantities"] == ["attn", "q", "k", "tokens"], j["quantities"]
assert j["layers"] == [0, 1, 2] and j["heads"] == [0, 1, 2] and j["tokens"] == 17
assert j["model"]["config"]["embed_dim"] == 48 and j["storage"]["dtype"] == "float16"
assert len(j["analysis"]) == 7 and j["analysis"][0].startswith("als v3")
# what the text shows since provenance (format 2): weights' hash, BLAS kernels, skipped inputs
assert j["format_version"] == 2 and j["format"] == "attnscope-trace v2", j["format"]
assert len(j["model"]["sha256"]) == 64 and j["skipped"] == 0, j["model"]
assert j["computed"]["blas_core"] and j["computed"]["threads"] >= 1, j["computed"]
EOF
else
    has "$T/info.json" '"images":	2'
fi
# the options other branches added, in the tables (so in --help, --list-options, did-you-mean)
for co in "demo|--force" "record|--skip-bad" "train|--num-classes C" "train|--img-size S" "plot|--range R" \
          "view|--range R"; do
    expect 0 "$A" "${co%%|*}" --list-options; has "$T/out" "^${co#*|}\$"
done
expect 2 "$A" record --skip-badd; err_line record; has "$T/err" "did you mean --skip-bad?"
expect 0 "$A" analyze "$T/run.h5" --metrics als --out "$T/res.h5" -q
expect 0 "$A" info "$T/res.h5" --json; has "$T/out" '"results":'; has "$T/out" '"als v3'
expect 0 "$A" info deit_tiny_patch16_224 --json; has "$T/out" '"embed_dim":	192'

# the demo's summary: counts match what they list, units match the figures, within 100 columns
# (the lines naming the program's path, commands to copy, aside)
(cd "$T" && "$A" demo --out demo --epochs 1 --train-images 120 --images 4 >"$T/demo.out" 2>"$T/demo.err")
if [ $? -eq 0 ]; then ok; else bad "demo: $(tail -3 "$T/demo.err")"; fi
narrow "$T/demo.out" "demo" "$A"
# "N PDFs: a, b, ... (docs)" or "N PDFs (a, b, ...; docs)": as many names as N
line=$(tr '\n' ' ' <"$T/demo.out" | sed 's/  */ /g' | grep -o "[0-9]* PDFs:\? (\?[^;(]*")
n=${line%% *}
listed=$(echo "$line" | sed 's/^[0-9]* PDFs:\? (\?//' | tr ',' '\n' | grep -c '[A-Za-z]')
files=$(ls "$T/demo/figures" | grep -c '\.pdf$')
if [ -n "$n" ] && [ "$n" = "$listed" ] && [ "$n" = "$files" ]; then ok; else bad "demo: '$line': $listed names, $files files"; fi
has "$T/demo.out" "attention entropy .* nats"
if grep -q "log T *$\|/ log T" "$T/demo.out"; then bad "demo prints entropy per log T: $(grep 'log T' "$T/demo.out")"; else ok; fi

t_done
