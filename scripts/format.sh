#!/bin/bash
# Formats every C, C++ and CUDA source with clang-format (.clang-format); --check only reports files that differ.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (apt-get install clang-format)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.c' '*.cu' '*.cuh')
if [ "${1:-}" = --check ]; then
  differing=$(clang-format --dry-run "${files[@]}" 2>&1 | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' | sort -u)
  if [ -n "$differing" ]; then
    echo "$differing" | sed 's/^/format: differs from .clang-format (scripts\/format.sh fixes it): /' >&2
    exit 1
  fi
  echo "format: ${#files[@]} files match .clang-format"
else
  clang-format -i "${files[@]}"
fi
