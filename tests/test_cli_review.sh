#!/usr/bin/env bash
# test_cli_review.sh: what a review of issue 14 found after its items were merged. The viewer's
# status names what the grid and depth strip draw (rollout, Tab's map); an export that fails says
# so on the terminal; /skipped opens in xarray; train's model overrides refuse bad values with a
# message; the demo refuses an --out that is a file; a key that does not apply says what to do.
set -u
. "$(dirname "$0")/lib.sh"
t_init test_cli_review review
T_SHOW_HAS=600
view() { SDL_VIDEODRIVER=dummy "$A" view "$@"; }

# ---- viewer: the status names what is drawn ------------------------------------------------------
expect 0 "$A" record --model "$FX/vit_cls" --images "$FX/inputs.npy" --out "$T/v.h5" --record attn,scores --threads 1
# rollout fuses the heads: the head grid draws each head's map (not one rollout map per "head")
printf 'key r\nkey g\nmove-cell 0 0 0\nstatus\n' >"$T/s1"
expect 0 view "$T/v.h5" --script "$T/s1"
has "$T/out" "grid view  |  layer 2 (vanilla)  |  attn head 0"; has "$T/out" "attn at patch (0, 0)"
lacks "$T/out" "rollout at"
# the depth strip with rollout on draws rollout through each layer: the status says so
printf 'key r\nkey d\nstatus\n' >"$T/s2"
expect 0 view "$T/v.h5" --script "$T/s2"
has "$T/out" "depth (rollout) view"; has "$T/out" "rollout (attn, head mean)"
# the depth strip draws attn whatever Tab chose
printf 'key Tab\nkey d\nstatus\n' >"$T/s3"
expect 0 view "$T/v.h5" --script "$T/s3"
has "$T/out" "depth view  |  layer 2 (vanilla)  |  attn head 0"; lacks "$T/out" "scores head"
# an --export-dir that cannot take the export is refused before the window opens (not after the
# script ran, with exit 0)
printf 'key e\n' >"$T/s4"
expect 1 view "$T/v.h5" --script "$T/s4" --export-dir "$T/no/such/dir"
has "$T/err" "attnscope view: --export-dir .*no/such/dir: no such folder"; one_line

# ---- /skipped opens through xarray/h5netcdf: its axis is a named dimension ---------------------
mkdir -p "$T/imgs"; cp "$FX/img.png" "$T/imgs/a.png"; echo "not an image" >"$T/imgs/b.png"
expect 0 "$A" record --model "$FX/vit_cls" --images "$T/imgs" --out "$T/s.h5" --skip-bad --threads 1
if "$PY" -c 'import sys, xarray as xr
ds = xr.open_dataset(sys.argv[1], group="skipped", engine="h5netcdf")
assert ds["path"].dims == ("input",) and ds.sizes["input"] == 1, ds
assert str(ds["path"].values[0]).endswith("b.png") and int(ds["input_index"].values[0]) == 1' "$T/s.h5" >"$T/py" 2>&1
then ok; else bad "python: $(tail -3 "$T/py")"; fi

# ---- train's model overrides: a bad value gets a message ----------------------------------------
expect 2 "$A" train --config "$FX/vit_cls/config.json" --data shapes:64 --out "$T/tr" --num-classes 0
has "$T/err" "--num-classes \"0\": give 1..1048576"; one_line
expect 2 "$A" train --config "$FX/vit_cls/config.json" --data shapes:64 --out "$T/tr" --img-size x
has "$T/err" "--img-size \"x\": give 1..16384"; one_line

# ---- demo --out FILE: refused, the file untouched ------------------------------------------------
echo mine >"$T/file"
expect 1 "$A" demo --out "$T/file" --force
has "$T/err" "file: exists and is not a folder"; one_line
[ "$(cat "$T/file")" = mine ] && ok || bad "demo changed $T/file"

# ---- a key that does not apply to a mechanism: the error says what to do -------------------------
printf '{"architecture": "custom", "img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 2,
 "num_heads": 3, "num_classes": 10, "attention": [{"blocks": [1], "type": "less", "scale": 0.5}]}\n' >"$T/less.json"
expect 1 "$A" info "$T/less.json"
has "$T/err" "less.json.*\"scale\" does not apply to less attention: remove it"; one_line

# a misspelt "type" is named as such (it was reported as a bad or missing type)
printf '{"architecture": "custom", "img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 2,
 "num_heads": 3, "num_classes": 10, "attention": {"typ": "lsla"}}\n' >"$T/typ.json"
expect 1 "$A" info "$T/typ.json"
has "$T/err" "typ.json: attention: unknown key \"typ\": did you mean \"type\"?"; one_line

t_done
