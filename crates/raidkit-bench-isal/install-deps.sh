#!/bin/sh
# Installs Intel ISA-L (headers, library, pkg-config file) for raidkit-bench-isal.
# Debian/Ubuntu: libisal-dev; Fedora: isa-l-devel; Arch: isa-l.
set -eu
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get install -y libisal-dev || { $SUDO apt-get update && $SUDO apt-get install -y libisal-dev; }
elif command -v dnf >/dev/null 2>&1; then
    $SUDO dnf install -y isa-l-devel
elif command -v pacman >/dev/null 2>&1; then
    $SUDO pacman -S --needed --noconfirm isa-l
else
    echo "install Intel ISA-L (https://github.com/intel/isa-l) so that 'pkg-config --libs libisal' works" >&2
    exit 1
fi
pkg-config --modversion libisal
