#!/usr/bin/env bash
# Install what raidkit's tests need on a Debian machine (idempotent; quiet when all present).
# Sourced by scripts/test.sh and .ci/run; safe to run by hand.
set -euo pipefail
need=()
for cmd_pkg in xz:xz-utils zstd:zstd mkfs.ext4:e2fsprogs losetup:mount; do
  command -v "${cmd_pkg%%:*}" >/dev/null 2>&1 || need+=("${cmd_pkg#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "deps: installing ${need[*]}" >&2
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "deps: missing ${need[*]} (install them, or run as root on Debian)" >&2
  fi
fi
# Tools for the NBD client tests and the openssl crate (only when something is missing).
nbd_missing=0
for c in nbdinfo nbdsh nbdcopy nbdfuse qemu-img qemu-io qemu-nbd fio nbdkit nbd-client pkg-config openssl; do
  command -v "$c" >/dev/null 2>&1 || nbd_missing=1
done
dpkg -s libssl-dev python3-libnbd >/dev/null 2>&1 || nbd_missing=1
if [ $nbd_missing = 1 ] && [ -x tests/nbd/install-deps.sh ]; then tests/nbd/install-deps.sh >/dev/null; fi
if [ -x tests/fuse/install-deps.sh ]; then tests/fuse/install-deps.sh; fi
# The real Linux MD in a VM (shared/mdref beside the repository): install and warm its cache.
MDREF="${RAIDKIT_MDREF:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/../shared/mdref/mdref-run}"
if [ -x "$MDREF" ]; then
  export MDREF_ACCEL="${MDREF_ACCEL:-tcg}"
  "$MDREF" --setup >/dev/null 2>&1 || echo "deps: mdref setup failed; kernel interop tests will be skipped" >&2
fi
