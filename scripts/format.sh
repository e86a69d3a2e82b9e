#!/bin/bash
# Formats every C, C++ and CUDA source with clang-format (.clang-format); --check only reports files that differ.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (apt-get install clang-format)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.c' '*.cu' '*.cuh')
if [ "${1:-}" = --check ]; then
  clang-format --dry-run --Werror "${files[@]}" 2>&1 | grep -o '^[^:]*:[0-9]*:[0-9]*: error' | cut -d: -f1 | sort -u |
    sed 's/^/format: differs from .clang-format: /' | grep . && exit 1
  echo "format: ${#files[@]} files match .clang-format"
else
  clang-format -i "${files[@]}"
fi
