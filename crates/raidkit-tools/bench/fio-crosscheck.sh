#!/bin/sh
# Cross-check `raidkit bench io` against fio on the same tmpfs file (buffered: tmpfs has no
# O_DIRECT): sequential 128 KiB reads, random 4 KiB reads and sequential 128 KiB writes,
# psync, one job, QD1; 3 runs each, best compared. Goal: within 10 %.
# Usage: crates/raidkit-tools/bench/fio-crosscheck.sh [RAIDKIT_BINARY] [DIR]
# Installs fio with apt-get when missing and run as root on Debian.
set -eu
RK=${1:-target/release/raidkit}
DIR=${2:-/dev/shm}
command -v fio >/dev/null 2>&1 || { [ "$(id -u)" = 0 ] && apt-get install -y fio >/dev/null; } || { echo "fio missing: skipped"; exit 0; }
F=$DIR/raidkit-fio-xcheck.img
trap 'rm -f "$F"' EXIT
dd if=/dev/urandom of="$F" bs=1M count=512 status=none
status=0
for case in "read 128k 128K" "randread 4k 4K" "write 128k 128K"; do
  set -- $case
  rw=$1; fbs=$2; rbs=$3
  best_fio=0; best_rk=0
  for i in 1 2 3; do
    f=$(fio --name=x --filename="$F" --rw="$rw" --bs="$fbs" --ioengine=psync --iodepth=1 --numjobs=1 \
          --size=512M --time_based --runtime=3 --output-format=json |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; d=j["read"] if j["read"]["io_bytes"] else j["write"]; print(d["bw"]/1024)')
    r=$("$RK" bench io "$F" --rw "$rw" --bs "$rbs" --runtime 3 --force --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["mib_s"])')
    best_fio=$(python3 -c "print(max($best_fio, $f))"); best_rk=$(python3 -c "print(max($best_rk, $r))")
  done
  python3 - "$rw $fbs" "$best_fio" "$best_rk" <<'PY' || status=1
import sys
name, f, r = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
d = (r - f) / f * 100
ok = abs(d) <= 10
print(f"{name:14s} fio {f:7.0f} MiB/s  raidkit {r:7.0f} MiB/s  difference {d:+6.1f}%  {'OK' if ok else 'OUTSIDE 10%'}")
sys.exit(0 if ok else 1)
PY
done
exit $status
