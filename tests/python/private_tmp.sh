#!/bin/bash
# Runs "$@" as this rank; rank 1 in a mount namespace of its own with a private tmpfs on /tmp, so that it cannot see
# what other ranks put there (as on another host). Exits 77 (skip) where that namespace cannot be made.
if [ "${BAGUA_RANK:-}" != 1 ]; then exec "$@"; fi
unshare -m sh -c 'mount -t tmpfs bagua-private-tmp /tmp' 2>/dev/null || exit 77
exec unshare -m sh -c 'mount -t tmpfs bagua-private-tmp /tmp && exec "$@"' private-tmp "$@"
