#!/bin/bash
# Proves the README's two commands on a machine that has nothing installed: builds a minimal Debian 12 root
# (mmdebstrap, variant minbase), puts a clean clone of HEAD inside, runs `scripts/run.sh` and `scripts/test.sh`
# there exactly as the README says, as root, and removes everything it made, also when interrupted.
#
# Fails when either command fails, when a test other than the CUDA ones skips inside (they need the GPU driver,
# which stays outside), and when nvcc exists but the CUDA targets did not build. Only committed work is checked
# (the clone is of HEAD).
#
#   scripts/fresh-check.sh
#
# Environment:
#   BAGUA_FRESH_CACHE   folder for the cached minbase root and .deb files (default /var/cache/bagua-fresh-check);
#                       the root holds only what mmdebstrap installs, keyed by everything that shapes it
#   BAGUA_FRESH_SOURCES apt sources file(s) for the root (default: the host's Debian sources)
#   BAGUA_FRESH_TMP     where the root is unpacked (default /var/tmp)
#   BAGUA_FRESH_KEEP=1  keep the root after a failure, to look inside (chroot DIR/root); remove it by hand
#   BAGUA_CMAKE_ARGS    passed to the build inside (scripts/build.sh); CI sets -DBAGUA_WERROR=ON
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
suite=bookworm
say() { echo "fresh-check: $*"; }
die() { echo "fresh-check: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (it builds a Debian root and mounts /proc, /sys and /dev into it)"
for tool in mmdebstrap unshare findmnt git; do
  if ! command -v "$tool" >/dev/null; then
    say "installing mmdebstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap util-linux git >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap \
          util-linux git >/dev/null; }
    break
  fi
done

# apt sources and settings: the host's Debian sources, and its Acquire settings (proxies, mirrors' validity).
sources=()
if [ -n "${BAGUA_FRESH_SOURCES:-}" ]; then
  read -r -a sources <<<"$BAGUA_FRESH_SOURCES"
else
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && grep -Eq '^[^#]*(deb |URIs:).*debian' "$f" && sources+=("$f")
  done
fi
[ ${#sources[@]} -gt 0 ] || sources=(http://deb.debian.org/debian)
aptopts=()
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
  [ -f "$f" ] && grep -q 'Acquire::' "$f" && aptopts+=("--aptopt=$f")
done

cache=${BAGUA_FRESH_CACHE:-/var/cache/bagua-fresh-check}
mkdir -p "$cache"
key=$( { echo "$suite minbase"; mmdebstrap --version; for f in "${sources[@]}" "${aptopts[@]#--aptopt=}"; do
           echo "$f"; [ ! -f "$f" ] || cat "$f"; done; } | sha256sum | cut -c1-16)
base="$cache/minbase-$key.tar"
debs="$cache/debs-$key"
mkdir -p "$debs/partial"

work=""
inner=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  # The commands running in the root: their whole process group, then anything still rooted there.
  [ -n "$inner" ] && kill -TERM -- "-$inner" 2>/dev/null && sleep 1 && kill -KILL -- "-$inner" 2>/dev/null
  if [ -n "$work" ] && [ -d "$work" ]; then
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/root" 2>/dev/null)" = "$work/root" ] && kill -9 "${p#/proc/}" 2>/dev/null || true
    done
    # The mounts live in a private mount namespace and die with it; unmount anything seen here all the same.
    findmnt -rn -o TARGET | grep -F "$work/" | sort -r | while read -r m; do umount -R -l "$m" || true; done
    if [ "$rc" != 0 ] && [ "${BAGUA_FRESH_KEEP:-0}" = 1 ]; then
      echo "fresh-check: kept $work/root (BAGUA_FRESH_KEEP=1); remove it with: rm -rf --one-file-system $work" >&2
    elif findmnt -rn -o TARGET | grep -qF "$work/"; then
      echo "fresh-check: $work still has mounts; not removing it" >&2
      rc=1
    else
      rm -rf --one-file-system "$work"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "fresh-check: interrupted; removing what it made" >&2; exit 130' INT TERM

if [ ! -f "$base" ]; then
  say "building a minimal Debian $suite root (mmdebstrap --variant=minbase; cached in $cache)"
  rm -rf --one-file-system "$cache"/minbase-*
  t0=$SECONDS
  mmdebstrap --quiet --variant=minbase --format=tar "${aptopts[@]}" "$suite" "$base.part" "${sources[@]}" </dev/null ||
    die "mmdebstrap could not build the root (apt sources: ${sources[*]})"
  mv "$base.part" "$base"
  say "root built in $((SECONDS - t0)) s"
  find "$cache" -maxdepth 1 -name 'debs-*' ! -name "debs-$key" -exec rm -rf {} +
fi

work=$(mktemp -d "${BAGUA_FRESH_TMP:-/var/tmp}/bagua-fresh.XXXXXX")
mkdir "$work/root"
tar -C "$work/root" -xf "$base"
# What any machine has beside its packages: name resolution for localhost and the network.
cp /etc/resolv.conf "$work/root/etc/resolv.conf" 2>/dev/null || true
[ -f "$work/root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$work/root/etc/hosts"
git clone --quiet --no-hardlinks "$repo" "$work/root/root/bagua"
say "checking $(git -C "$repo" rev-parse --short HEAD) ($(git -C "$repo" log -1 --format=%s | cut -c1-60))"
cuda=""
[ -x /usr/local/cuda/bin/nvcc ] && cuda=$(readlink -f /usr/local/cuda)

# Everything below runs in a private mount namespace: its mounts never show on the host and vanish with it.
# In the background (its own process group) and waited for, so that an interrupt reaches the trap at once; the
# commands inside get the default INT and QUIT handling that a background job would otherwise lose.
setsid --wait env --default-signal=INT,QUIT unshare --mount --propagation private bash -s "$work/root" "$debs" "$cuda" <<'INSIDE' &
set -euo pipefail
root=$1 debs=$2 cuda=$3
# The root must be a mount point: `ip netns exec` makes / a slave mount, which fails on a plain folder.
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
mount -t tmpfs tmpfs "$root/run"
mount --bind "$debs" "$root/var/cache/apt/archives"
if [ -n "$cuda" ]; then
  mkdir -p "$root/usr/local/cuda"
  mount --bind "$cuda" "$root/usr/local/cuda"
  mount -o remount,bind,ro "$root/usr/local/cuda"
fi
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" \
    BAGUA_CMAKE_ARGS="${BAGUA_CMAKE_ARGS:-}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -c "cd /root/bagua && $1"
}
status=0
for cmd in scripts/run.sh scripts/test.sh; do
  echo "fresh-check: running $cmd in the clean root"
  t0=$SECONDS
  if in_root "$cmd" </dev/null 2>&1 | tee "$root/root/$(basename "$cmd").log"; then
    echo "fresh-check: $cmd passed in $((SECONDS - t0)) s"
  else
    echo "fresh-check: $cmd FAILED after $((SECONDS - t0)) s" >&2
    status=1
    break
  fi
done
exit $status
INSIDE
inner=$!
rc=0
wait "$inner" || rc=$?
inner=""
[ $rc = 0 ] || die "a README command failed in the clean root (see above). If it is a missing package, add it to scripts/install-deps.sh"

# A test that skips inside but would run on a developer's machine means something is missing from the install.
log="$work/root/root/test.sh.log"
mapfile -t skipped < <(sed -n '/The following tests did not run:/,/^$/s/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log")
# The CUDA tests skip in the root on any machine: the GPU driver is not mounted into it. scripts/gpu-check.sh runs
# them on a GPU machine; here it is enough that they build (checked below).
bad=()
for t in "${skipped[@]}"; do
  case "$t" in cuda_*) continue ;; esac
  bad+=("$t")
done
if [ ${#bad[@]} != 0 ]; then
  echo "fresh-check: tests skipped in the clean root that run elsewhere: ${bad[*]}" >&2
  echo "fresh-check: what they said (build/Testing/Temporary/LastTest.log):" >&2
  grep -h -i 'skipping' "$work/root/root/bagua/build/Testing/Temporary/LastTest.log" 2>/dev/null | sort -u |
    sed 's/^/  /' >&2 || true
  die "something these tests need is not installed by scripts/install-deps.sh (a package or a tool they probe for)"
fi
if [ -n "$cuda" ]; then
  [ -x "$work/root/root/bagua/build/bin/cuda_kernels" ] ||
    die "nvcc exists ($cuda) but the CUDA targets did not build: see build/configure.log in a local build"
  say "CUDA targets built with $cuda"
fi
say "passed: both README commands work on a fresh Debian $suite root"
