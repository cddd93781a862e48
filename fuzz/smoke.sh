#!/usr/bin/env bash
# smoke.sh HARNESS SEEDS [RUNS]: a short libFuzzer run from the seed corpus in a scratch corpus:
# RUNS mutations (FUZZ_RUNS overrides; -1: no limit) from the fixed random seed FUZZ_SEED
# (default 1), so every run tries the same inputs, at most FUZZ_SECONDS (default 30). Fails on
# any crash, leak, sanitizer report or timeout; the input is kept in $FUZZ_ARTIFACTS (default
# the scratch folder, printed) to rerun: HARNESS INPUT.
set -u
exe=$1 seeds=$2 runs=${FUZZ_RUNS:-${3:--1}}
work=$(mktemp -d "${TMPDIR:-/tmp}/attnscope-fuzz.XXXXXX")
mkdir -p "$work/corpus"
cp "$seeds"/* "$work/corpus/" 2>/dev/null
[ "$(ls "$work/corpus" | wc -l)" -gt 0 ] || { echo "no seeds in $seeds"; exit 1; }
"$exe" -seed="${FUZZ_SEED:-1}" -runs="$runs" -max_total_time="${FUZZ_SECONDS:-30}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="${FUZZ_ARTIFACTS:-$work/}" "$work/corpus" 2>&1 | tail -25
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ]; then rm -rf "$work"; else echo "kept $work (crash inputs: crash-*, leak-*, timeout-*)"; fi
exit "$rc"
