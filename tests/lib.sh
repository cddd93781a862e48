# tests/lib.sh: what every shell test of the attnscope program shares, sourced, not run:
#     set -u
#     . "$(dirname "$0")/lib.sh"
#     t_init NAME TAG   # $T: a fresh folder (attnscope-TAG.XXXXXX), removed on exit
#     ...checks...
#     t_done            # "NAME: N passed, N failed" alone on a line (CI reads it); exit 1 on a failure
# Every helper counts one check: ok or bad. A failure message quotes the start of the file it is
# about; how much is a script's choice (T_SHOW_*), set after t_init: it changes no check.
A=${ATTNSCOPE:-build/attnscope}
FX=${FIXTURES:-tests/fixtures}
PY=/usr/bin/python3
T_SHOW_ERR=400   # bytes of stderr that expect quotes
T_SHOW_HAS=400   # bytes of the file that has and has_wrapped quote
T_SHOW_LACKS=400 # bytes of the file that lacks quotes
T_SHOW_PY=5      # last lines of python's output that py quotes

# t_init NAME TAG: the summary line's NAME, the temporary folder $T, the counters
t_init() {
    T_NAME=$1
    T=$(mktemp -d "${TMPDIR:-/tmp}/attnscope-$2.XXXXXX") || exit 1
    trap 'rm -rf "$T"' EXIT
    pass=0 fail=0
}
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
# expect CODE CMD...: exit status CODE; output in $T/out, $T/err
expect() {
    local want=$1; shift
    "$@" >"$T/out" 2>"$T/err"
    local got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "exit $got (want $want): $* :: $(head -c "$T_SHOW_ERR" "$T/err")"; fi
}
# has FILE PATTERN: a line of FILE matches PATTERN (grep)
has() { if grep -q -- "$2" "$1"; then ok; else bad "$1 lacks '$2': $(head -c "$T_SHOW_HAS" "$1")"; fi; }
# has_wrapped FILE PATTERN: PATTERN in FILE, a line wrapped to the terminal (cli_wrap: the next
# line indented) read as one
has_wrapped() {
    if sed -z 's/\n  */ /g' "$1" | grep -q -- "$2"; then ok; else bad "$1 lacks '$2': $(head -c "$T_SHOW_HAS" "$1")"; fi
}
# lacks FILE PATTERN: no line of FILE matches PATTERN
lacks() { if grep -q -- "$2" "$1"; then bad "$1 has '$2': $(head -c "$T_SHOW_LACKS" "$1")"; else ok; fi; }
# one_line: the last command's stderr is one line
one_line() { if [ "$(wc -l <"$T/err")" -eq 1 ]; then ok; else bad "error is not one line: $(cat "$T/err")"; fi; }
# py 'python code' ARGS...: exit 0 means every assert held
py() {
    local code=$1; shift
    if "$PY" -c "$code" "$@" >"$T/py" 2>&1; then ok; else bad "python: $(tail -"$T_SHOW_PY" "$T/py")"; fi
}
# t_done: the summary line and the exit status (non-zero when a check failed)
t_done() {
    echo "$T_NAME: $pass passed, $fail failed"
    [ "$fail" -eq 0 ] || exit 1
    exit 0
}
