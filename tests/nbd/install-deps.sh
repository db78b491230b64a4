#!/bin/sh
# Installs the NBD clients used by the raidkit NBD tests (Debian/Ubuntu). Tests whose tool
# is missing print SKIP and pass, so this is optional locally but expected in CI.
#   libnbd-bin: nbdinfo, nbdsh, nbdcopy, nbdfuse     python3-libnbd: nbdsh's Python module
#   qemu-utils: qemu-img, qemu-io, qemu-nbd          fio: --ioengine=nbd
#   nbdkit, nbd-client: for manual interop checks     openssl: test certificates (X.509 TLS)
set -eu
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
    libnbd-bin python3-libnbd qemu-utils fio nbdkit nbd-client openssl libssl-dev pkg-config
