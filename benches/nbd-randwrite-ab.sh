#!/usr/bin/env bash
# 4 KiB random writes (QD32, fio's nbd engine over a Unix socket) against raidkit builds,
# with nbdkit serving one tmpfs file as the same-run anchor. Each round: nbdkit, then every
# build in turn, each on a fresh RAID5 (LEVELS, default 5) of 4 tmpfs members (512 KiB
# chunk, 1 GiB of data), so builds are compared A/B under the same load.
#   benches/nbd-randwrite-ab.sh RUNTIME_SECONDS ROUNDS BINARY [BINARY ...]
# Prints one line per round: IOPS of nbdkit and of each build.
set -euo pipefail
RT=$1; REP=$2; shift 2
W=$(mktemp -d /dev/shm/rk-rw.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; sleep 0.5; rm -rf "$W"' EXIT
wait_sock() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; return 1; }
run_fio() {
  fio --name=b --ioengine=nbd --uri="nbd+unix:///$2?socket=$1" --rw=randwrite --bs=4k \
      --iodepth=32 --time_based --runtime="$RT" --ramp_time=1 --output-format=json \
      --output="$W/fio.json" >/dev/null 2>&1
  python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["jobs"][0]["write"]["iops"])' < "$W/fio.json"
}
truncate -s 1024M "$W/one.img"
nbdkit -U "$W/nbdkit.sock" --exit-with-parent -f file "$W/one.img" & wait_sock "$W/nbdkit.sock"
LEVELS="${LEVELS:-5}"
for _ in $(seq "$REP"); do
  line="nbdkit $(run_fio "$W/nbdkit.sock" '')"
  i=0
  for b in "$@"; do
    for l in $LEVELS; do
      d="$W/b$i-$l"; mkdir -p "$d"
      per=520M; [ "$l" = 5 ] && per=350M
      "$b" create --level "$l" --raid-devices 4 --chunk 512K --size $per --assume-clean "$d"/m{0,1,2,3} >/dev/null
      "$b" serve --socket "$d/s.sock" --export a "$d"/m{0,1,2,3} >/dev/null 2>&1 & wait_sock "$d/s.sock"
      line="$line | $b raid$l $(run_fio "$d/s.sock" a)"
      kill %% 2>/dev/null || true; sleep 0.5; rm -rf "$d"
    done
    i=$((i+1))
  done
  echo "$line"
done
