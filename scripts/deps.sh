#!/usr/bin/env bash
# Install what raidkit's tests need on a Debian machine (idempotent; quiet when all present).
# Sourced by scripts/test.sh and .ci/run; safe to run by hand. Everything the suite uses is
# listed here, so a bare Debian machine needs nothing installed by hand.
set -euo pipefail
# "probe:package" — a probe is a command on PATH, or dpkg:NAME for a library package.
deps=(
  xz:xz-utils zstd:zstd mkfs.ext4:e2fsprogs debugfs:e2fsprogs losetup:mount
  pkg-config:pkg-config openssl:openssl dpkg:libssl-dev:libssl-dev
  # ISA-L: the parity benchmark's anchor; clippy and tests run both with and without it.
  dpkg:libisal-dev:libisal-dev
  # Real NBD clients and servers for the end-to-end tests.
  nbdinfo:libnbd-bin nbdsh:libnbd-bin nbdcopy:libnbd-bin nbdfuse:libnbd-bin
  dpkg:python3-libnbd:python3-libnbd
  qemu-img:qemu-utils qemu-io:qemu-utils qemu-nbd:qemu-utils
  fio:fio nbdkit:nbdkit nbd-client:nbd-client nbd-server:nbd-server
  # FUSE mounts as a normal user, and the tests' helpers.
  fusermount3:fuse3 python3:python3 timeout:coreutils
  # SMART health of members (`detail`, the monitor's smart_warning events).
  smartctl:smartmontools
  # Checks of the shipped Prometheus alert rules (docs/prometheus) and systemd units (systemd/).
  promtool:prometheus systemd-analyze:systemd
  # The font charts are drawn with (plot.rs reads it at run time).
  dpkg:fonts-dejavu-core:fonts-dejavu-core
)
need=()
for d in "${deps[@]}"; do
  pkg="${d##*:}"
  case "$d" in
    dpkg:*) dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg") ;;
    *) command -v "${d%%:*}" >/dev/null 2>&1 || need+=("$pkg") ;;
  esac
done
if [ ${#need[@]} -gt 0 ]; then
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "deps: installing ${need[*]}" >&2
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
    echo "deps: installing ${need[*]} (sudo)" >&2
    sudo apt-get update -qq >/dev/null 2>&1 || true
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "deps: missing ${need[*]} (install them, or run as root on Debian)" >&2
  fi
fi
# The real Linux MD in a VM (shared/mdref beside the repository): install and warm its cache.
MDREF="${RAIDKIT_MDREF:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/../shared/mdref/mdref-run}"
if [ -x "$MDREF" ]; then
  export MDREF_ACCEL="${MDREF_ACCEL:-tcg}"
  "$MDREF" --setup >/dev/null 2>&1 || echo "deps: mdref setup failed; kernel interop tests will be skipped" >&2
fi
