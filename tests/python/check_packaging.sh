#!/bin/bash
# The Python package's ways in, each importing bagua with BAGUA_LIBRARY unset and finding a library of its own
# version: the build tree (build/python), cmake --install (into a folder Debian's python3 searches), and
# pip install --no-build-isolation into a venv, offline. Then BAGUA_LIBRARY, and the error when nothing is found.
set -euo pipefail
BUILD=$(realpath "$1")
SRC=$(realpath "$2")
PY=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset BAGUA_LIBRARY PYTHONPATH LD_LIBRARY_PATH
export PYTHONDONTWRITEBYTECODE=1
fail() { echo "FAIL: $*"; exit 1; }

# imports bagua with the given python and PYTHONPATH; prints the library's real path
library_of() {
  (cd "$tmp" && PYTHONPATH="$2" "$1" -c 'import os, bagua; print(os.path.realpath(bagua.library_path()))')
}

lib=$(library_of "$PY" "$BUILD/python")
[ "$lib" = "$(realpath "$BUILD/lib/libbagua.so.0")" ] || fail "build tree: loaded $lib"
echo "build tree: $lib"

cmake --install "$BUILD" --prefix "$tmp/prefix" >/dev/null
pkg=$(cd "$tmp/prefix" && ls -d lib/python3*/dist-packages/bagua) || fail "cmake --install put no package under lib/python3*/dist-packages"
lib=$(library_of "$PY" "$tmp/prefix/$(dirname "$pkg")")
case "$lib" in "$tmp/prefix/"*) ;; *) fail "cmake --install: loaded $lib, not the installed library" ;; esac
echo "cmake --install: $pkg, $lib"

"$PY" -m venv "$tmp/venv"
cp -r "$SRC/python" "$tmp/source"
BAGUA_BUILD_DIR="$BUILD" "$tmp/venv/bin/pip" install -q --no-index --no-build-isolation "$tmp/source" ||
  fail "pip install --no-build-isolation"
lib=$(library_of "$tmp/venv/bin/python" "")
case "$lib" in "$tmp/venv/"*) ;; *) fail "pip: loaded $lib, not the copy in the venv" ;; esac
echo "pip in a venv: $lib"

# the source tree has no library next to the package: BAGUA_LIBRARY, else a clear error naming the places tried
lib=$(cd "$tmp" && BAGUA_LIBRARY="$BUILD/lib/libbagua.so.0" PYTHONPATH="$SRC/python" "$PY" -c \
  'import os, bagua; print(os.path.realpath(bagua.library_path()))')
[ "$lib" = "$(realpath "$BUILD/lib/libbagua.so.0")" ] || fail "BAGUA_LIBRARY: loaded $lib"
if ! ldconfig -p | grep -q 'libbagua\.so\.0'; then
  err=$(cd "$tmp" && PYTHONPATH="$SRC/python" "$PY" -c 'import bagua' 2>&1) && fail "import without a library worked"
  echo "$err" | grep -q "LibraryNotFoundError: bagua: libbagua.so not found.*BAGUA_LIBRARY.*Tried: $SRC/python/bagua/libbagua.so.0" ||
    fail "unclear error without a library: $err"
  echo "no library: $(echo "$err" | tail -1 | cut -c1-160)..."
fi
