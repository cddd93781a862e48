#!/usr/bin/env bash
# tools/setup.sh: set up attnscope on Debian 12 and run a job.
#   tools/setup.sh demo   install what is missing, build, run `attnscope demo`
#   tools/setup.sh test   install what is missing, build, run the whole test suite
#                         (unit, reference, slow) and the same suite under ASan+UBSan
#   tools/setup.sh build  install and build only
# Debian packages come from apt-get (with sudo when not root). Builds go to build/ and
# build-asan/ in the repository; rerunning is incremental.
set -euo pipefail
job=${1:-demo}
cd "$(dirname "$0")/.."

packages=(meson ninja-build pkg-config gcc libc6-dev
          libhdf5-dev hdf5-tools hdf5-filter-plugin libgsl-dev libcairo2-dev libsdl2-dev
          libopenblas-openmp-dev libdnnl-dev libpng-dev libjpeg62-turbo-dev libcjson-dev fonts-dejavu-core
          xvfb xauth python3 python3-h5py python3-numpy
          python3-xarray python3-h5netcdf  # tests/test_cli_provenance.sh reads traces with xarray
          python3-mpmath   # tests/test_cli_fix2.sh runs tools/analysis_ref.py compare
          clang libclang-rt-dev)           # fuzz/: libFuzzer harnesses (-Dfuzz=true)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

[ -f build/build.ninja ] || meson setup build --buildtype=release >&2
ninja -C build >&2

case "$job" in
build) ;;
demo)
    ./build/attnscope demo
    ;;
test)
    # the plain build runs every suite; the sanitizer build runs them again (ASan+UBSan)
    meson test -C build --print-errorlogs --num-processes 2
    [ -f build-asan/build.ninja ] ||
        meson setup build-asan --buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false >&2
    ninja -C build-asan >&2
    meson test -C build-asan --print-errorlogs --num-processes 2 --suite unit --suite reference
    # the fuzz harnesses (clang + libFuzzer, ASan+UBSan): seeds, then a fixed number of mutations each (seconds)
    [ -f build-fuzz/build.ninja ] ||
        CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
            --buildtype=debugoptimized >&2
    ninja -C build-fuzz >&2
    meson test -C build-fuzz --print-errorlogs --num-processes 2 --suite fuzz
    python3 tools/test_summary.py build/meson-logs/testlog.json build-asan/meson-logs/testlog.json \
        build-fuzz/meson-logs/testlog.json
    ;;
*)
    echo "usage: tools/setup.sh demo|test|build" >&2
    exit 2
    ;;
esac
