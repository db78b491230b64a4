#!/usr/bin/env bash
# NBD serving throughput: fio (ioengine=nbd) through a Unix socket against
#   - raidkit serve, RAID0/5/6/10 over 4 member files on tmpfs,
#   - nbdkit's file plugin serving one tmpfs file,
#   - qemu-nbd serving one tmpfs file,
# all in the same run. Prints a markdown table (MiB/s, IOPS) with ratios vs nbdkit.
#   benches/nbd-vs-anchors.sh [RUNTIME_SECONDS]   (default 8)
# RAIDKIT=path picks the binary; TARGETS="raid0 raid5" limits the raidkit levels run
# (the anchors always run, so ratios stay same-run).
# Needs: fio with the nbd engine, nbdkit, qemu-nbd (tests/nbd/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
RT="${1:-8}"
RAIDKIT="${RAIDKIT:-target/release/raidkit}"
[ -x "$RAIDKIT" ] || cargo build --release -q -p raidkit
W=$(mktemp -d /dev/shm/rk-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; sleep 0.5; rm -rf "$W"' EXIT
SIZE_MIB=1024   # array data size target per target
# Writes first: every target is fully written (no holes) before anything is read, so no
# server can answer reads from sparse regions without moving data.
jobs_spec=(
  "seqwrite:--rw=write --bs=1M --iodepth=16"
  "seqread:--rw=read --bs=1M --iodepth=16"
  "randwrite:--rw=randwrite --bs=4k --iodepth=32"
  "randread:--rw=randread --bs=4k --iodepth=32"
)
run_fio() { # socket export spec -> "MiB/s IOPS"
  local sock=$1 exp=$2 spec=$3
  fio --name=b --ioengine=nbd --uri="nbd+unix:///$exp?socket=$sock" $spec \
      --time_based --runtime="$RT" --ramp_time=1 --output-format=json --output="$W/fio.json" >/dev/null 2>&1
  python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; r=j["read"]; w=j["write"]; d=r if r["io_bytes"]>0 else w; print("%.0f %.0f" % (d["bw_bytes"]/1048576, d["iops"]))' < "$W/fio.json"
}
wait_sock() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "no socket $1" >&2; return 1; }
declare -A RES
# Anchors: one tmpfs file of the same size.
truncate -s ${SIZE_MIB}M "$W/one.img"
nbdkit -U "$W/nbdkit.sock" --exit-with-parent -f file "$W/one.img" & wait_sock "$W/nbdkit.sock"
qemu-nbd -k "$W/qemu.sock" -f raw -x q --cache=none --aio=threads "$W/one.img" -t & wait_sock "$W/qemu.sock"
for js in "${jobs_spec[@]}"; do
  n=${js%%:*}; spec=${js#*:}
  RES[nbdkit,$n]=$(run_fio "$W/nbdkit.sock" "" "$spec")
  RES[qemu-nbd,$n]=$(run_fio "$W/qemu.sock" "q" "$spec")
done
TARGETS="${TARGETS:-raid0 raid5 raid6 raid10}"
for cfg in "raid0:0:" "raid5:5:" "raid6:6:" "raid10:10:"; do
  name=${cfg%%:*}; lvl=$(echo "$cfg" | cut -d: -f2)
  [[ " $TARGETS " == *" $name "* ]] || continue
  d="$W/$name"; mkdir -p "$d"
  per=$(( SIZE_MIB / 2 + 8 ))M
  [ "$lvl" = 0 ] && per=$(( SIZE_MIB / 4 + 8 ))M
  [ "$lvl" = 5 ] && per=$(( SIZE_MIB / 3 + 8 ))M
  "$RAIDKIT" create --level "$lvl" --raid-devices 4 --chunk 512K --size "$per" --assume-clean "$d"/m{0,1,2,3} >/dev/null
  "$RAIDKIT" serve --socket "$d/s.sock" --export a "$d"/m{0,1,2,3} >/dev/null 2>&1 & wait_sock "$d/s.sock"
  for js in "${jobs_spec[@]}"; do
    n=${js%%:*}; spec=${js#*:}
    RES[$name,$n]=$(run_fio "$d/s.sock" "a" "$spec")
  done
  kill %% 2>/dev/null || true; sleep 0.5
done
echo "| target | seq write 1M QD16 | seq read 1M QD16 | rand write 4K QD32 | rand read 4K QD32 |"
echo "|---|---|---|---|---|"
for t in nbdkit qemu-nbd $TARGETS; do
  row="| $t"
  for js in "${jobs_spec[@]}"; do
    n=${js%%:*}
    read -r bw iops <<<"${RES[$t,$n]}"
    read -r abw aiops <<<"${RES[nbdkit,$n]}"
    if [[ $n == seq* ]]; then v=$bw; a=$abw; u="MiB/s"; else v=$iops; a=$aiops; u="IOPS"; fi
    ratio=$(python3 -c "print('%.2f' % ($v/$a if $a else 0))")
    row="$row | $v $u (${ratio}×)"
  done
  echo "$row |"
done
