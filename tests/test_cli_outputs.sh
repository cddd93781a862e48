#!/usr/bin/env bash
# test_cli_outputs.sh: bench, view and info lose nothing a user made and ignore no option. bench
# refuses an existing --out without --force (and a --force that would replace a non-trace)
# before it times anything, and its recording options without --record; view never overwrites a
# screenshot or an export and checks its folders before the script runs; info --json prints JSON
# only, and --arch/--img-size are refused where they take no effect.
set -u
. "$(dirname "$0")/lib.sh"
t_init test_cli_outputs outputs
B() { "$A" bench --model "$FX/mech_cls" --seconds 0.1 --rounds 1 --batch 1 --threads 1 "$@"; }

# ---- bench: --out is checked before any work; it is never overwritten without --force ----------
expect 0 B --record --out "$T/base.h5"
[ -s "$T/base.h5" ] && ok || bad "bench --record --out wrote no trace"
cp "$T/base.h5" "$T/base.copy"
expect 1 B --record --out "$T/base.h5"; has "$T/err" "base.h5: already exists; pass --force"; one_line
lacks "$T/out" "forward"  # refused before the timing runs
cmp -s "$T/base.h5" "$T/base.copy" && ok || bad "bench overwrote an existing trace without --force"
expect 0 B --record --out "$T/base.h5" --force --rounds 2  # replaces a trace, round after round
echo "my notes" >"$T/notes.txt"
expect 1 B --record --out "$T/notes.txt" --force; has "$T/err" "notes.txt: exists and is not an attnscope trace"
one_line; lacks "$T/out" "forward"; grep -q "my notes" "$T/notes.txt" && ok || bad "bench replaced a non-trace"
expect 1 B --record --out "$T/nodir/x.h5"; has "$T/err" "nodir/x.h5: the folder .*nodir does not exist"
one_line; lacks "$T/out" "forward"
expect 2 B --record --force; has "$T/err" "^attnscope bench: --force replaces --out's trace"; one_line

# ---- bench: the recording options act only with --record; their values are always checked -----
for o in "--dtype f32" "--compress lz4" "--record-what scores" "--out $T/n.h5" "--force" "--dtype f64"; do
    expect 2 B $o; has "$T/err" "^attnscope bench: ${o%% *} acts only with --record: add --record"; one_line
done
[ ! -e "$T/n.h5" ] && ok || bad "bench wrote --out without --record"
expect 2 B --record --dtype f64; has "$T/err" "^attnscope bench: --dtype \"f64\": use f16 or f32"; one_line
expect 2 B --record --record-what foo; has "$T/err" "^attnscope bench: --record-what \"foo\": unknown quantity"; one_line
expect 2 B --record --compress zip; has "$T/err" "^attnscope bench: --compress \"zip\""; one_line

# ---- bench: the linear layers' line says what is true -----------------------------------------
expect 0 env -u ATTNSCOPE_GEMM "$A" bench --model "$FX/mech_cls" --seconds 0.1 --rounds 1 --batch 1
lacks "$T/out" "ATTNSCOPE_GEMM=openblas: on OpenBLAS"
if grep -q "^linear      layers on OpenBLAS" "$T/out"; then lacks "$T/out" "ATTNSCOPE_GEMM"; fi
expect 0 env ATTNSCOPE_GEMM=openblas "$A" bench --model "$FX/mech_cls" --seconds 0.1 --rounds 1 --batch 1
has "$T/out" "^linear      layers on OpenBLAS (ATTNSCOPE_GEMM=openblas)$"

# ---- view: never overwrites a screenshot or an export; its folders are checked first -----------
V() { SDL_VIDEODRIVER=dummy "$A" view "$@"; }
printf 'status\n' >"$T/s.txt"
echo "mine" >"$T/mine.png"
expect 1 V "$T/base.h5" --script "$T/s.txt" --screenshot "$T/mine.png"
has "$T/err" "^attnscope view: --screenshot .*mine.png: already exists and is never overwritten"; one_line
lacks "$T/out" "status:"; grep -q "^mine$" "$T/mine.png" && ok || bad "view overwrote mine.png"
expect 2 V "$T/base.h5" --script "$T/s.txt" --screenshot "$T/x.jpg"
has "$T/err" "x.jpg: the viewer writes PNG: give a file name ending in .png"; one_line
[ ! -e "$T/x.jpg" ] && ok || bad "view wrote PNG data into x.jpg"
expect 1 V "$T/base.h5" --script "$T/s.txt" --screenshot "$T/nodir/x.png"
has "$T/err" "nodir/x.png: the folder .*nodir does not exist"; one_line; lacks "$T/out" "status:"
expect 1 V "$T/base.h5" --script "$T/s.txt" --export-dir "$T/nodir"
has "$T/err" "^attnscope view: --export-dir .*nodir: no such folder"; one_line; lacks "$T/out" "status:"
expect 1 V "$T/base.h5" --script "$T/s.txt" --export-dir "$T/mine.png"; has "$T/err" "not a folder"; one_line
expect 0 V "$T/base.h5" --script "$T/s.txt" --screenshot "$T/shot.png"; [ -s "$T/shot.png" ] && ok || bad "no screenshot"
# a script's screenshot takes the same rule
printf 'screenshot %s\n' "$T/mine.png" >"$T/s2.txt"
expect 1 V "$T/base.h5" --script "$T/s2.txt"; has "$T/err" "script line 1: screenshot .*mine.png: already exists"
one_line; grep -q "^mine$" "$T/mine.png" && ok || bad "a script's screenshot overwrote mine.png"
# e twice on the same view: the second export takes a new name, the first stays
mkdir "$T/ex"; printf 'key e\nkey e\n' >"$T/e.txt"
expect 0 V "$T/base.h5" --script "$T/e.txt" --export-dir "$T/ex"
[ "$(ls "$T/ex" | grep -c '\.png$')" -eq 2 ] && ok || bad "two exports did not make two files: $(ls "$T/ex")"
first=$(grep -m1 "^saved " "$T/out" | sed 's/^saved //'); second=$(grep "^saved " "$T/out" | sed -n 2p | sed 's/^saved //')
[ -n "$second" ] && [ "$second" = "${first%.png}-2.png" ] && ok || bad "second export: '$second' after '$first'"
grep -q "${second%.png}\.pdf" "$T/out" && ok || bad "the second plot command does not name ${second%.png}.pdf"

# ---- info: --json prints JSON only; options that take no effect are refused -------------------
J() { "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert eval(sys.argv[2]), d' "$@" >"$T/py" 2>&1 \
      && ok || bad "not the JSON wanted ($2): $(head -c 300 "$T/out") $(tail -2 "$T/py")"; }
# a checkpoint that lacks tensors the architecture needs: the mismatches inside the JSON
expect 1 "$A" info "$FX/vit_cls/model.safetensors" --arch deit_tiny_patch16_224 --json
J "$T/out" '"does not match" in d["error"] and any(m.startswith("missing      blocks.11.norm1.weight") for m in d["mismatches"])'
lacks "$T/out" "^missing"; has "$T/err" "^attnscope info: .*does not match deit_tiny_patch16_224"; one_line
expect 0 "$A" info "$FX/vit_cls" --json; J "$T/out" '"cost" in d and "mismatches" not in d'
expect 0 "$A" info --list-archs --json
J "$T/out" 'any(a["name"] == "deit_tiny_patch16_224" and a["params"] > 5e6 for a in d["architectures"])'
expect 2 "$A" info --list-archs --img-size 384; has "$T/err" "^attnscope info: --img-size applies to one model"; one_line
for o in "--arch deit_tiny_patch16_224" "--img-size 384"; do
    expect 2 "$A" info "$T/base.h5" $o; has "$T/err" "base.h5: ${o%% *} applies to a model, not to a trace"; one_line
done
expect 0 "$A" info "$T/base.h5" --json; J "$T/out" '"model" in d'

t_done
