#!/bin/sh
# Cross-check `raidkit bench io` against fio: sequential 128 KiB reads of one file on tmpfs
# (buffered: tmpfs has no O_DIRECT), 3 runs each, best MiB/s compared. Goal: within 10 %.
# Usage: crates/raidkit-tools/bench/fio-crosscheck.sh [RAIDKIT_BINARY] [DIR]
# Installs fio with apt-get when missing and run as root on Debian.
set -eu
RK=${1:-target/release/raidkit}
DIR=${2:-/dev/shm}
command -v fio >/dev/null 2>&1 || { [ "$(id -u)" = 0 ] && apt-get install -y fio >/dev/null; } || { echo "fio missing: skipped"; exit 0; }
F=$DIR/raidkit-fio-xcheck.img
trap 'rm -f "$F"' EXIT
dd if=/dev/urandom of="$F" bs=1M count=512 status=none
best_fio=0; best_rk=0
for i in 1 2 3; do
  f=$(fio --name=x --filename="$F" --rw=read --bs=128k --ioengine=psync --iodepth=1 --numjobs=1 \
        --size=512M --output-format=json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["read"]["bw"]/1024)')
  r=$("$RK" bench io "$F" --rw read --bs 128K --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["mib_s"])')
  best_fio=$(python3 -c "print(max($best_fio, $f))"); best_rk=$(python3 -c "print(max($best_rk, $r))")
done
python3 - "$best_fio" "$best_rk" <<'PY'
import sys
f, r = map(float, sys.argv[1:])
d = (r - f) / f * 100
print(f"fio {f:.0f} MiB/s, raidkit {r:.0f} MiB/s, difference {d:+.1f}%: {'OK' if abs(d) <= 10 else 'OUTSIDE 10%'}")
PY
