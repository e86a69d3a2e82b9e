#!/bin/bash
# cmake --install into a temporary prefix, then build and run a consumer that uses find_package(bagua), and the
# same consumer built with pkg-config (bagua.pc); also checks that libbagua.so exports nothing but bagua_* symbols
# and that the installed header's version (generated from project(VERSION)) is the library's.
set -euo pipefail
BUILD=$1
SRC=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$BUILD" --prefix "$tmp/prefix" >/dev/null
lib=$(ls "$tmp"/prefix/lib*/libbagua.so.0 2>/dev/null || ls "$tmp"/prefix/lib/*/libbagua.so.0)
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRV]$/ {print $3}' | grep -v '^bagua_' || true)
if [ -n "$exported" ]; then
  echo "FAIL: libbagua.so exports non-bagua symbols:"; echo "$exported" | head; exit 1
fi
readelf -d "$lib" | grep -q 'SONAME.*libbagua.so.0' || { echo "FAIL: no versioned SONAME"; exit 1; }

mkdir "$tmp/consumer"
cat > "$tmp/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(bagua REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE bagua::bagua)
CM
cat > "$tmp/consumer/main.c" <<'C'
#include <bagua/bagua.h>
#include <stdio.h>
int main(void) {
  bagua_unique_id_t id;
  bagua_comm_t comm;
  if (bagua_get_unique_id(&id) != BAGUA_SUCCESS) return 1;
  if (bagua_comm_init_rank(&comm, 1, id, 0) != BAGUA_SUCCESS) { puts(bagua_get_last_error(NULL)); return 1; }
  if (bagua_barrier(comm, NULL) != BAGUA_SUCCESS) return 1;
  if (bagua_get_version() != BAGUA_VERSION_CODE) { puts("header and library versions differ"); return 1; }
  printf("consumer linked bagua %d\n", bagua_get_version());
  return bagua_comm_destroy(comm) == BAGUA_SUCCESS ? 0 : 1;
}
C
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer/build" >/dev/null
LD_LIBRARY_PATH="$(dirname "$lib")" "$tmp/consumer/build/consumer"

pcdir=$(dirname "$lib")/pkgconfig
[ -f "$pcdir/bagua.pc" ] || { echo "FAIL: no bagua.pc in $pcdir"; exit 1; }
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs bagua)
cc -std=c99 "$tmp/consumer/main.c" -o "$tmp/consumer/pc_consumer" $flags
LD_LIBRARY_PATH="$(dirname "$lib")" "$tmp/consumer/pc_consumer"
project_version=$(sed -n 's/^project(bagua VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
[ "$(PKG_CONFIG_PATH="$pcdir" pkg-config --modversion bagua)" = "$project_version" ] ||
  { echo "FAIL: bagua.pc version differs from project(VERSION) $project_version"; exit 1; }
echo "install + find_package + pkg-config: ok"
