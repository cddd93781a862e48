#!/usr/bin/env bash
# test_cli_maps.sh: figure options as a user gives them: every option takes effect or is refused
# with its name; --range; the viewer's export command carries the colour map and range it shows
# and draws as given.
set -u
. "$(dirname "$0")/lib.sh"
t_init cli_maps maps

cp "$FX/analysis/mech_cls.h5" "$T/m.h5"
expect 0 "$A" analyze "$T/m.h5" --quiet
P() { "$A" plot "$@"; }
# options a figure does not use: refused by name, nothing written
expect 1 P als "$T/m.h5" --query 3 -o "$T/a.pdf"; has "$T/err" "does not use --query"; one_line
[ ! -e "$T/a.pdf" ] && ok || bad "a refused figure left a.pdf"
expect 1 P similarity "$T/m.h5" --image 1 -o "$T/a.pdf"; has "$T/err" "does not use --image"
expect 1 P rollout "$T/m.h5" --head 1 -o "$T/a.pdf"; has "$T/err" "does not use --head"
expect 1 P attention "$T/m.h5" --definition row -o "$T/a.pdf"; has "$T/err" "does not use --definition"
expect 1 P entropy "$T/m.h5" --cmap magma -o "$T/a.pdf"; has "$T/err" "does not use --cmap"
expect 1 P als "$T/m.h5" --range minmax -o "$T/a.pdf"; has "$T/err" "does not use --range"
expect 1 P als "$T/m.h5" --labels x -o "$T/a.pdf"; has "$T/err" "does not use --labels"
expect 1 P als "$T/m.h5" --dpi 100 -o "$T/a.pdf"; has "$T/err" "PNG output only"; one_line
expect 1 P attention "$T/m.h5" --cmap diverging -o "$T/a.pdf"; has "$T/err" "viridis or magma"
expect 2 P adjacent "$T/m.h5" "$T/m.h5" --labels a -o "$T/a.pdf"; has "$T/err" "1 label for 2 inputs"
expect 2 P attention "$T/m.h5" --range log -o "$T/a.pdf"; has "$T/err" "give zero, minmax"
# and the ones it uses take effect
for r in zero minmax; do expect 0 P attention "$T/m.h5" --layer 2 --range $r --cmap magma -o "$T/att-$r.png" --dpi 72; done
cmp -s "$T/att-zero.png" "$T/att-minmax.png" && bad "--range changes nothing" || ok
expect 0 P entropy "$T/m.h5" --labels mine -o "$T/e.pdf"
expect 0 P grid "$T/m.h5" --cmap magma -o "$T/g1.png" --dpi 72
expect 0 P grid "$T/m.h5" --cmap viridis -o "$T/g2.png" --dpi 72
cmp -s "$T/g1.png" "$T/g2.png" && bad "grid: --cmap changes nothing" || ok

# the viewer: its export command has the colour map and range it shows, and draws
printf 'key m\nkey z\nkey e\n' >"$T/v.txt"
expect 0 env SDL_VIDEODRIVER=dummy "$A" view "$T/m.h5" --script "$T/v.txt" --export-dir "$T" --layer 1
cmd=$(grep "^attnscope plot attention" "$T/out" | head -1)
case "$cmd" in *"--cmap magma --range minmax"*) ok ;; *) bad "export command: $cmd" ;; esac
expect 0 eval "\"$A\" ${cmd#attnscope }"
expect 2 env SDL_VIDEODRIVER=dummy "$A" view "$T/m.h5" --range full; has "$T/err" "give zero, minmax"

t_done
