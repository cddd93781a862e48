#!/usr/bin/env bash
# test_cli_train_safety.sh: `attnscope train` loses nothing that it did not make (a fresh run
# refuses a folder that is not empty; a resume prunes and replaces only its own checkpoints, log
# and held-out images), --resume compares the config by content (by any path to the same file),
# and options that would take no effect are refused. Runs are stopped after their first epoch
# through the LD_PRELOAD shim tests/killshim.c (a stall in the trace of the first epoch, SIGINT then).
set -u
. "$(dirname "$0")/lib.sh"
t_init cli-train-safety train-safety
M=$FX/../../experiments/models
SHIM=${KILLSHIM:-}
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}verify_asan_link_order=0"
TINY=(--data shapes:64 --batch 16 --threads 1)
# same FILE TEXT: FILE holds exactly TEXT (a user's file left as it was)
same() { if [ "$(cat "$1" 2>/dev/null)" = "$2" ]; then ok; else bad "$1 changed: $(head -c 200 "$1" 2>&1)"; fi; }
# stopped DIR N CMD...: CMD (a training into DIR with --record-every 1) stopped by SIGINT while its
# trace of epoch N is written (stalled there by the shim): exit 130, the next epoch's first step
# checkpoint DIR/step-NNNNNNN (the same weights as epoch-00N)
stopped() {
    local dir=$1 n=$2; shift 2
    SHIM_MATCH=trace-epoch-00$n SHIM_STALL_AT=40 LD_PRELOAD=$SHIM "$@" >"$T/out" 2>"$T/err" &
    local pid=$! i  # the program itself, so that it gets the signal
    for i in $(seq 300); do compgen -G "$dir/*trace-epoch-00$n*" >/dev/null && break; sleep 0.05; done
    sleep 1 # into the 3 s stall at the trace's 40th write
    kill -INT "$pid"
    wait "$pid"
    local got=$?
    if [ "$got" -eq 130 ]; then ok; else bad "stopped: exit $got (want 130): $(head -c 400 "$T/err")"; fi
}

# ---- a fresh run into someone else's folder: refused, every file as it was
o=$T/o
mkdir -p "$o/step-keep" "$o/epoch-000"
echo x >"$o/step-keep/config.json"; echo x >"$o/step-keep/state.json"
echo y >"$o/epoch-000/config.json"; echo y >"$o/epoch-000/model.safetensors"; echo mine >"$o/log.csv"
expect 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" --epochs 1 --out "$o" --keep 1
has "$T/err" "$o: not empty"; has "$T/err" "new or empty --out"; one_line
same "$o/step-keep/config.json" x; same "$o/step-keep/state.json" x; same "$o/epoch-000/config.json" y
same "$o/epoch-000/model.safetensors" y; same "$o/log.csv" mine
[ ! -e "$o/latest" ] && [ ! -e "$o/epoch-001" ] && ok || bad "the refused run wrote: $(ls -A "$o")"
# a user's heldout/ (what --record-every writes into)
mkdir -p "$T/h/heldout/circle"; echo photo >"$T/h/heldout/circle/00000.png"
expect 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" --epochs 1 --out "$T/h" --record-every 1
has "$T/err" "not empty (it holds heldout)"; one_line; same "$T/h/heldout/circle/00000.png" photo
# an empty folder is fine
mkdir "$T/empty"
expect 0 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" --epochs 1 --out "$T/empty" -q
[ -d "$T/empty/epoch-001" ] && ok || bad "empty folder: $(ls -A "$T/empty")"

if [ -n "$SHIM" ]; then
    REC=(--record-every 1 --record-images 4)
    # ---- a resume touches only what the run made: files added to its folder since stay
    r=$T/r
    stopped "$r" 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 3 --out "$r" --keep 1 -q
    has "$T/err" "interrupted at epoch 2"
    [ -d "$r/epoch-001" ] && [ -d "$r/step-0000004" ] && ok || bad "no epoch-001, step-0000004: $(ls -A "$r")"
    mkdir -p "$r/step-keep" "$r/epoch-000"
    echo x >"$r/step-keep/config.json"; echo x >"$r/step-keep/state.json"
    echo y >"$r/epoch-000/config.json"; echo y >"$r/epoch-000/model.safetensors"
    cp -r "$T/empty/epoch-001" "$r/step-9999999" # another run's checkpoint: not this run's to prune
    expect 0 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 3 --out "$r" --keep 1 -q \
        --resume
    same "$r/step-keep/config.json" x; same "$r/step-keep/state.json" x; same "$r/epoch-000/model.safetensors" y
    [ -f "$r/step-9999999/model.safetensors" ] && ok || bad "another run's checkpoint pruned: $(ls -A "$r")"
    [ "$(cd "$r" && ls -d epoch-0* | tr '\n' ' ')" = "epoch-000 epoch-003 " ] && ok || bad "pruned: $(ls -A "$r")"
    [ ! -e "$r/step-0000004" ] && ok || bad "the run's own step checkpoint stayed: $(ls -A "$r")"
    # a checkpoint name the run is about to write, holding someone else's folder: refused, kept
    n=$T/n
    stopped "$n" 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$n" -q
    mkdir "$n/epoch-002"; echo z >"$n/epoch-002/notes.txt"
    expect 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$n" -q --resume
    has "$T/err" "epoch-002: exists and is not a checkpoint of this run"; one_line; same "$n/epoch-002/notes.txt" z
    # a log.csv that is not the run's is refused, not rewritten
    l=$T/l
    stopped "$l" 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$l" -q
    echo "my notes" >"$l/log.csv"
    expect 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$l" -q --resume
    has "$T/err" "log.csv: not the log attnscope train writes"; one_line; same "$l/log.csv" "my notes"
    # a file of the user's under heldout/ is refused, not overwritten; without it the run goes on
    k=$T/k
    stopped "$k" 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$k" -q
    echo draft >"$k/heldout/circle/notes.txt"
    expect 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$k" -q --resume
    has "$T/err" "notes.txt: not a held-out image"; one_line; same "$k/heldout/circle/notes.txt" draft
    rm "$k/heldout/circle/notes.txt"
    expect 0 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$k" -q --resume
    [ -d "$k/epoch-002" ] && ok || bad "no epoch-002: $(ls -A "$k")"

    # ---- --resume and the config: a changed file is refused, the same file by another path is not
    c=$T/c
    mkdir -p "$T/cfg/sub"; cp "$M/vit_shapes.json" "$T/cfg/model.json"
    stopped "$c" 1 "$A" train --config "$T/cfg/model.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$c" -q
    sed 's/"depth": *[0-9]*/"depth": 2/' "$T/cfg/model.json" >"$T/cfg/changed.json"
    if cmp -s "$T/cfg/model.json" "$T/cfg/changed.json"; then bad "the config has no depth to change"; else ok; fi
    cp "$T/cfg/model.json" "$T/cfg/orig.json"; cp "$T/cfg/changed.json" "$T/cfg/model.json"
    expect 1 "$A" train --config "$T/cfg/model.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$c" -q --resume
    has "$T/err" "model.json: changed since the run in $c started"; one_line
    cp "$T/cfg/orig.json" "$T/cfg/model.json"
    expect 0 "$A" train --config "$T/cfg/sub/../model.json" "${TINY[@]}" "${REC[@]}" --epochs 2 --out "$c" -q --resume
    [ -d "$c/epoch-002" ] && ok || bad "resumed by another path: $(ls -A "$c")"

    # ---- a fresh run killed before its first checkpoint (in its first trace) starts again there
    ( SHIM_MATCH=trace-epoch-000 SHIM_KILL_AT=40 LD_PRELOAD=$SHIM "$A" train --config "$M/vit_shapes.json" \
        "${TINY[@]}" "${REC[@]}" --epochs 1 --out "$T/s0" -q >"$T/out" 2>"$T/err"; true ) 2>/dev/null
    [ ! -e "$T/s0/latest" ] && ok || bad "a checkpoint before epoch 1: $(ls -A "$T/s0")"
    expect 0 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" "${REC[@]}" --epochs 1 --out "$T/s0" -q
fi

# ---- an experiment continues a training stopped in its trained/ folder (SIGINT in epoch 2)
mkdir -p "$T/e/models"; cp "$M/vit_shapes.json" "$T/e/models/"
cat >"$T/e/x.json" <<'JSON'
{"name": "x", "images": {"heldout": 8},
 "train": {"data": "shapes:3000", "epochs": 2, "batch": 16},
 "models": [{"name": "vanilla", "config": "models/vit_shapes.json", "train": true}],
 "analyze": {"metrics": "entropy"}, "figures": [{"figure": "entropy", "models": ["vanilla"], "formats": ["pdf"]}]}
JSON
"$A" experiment "$T/e/x.json" --out "$T/e/out/x" --threads 1 >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 600); do compgen -G "$T/e/out/trained/*/epoch-001" >/dev/null && break; sleep 0.05; done
kill -INT "$pid"; wait "$pid"
[ $? -eq 130 ] && ok || bad "the experiment was not stopped in epoch 2: $(head -c 400 "$T/err")"
expect 0 "$A" experiment "$T/e/x.json" --out "$T/e/out/x" --threads 1
has "$T/out" "train      vanilla      held-out accuracy"
tr=$(ls -d "$T"/e/out/trained/vit_shapes-*)
[ -d "$tr/epoch-002" ] && [ -z "$(ls -d "$tr"/step-* 2>/dev/null)" ] && ok || bad "experiment: $(ls -A "$tr")"

# a built-in architecture name (not a file) resumes
expect 0 "$A" train --config deit_tiny_patch16_224 --num-classes 6 --img-size 32 "${TINY[@]}" --epochs 1 \
    --out "$T/b" -q
expect 0 "$A" train --config deit_tiny_patch16_224 --num-classes 6 --img-size 32 "${TINY[@]}" --epochs 1 \
    --out "$T/b" -q --resume

# ---- options that would take no effect: refused with the fix
NOOUT=(--config "$M/vit_shapes.json" "${TINY[@]}" --out "$T/never")
expect 2 "$A" train "${NOOUT[@]}" --record-images 4; has "$T/err" "\-\-record-images: .*--record-every"; one_line
expect 2 "$A" train "${NOOUT[@]}" --record attn,qk; has "$T/err" "\-\-record: .*--record-every"; one_line
expect 2 "$A" train "${NOOUT[@]}" --dp-weight 0.5; has "$T/err" "\-\-dp-weight: .*no less-attention blocks"; one_line
expect 2 "$A" train "${NOOUT[@]}" --dp-loss hinge; has "$T/err" "drop --dp-loss"; one_line
expect 2 "$A" train "${NOOUT[@]}" --lr 1e-3 --min-lr 0.01; has "$T/err" "\-\-min-lr 0.01 is above --lr 0.001"; one_line
expect 2 "$A" train "${NOOUT[@]}" --epochs 2 --warmup-epochs 2; has "$T/err" "\-\-warmup-epochs 2 is not below"; one_line
[ ! -e "$T/never" ] && ok || bad "a refused run wrote $T/never"
# where they take effect they are taken
expect 0 "$A" train --config "$M/lavit_shapes.json" "${TINY[@]}" --epochs 2 --warmup-epochs 1 --dp-weight 0.2 \
    --out "$T/lavit" -q
# a batch above the training images: all of them, with a note
expect 0 "$A" train --config "$M/vit_shapes.json" --data shapes:64 --threads 1 --batch 100 --epochs 1 --out "$T/big" -q
has "$T/err" "note: batch 100 is more than the 64 training images"
expect 0 "$A" train --help
has_wrapped "$T/out" "needs --record-every"; has_wrapped "$T/out" "refused for models without them"
has_wrapped "$T/out" "at most --lr"; has_wrapped "$T/out" "with a note on stderr"; has_wrapped "$T/out" "new or empty"

# ---- a resumed run keeps the options it was started with, as older versions accepted them
# a state from before --dp-loss existed (no dp_loss: the flipped reading) on a model without
# less-attention blocks resumes without naming LaViT's options, which do nothing there
expect 0 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" --epochs 1 --out "$T/old" -q
"$PY" - "$T/old/latest/state.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
del s["options"]["dp_loss"]
json.dump(s, open(sys.argv[1], "w"))
PY
expect 0 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" --epochs 1 --out "$T/old" -q --resume
# options that are refused now for a new run (--min-lr above --lr) resume a run that has them
expect 0 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" --epochs 1 --out "$T/lr" -q
"$PY" - "$T/lr/latest/state.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["options"]["min_lr"] = 0.25
json.dump(s, open(sys.argv[1], "w"))
PY
expect 0 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" --epochs 1 --min-lr 0.25 --out "$T/lr" -q --resume
# a resume with other options names them as flags
expect 1 "$A" train --config "$M/vit_shapes.json" "${TINY[@]}" --epochs 1 --min-lr 0.5 --out "$T/lr" -q --resume
has "$T/err" "started with --min-lr 0.25, not 0.5"; one_line
t_done
