#!/usr/bin/env bash
# test_cli_robust.sh: a trace survives anything (issue 21). Kills at chosen write calls through
# the LD_PRELOAD shim tests/killshim.c, two runs racing for one --out, --force on things that are
# not traces, full disks (RLIMIT_FSIZE), hostile inputs made here. The exhaustive kill sweep over
# every write call is tools/kill_sweep.sh (minutes; run it by hand after changing the writers).
set -u
. "$(dirname "$0")/lib.sh"
t_init robust robust
SHIM=${KILLSHIM:-}
# under ASan the shim comes first in the preload list; its calls pass on to ASan's and libc's
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}verify_asan_link_order=0"
# shim MATCH KILL_AT CMD...: run CMD under the shim, killed at write call KILL_AT (0: never)
shim() {
    local m=$1 k=$2; shift 2
    ( SHIM_MATCH=$m SHIM_KILL_AT=$k SHIM_COUNT_FILE=$T/count LD_PRELOAD=$SHIM "$@" >"$T/out" 2>"$T/err" ) 2>/dev/null
}
# opens FILE: h5py opens it the documented way (swmr=True) and prints "images complete"
opens() { $PY -c "
import h5py, sys
f = h5py.File(sys.argv[1], 'r', swmr=True)
print(int(f['images/done'][:].sum()), int(f.attrs['complete']))" "$1" 2>&1 | tail -1; }

$PY -c "import numpy as np; x = np.load('$FX/inputs.npy'); np.save('$T/in12.npy', np.concatenate([x] * 6))"

# weights with a NaN or an infinity (a damaged file, a diverged training's checkpoint) are refused
# at load, naming the tensor, instead of giving a trace of NaN marked complete
for bad in nan inf; do
    cp -r "$FX/mech_cls" "$T/w_$bad"
    $PY - "$T/w_$bad/model.safetensors" "$bad" <<'PY'
import sys
import json, struct
p, kind = sys.argv[1], sys.argv[2]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
t = h["blocks.0.attn.qkv.weight"]
assert t["dtype"] == "F32", t
at = 8 + n + t["data_offsets"][0] + 4 * 5
b[at:at + 4] = struct.pack("<f", float(kind))
open(p, "wb").write(b)
PY
    expect 1 "$A" record --model "$T/w_$bad" --images "$FX/img.png" --out "$T/w_$bad.h5"
    has "$T/err" "tensor blocks.0.attn.qkv.weight holds $([ $bad = nan ] && echo NaN || echo an infinity) at index 5"
    one_line; [ ! -e "$T/w_$bad.h5" ] && ok || bad "a trace of $bad weights was written"
done
# a file that is not weights, given as the model, is named for what it is
expect 1 "$A" record --model "$FX/img.png" --images "$FX/img.png" --out "$T/x.h5"
has "$T/err" "img.png: not a model's weights (a PNG image)"; one_line
expect 1 "$A" record --model "$FX/inputs.npy" --images "$FX/img.png" --out "$T/x.h5"; has "$T/err" "(a .npy array)"
# --images: a binary file is not read as a list of paths; a list line's label must be a number
expect 1 "$A" record --model "$FX/mech_cls" --images "$FX/analysis/mech_cls.h5" --out "$T/x.h5"
has "$T/err" "mech_cls.h5: not an image attnscope reads (PNG or JPEG)"; one_line
cp "$FX/img.png" "$T/lst.png"; printf 'lst.png 1\nlst.png abc\n' >"$T/labels.txt"
expect 1 "$A" record --model "$FX/mech_cls" --images "$T/labels.txt" --out "$T/x.h5"
has "$T/err" "labels.txt: line 2: label \"abc\" is not a whole number"; one_line
[ ! -e "$T/x.h5" ] && ok || bad "a refused record wrote $T/x.h5"
# .npy arrays of the wrong layout say how to fix them
$PY -c "import numpy as np; np.save('$T/nhwc.npy', np.zeros((2, 32, 32, 3), np.float32)); np.save('$T/d3.npy', np.zeros((3, 32, 32), np.float32))"
expect 1 "$A" record --model "$FX/mech_cls" --images "$T/nhwc.npy" --out "$T/x.h5"; has "$T/err" "transpose channels-last"; one_line
expect 1 "$A" record --model "$FX/mech_cls" --images "$T/d3.npy" --out "$T/x.h5"; has "$T/err" "a single image: x\[None\]"; one_line
REC=(record --model "$FX/vit_cls" --images "$T/in12.npy" --batch 2 --threads 1)

# ---- item 2: a kill at any write of record leaves a trace that opens with every completed
# image, or no file under the name at all
if [ -n "$SHIM" ]; then
    shim k.h5 0 "$A" "${REC[@]}" --out "$T/k.h5"
    N=$(cat "$T/count")
    [ "$N" -gt 20 ] && ok || bad "the shim counted only $N writes"
    for K in 2 3 5 $((N / 2)) $((N - 3)) $((N - 2)) $((N - 1)) $N; do
        rm -f "$T/k.h5"
        shim k.h5 $K "$A" "${REC[@]}" --out "$T/k.h5"
        if [ -e "$T/k.h5" ]; then
            r=$(opens "$T/k.h5")
            case "$r" in [0-9]*) ok ;; *) bad "killed at write $K of $N: the trace does not open: $r" ;; esac
            [ $K -ge $((N - 3)) ] && { [ "${r%% *}" = 12 ] && ok || bad "killed at write $K of $N: $r, not all 12 images"; }
            expect 0 "$A" info "$T/k.h5"
        fi
        # whatever was left, a rerun (resume) completes it and sweeps the dead run's temporaries
        expect 0 "$A" "${REC[@]}" --out "$T/k.h5" --resume
        [ "$(opens "$T/k.h5")" = "12 1" ] && ok || bad "resume after a kill at $K: $(opens "$T/k.h5")"
        ls "$T" | grep -q 'k.h5.tmp' && bad "a temporary of the killed run was left: $(ls "$T")" || ok
    done
fi

# ---- item 3: two runs never silently replace each other; --force replaces only traces
if [ -n "$SHIM" ]; then
    rm -f "$T/r.h5"
    # the first run stalls half-way through its writes (N, counted above), well after it has
    # claimed the name: a fixed write number fell before the claim once the trace gained writes
    ( SHIM_MATCH=r.h5 SHIM_STALL_AT=$((N / 2)) LD_PRELOAD=$SHIM "$A" "${REC[@]}" --out "$T/r.h5" >"$T/first" 2>&1 ) &
    first=$!
    for _ in $(seq 50); do [ -e "$T/r.h5" ] && break; sleep 0.1; done
    expect 1 "$A" "${REC[@]}" --out "$T/r.h5";          has "$T/err" "already exists"; one_line
    # a folder: --force would not help, so the message does not offer it
    mkdir -p "$T/adir"
    expect 1 "$A" "${REC[@]}" --out "$T/adir";          has "$T/err" "is a folder: give --out a trace file's name"
    lacks "$T/err" "force"; one_line
    expect 1 "$A" "${REC[@]}" --out "$T/r.h5" --force;  has "$T/err" "in use by another attnscope run"; one_line
    expect 1 "$A" "${REC[@]}" --out "$T/r.h5" --resume; has "$T/err" "in use by another attnscope run"; one_line
    wait $first && ok || bad "the first run failed: $(cat "$T/first")"
    [ "$(opens "$T/r.h5")" = "12 1" ] && ok || bad "the first run's trace: $(opens "$T/r.h5")"
fi
echo "my thesis" > "$T/thesis.txt"
expect 1 "$A" "${REC[@]}" --out "$T/thesis.txt" --force; has "$T/err" "not an attnscope trace"; one_line
[ "$(cat "$T/thesis.txt")" = "my thesis" ] && ok || bad "--force replaced a text file"
expect 0 "$A" "${REC[@]}" --out "$T/t.h5"
ln -s t.h5 "$T/link.h5"
expect 1 "$A" "${REC[@]}" --out "$T/link.h5" --force; has "$T/err" "symbolic link"; one_line
[ -L "$T/link.h5" ] && ok || bad "--force replaced a symlink"
mkdir "$T/dir.h5"
expect 1 "$A" "${REC[@]}" --out "$T/dir.h5" --force; has "$T/err" "a folder"; one_line
mkfifo "$T/fifo.h5"
expect 1 "$A" "${REC[@]}" --out "$T/fifo.h5" --force; has "$T/err" "FIFO"; one_line
[ -p "$T/fifo.h5" ] && ok || bad "--force replaced a FIFO"
: > "$T/empty.h5"
expect 0 "$A" "${REC[@]}" --out "$T/empty.h5" --force
expect 0 "$A" "${REC[@]}" --out "$T/t.h5" --force
[ "$(opens "$T/t.h5")" = "12 1" ] && ok || bad "--force over a trace: $(opens "$T/t.h5")"

# ---- item 1: analyze never writes the trace: killed anywhere, the trace is byte for byte what
# record left, earlier results stay whole, and the next run leaves no temporary behind
cp "$FX/analysis/vit_gap.h5" "$T/an.h5"
cp "$T/an.h5" "$T/an.orig"
expect 0 "$A" analyze "$T/an.h5" --metrics entropy --threads 1
if [ -n "$SHIM" ]; then
    shim an. 0 "$A" analyze "$T/an.h5" --metrics als --threads 1
    N=$(cat "$T/count")
    for K in 1 $((N / 3)) $((N / 2)) $((N - 3)) $((N - 1)) $N; do
        shim an. $K "$A" analyze "$T/an.h5" --metrics als,distance --threads 1
        cmp -s "$T/an.h5" "$T/an.orig" && ok || bad "analyze killed at write $K of $N changed the trace"
        expect 0 "$A" info "$T/an.h5"; has "$T/out" "entropy v1, 4 images"
    done
fi
expect 0 "$A" analyze "$T/an.h5" --metrics als --threads 1
ls "$T" | grep -q 'analysis-tmp' && bad "analyze left temporaries: $(ls "$T")" || ok
expect 0 "$A" info "$T/an.h5"; has "$T/out" "results in  .*an.analysis.h5"; has "$T/out" "als v3"; has "$T/out" "entropy v1"
expect 0 "$A" info --json "$T/an.h5"; has "$T/out" '"results_in":.*an.analysis.h5'
expect 0 "$A" plot als "$T/an.h5" -o "$T/als.svg"
cmp -s "$T/an.h5" "$T/an.orig" && ok || bad "analyze changed the trace"
# a trace analysed by an older attnscope holds its results inside: still read, and carried over
cp "$T/an.orig" "$T/old.h5"
$PY -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r') as s, h5py.File(sys.argv[2], 'a') as t:
    t.copy(s['analysis'], 'analysis')" "$T/an.analysis.h5" "$T/old.h5"
expect 0 "$A" info "$T/old.h5"; has "$T/out" "results in  the trace itself"; has "$T/out" "als v3"
expect 0 "$A" info --json "$T/old.h5"; has "$T/out" '"results_in":.*old.h5"'
expect 0 "$A" plot als "$T/old.h5" -o "$T/als-old.svg"
expect 0 "$A" analyze "$T/old.h5" --metrics distance --threads 1
expect 0 "$A" info "$T/old.h5"; has "$T/out" "old.analysis.h5"; has "$T/out" "als v3"; has "$T/out" "distance v3"
# a trace recorded again under the same name does not inherit the old trace's results
expect 0 "$A" "${REC[@]}" --out "$T/t2.h5"
expect 0 "$A" analyze "$T/t2.h5" --metrics entropy --threads 1
sleep 1
expect 0 "$A" "${REC[@]}" --out "$T/t2.h5" --force
expect 0 "$A" info "$T/t2.h5"
grep -q "entropy v1" "$T/out" && bad "a new trace shows the old trace's results" || ok

# ---- item 4: a full disk (here RLIMIT_FSIZE, ulimit -f, in KiB) gives one line and leaves
# nothing that looks complete: figures, a new trace, --force over a trace, a trace mid-run
fulldisk() { local kb=$1; shift; ( ulimit -f "$kb"; "$@" ) >"$T/out" 2>"$T/err"; echo $? >"$T/rc"; }
for ext in pdf svg png; do
    fulldisk 8 "$A" plot als "$T/an.h5" -o "$T/full.$ext"
    [ "$(cat "$T/rc")" = 1 ] && ok || bad "plot .$ext on a full disk: exit $(cat "$T/rc")"
    has "$T/err" "full.$ext"; one_line
    ls "$T" | grep -q "^full\.$ext" && bad "plot .$ext on a full disk left $(ls "$T" | grep full)" || ok
done
fulldisk 4 "$A" "${REC[@]}" --out "$T/full.h5"
[ "$(cat "$T/rc")" = 1 ] && ok || bad "record on a full disk: exit $(cat "$T/rc")"
has "$T/err" "full.h5.*disk full"; one_line
ls "$T" | grep -q "^full\.h5" && bad "record on a full disk left $(ls "$T" | grep full)" || ok
fulldisk 4 "$A" "${REC[@]}" --out "$T/t.h5" --force
has "$T/err" "disk full"; one_line
[ "$(opens "$T/t.h5")" = "12 1" ] && ok || bad "--force on a full disk damaged the old trace"
ls "$T" | grep -q "^t\.h5\.tmp" && bad "--force on a full disk left $(ls "$T" | grep t.h5)" || ok
fulldisk 200 "$A" "${REC[@]}" --out "$T/half.h5"
[ "$(cat "$T/rc")" = 1 ] && ok || bad "record filling the disk: exit $(cat "$T/rc")"
has "$T/err" "File too large"; has "$T/err" "\-\-resume"; one_line
expect 0 "$A" info "$T/half.h5"
fulldisk 50 "$A" train --config "$(dirname "$FX")/../experiments/models/vit_shapes.json" --data shapes:256 --out "$T/trainfull" --epochs 1 --batch 32 --threads 1 --quiet
[ "$(cat "$T/rc")" = 1 ] && ok || bad "train on a full disk: exit $(cat "$T/rc") $(cat "$T/err")"
one_line

# ---- item 5 (part): hostile image inputs
mkdir -p "$T/loop/sub"
cp "$FX/img.png" "$T/loop/1.png"; cp "$FX/img.jpg" "$T/loop/sub/2.jpg"
ln -s . "$T/loop/a"; ln -s . "$T/loop/b"; ln -s .. "$T/loop/sub/up"
timeout 60 "$A" record --model "$FX/vit_cls" --images "$T/loop" --out "$T/loop.h5" -q >"$T/out" 2>"$T/err"
[ $? = 0 ] && ok || bad "symlink loops: $(cat "$T/err")"
expect 0 "$A" info "$T/loop.h5"; has "$T/out" "images      2 complete"
expect 1 timeout 20 "$A" record --model "$FX/vit_cls" --images /dev/zero --out "$T/z.h5"; has "$T/err" "not a regular file"; one_line
mkfifo "$T/list.txt"
expect 1 timeout 20 "$A" record --model "$FX/vit_cls" --images "$T/list.txt" --out "$T/z.h5"; has "$T/err" "not a regular file"; one_line
mkfifo "$T/loop/f.png"
expect 1 timeout 20 "$A" record --model "$FX/vit_cls" --images "$T/loop" --out "$T/z.h5"; has "$T/err" "f.png: not a regular file"; one_line
rm "$T/loop/f.png"
# a 3 kB PNG declaring 20000 x 20000 pixels: refused before any allocation (PIL's limit)
mkdir "$T/bomb"
$PY -c "
import zlib, struct, sys
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
w = h = 20000
raw = zlib.compress(b''.join(b'\\0' + b'\\0' * (w * 3) for _ in range(50)), 9)
open(sys.argv[1], 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', raw) + chunk(b'IEND', b''))" "$T/bomb/b.png"
expect 1 "$A" record --model "$FX/vit_cls" --images "$T/bomb" --out "$T/z.h5"; has "$T/err" "decompression-bomb limit of 178956970"; one_line
# the limit is an option: lowered below the fixture's 45 x 37 = 1665 pixels it refuses it
mkdir "$T/small"; cp "$FX/img.png" "$T/small/"
expect 1 "$A" record --model "$FX/vit_cls" --images "$T/small" --out "$T/z.h5" --max-image-pixels 1000
has "$T/err" "limit of 1000 pixels"; has "$T/err" "\-\-max-image-pixels"; one_line
expect 0 "$A" record --model "$FX/vit_cls" --images "$T/small" --out "$T/z.h5" --max-image-pixels 1665
if [ "$(id -u)" != 0 ]; then   # root reads any folder
    mkdir -p "$T/locked/a"; cp "$FX/img.png" "$T/locked/1.png"; chmod 000 "$T/locked/a"
    expect 1 "$A" record --model "$FX/vit_cls" --images "$T/locked" --out "$T/z.h5"; has "$T/err" "locked/a: cannot"; has "$T/err" "ermission"; one_line
    chmod 755 "$T/locked/a"
fi

# one flipped superblock byte: info, analyze and view fail in one line at once (HDF5's SWMR
# metadata retry loop is bounded), instead of retrying for minutes
for off in 12 20 40; do
    cp "$FX/analysis/vit_gap.h5" "$T/flip.h5"
    $PY -c "
import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[int(sys.argv[2])] ^= 0x10
open(sys.argv[1], 'wb').write(b)" "$T/flip.h5" $off
    for cmd in info analyze view; do
        SDL_VIDEODRIVER=dummy timeout 20 "$A" $cmd "$T/flip.h5" >"$T/out" 2>"$T/err"
        [ $? = 1 ] && ok || bad "$cmd on a trace with superblock byte $off flipped: exit $? (124: hung)"
        has "$T/err" "flip.h5"; one_line
    done
done

# a trace missing images/done is refused in one line and (ASan build) leaks nothing: found by
# fuzz_trace, the reader kept the file and its model config when the last check failed
cp "$FX/analysis/vit_gap.h5" "$T/nodone.h5"
$PY -c "
import h5py, sys
with h5py.File(sys.argv[1], 'a') as f: del f['images/done']" "$T/nodone.h5"
expect 1 "$A" info "$T/nodone.h5"; has "$T/err" "images/done"; one_line

# experiment, model and figure names are single path components: nothing lands outside OUT
mkdir -p "$T/ex/a/b"
AA=$(readlink -f "$A")
exp_json() {
    cat >"$T/ex/a/b/e.json" <<JSON
{"name": "$1", "images": {"synthetic": 2, "size": 32, "seed": 7}, "record": "attn",
 "models": [{"name": "$2", "config": {"architecture": "custom", "img_size": 32, "patch_size": 8,
   "embed_dim": 16, "depth": 2, "num_heads": 2, "num_classes": 3}, "seed": 1}],
 "analyze": {"metrics": "entropy"}, "figures": [{"figure": "entropy", "models": ["$2"], "name": "$3"}]}
JSON
}
for names in "../../escaped m f" "ok ../m2 f" "ok .state f" "ok m ../../fig-escaped" "ok m /tmp/fig-escaped"; do
    exp_json $names
    ( cd "$T/ex/a/b" && "$AA" experiment e.json ) >"$T/out" 2>"$T/err"
    [ $? = 1 ] && ok || bad "experiment names $names were accepted"
    has "$T/err" "plain"; one_line
    [ -z "$(find "$T" /tmp/fig-escaped.pdf -name '*escaped*' 2>/dev/null)" ] && ok || bad "names $names wrote outside the output folder"
done

t_done
