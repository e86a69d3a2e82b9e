#!/bin/bash
# Installs the Debian packages bagua builds with, when any is missing. Idempotent and quiet when all is there.
set -euo pipefail

PACKAGES=(build-essential cmake pkg-config libucx-dev ucx-utils libhwloc-dev libhwloc-plugins hwloc libfmt-dev catch2 libssl-dev iproute2
          ethtool util-linux python3)
# The Python binding (python/bagua) and its tests: venv for the pip check, pytest, NumPy, PyTorch (Debian's, CPU),
# and scikit-learn for the digits data set of examples/python/train_digits.py.
PACKAGES+=(python3-venv python3-pytest python3-numpy python3-torch python3-sklearn)
# libFuzzer and the sanitizer runtimes for scripts/fuzz.sh, named explicitly: with --no-install-recommends, clang
# alone does not bring them, and a machine that happens to have them would hide that.
if [ "${BAGUA_WITH_FUZZ:-0}" = 1 ]; then
  PACKAGES+=(clang-14 libclang-rt-14-dev)
fi
# The sanitizer runtimes of g++ 12 (scripts/sanitize.sh), named so that a machine that happens to have them
# (they come with libgcc-12-dev as it stands) hides no gap.
if [ "${BAGUA_WITH_SANITIZERS:-0}" = 1 ]; then
  PACKAGES+=(libasan8 libubsan1 libtsan2 liblsan0)
fi
# Peers for the comparison benchmarks (perf/compare); not needed to build or test.
if [ "${BAGUA_WITH_PEERS:-0}" = 1 ]; then
  PACKAGES+=(openmpi-bin libopenmpi-dev libgloo-dev)
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
