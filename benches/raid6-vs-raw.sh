#!/usr/bin/env bash
# Engine RAID6 full-stripe sequential write against the members' raw write bandwidth, in
# the same run: 6 member files on tmpfs (4 data + 2 parity, 512 KiB chunk, 512 MiB each),
#   raw:     fio, one job per member file (6 jobs), bs = chunk, sequential writes past the
#            superblock area of the same files;
#   raidkit: `raidkit bench io --array` on those members, bs = one full stripe (2 MiB).
# Interleaved raw, raidkit, raw, raidkit, … REPEATS times; prints each pair and the ratio
# of raidkit's data bytes/s to raw × data/members (4/6), median over the pairs.
#   benches/raid6-vs-raw.sh [RUNTIME_SECONDS] [REPEATS]   (default 4 s, 3 repeats)
# RAIDKIT=path picks the binary; IODEPTH = raidkit writer threads (default: one per core,
# the engine's own concurrency; IODEPTH=6 gives it as many writers as fio has jobs).
# fio's number hardly moves with its job count here (6 jobs or 2 jobs × 3 files: both
# about 10 GiB/s on 2 cores), so the anchor is the same either way.
# A/B: VARIANTS="name=binary[:VAR=value] ..." runs each variant after the raw run of every
# round (interleaved), one column each, e.g.
#   VARIANTS="main=ab/raidkit-main lanes=target/release/raidkit:RAIDKIT_LARGE_WRITES=lanes"
set -euo pipefail
cd "$(dirname "$0")/.."
RT="${1:-4}"
REP="${2:-3}"
QD="${IODEPTH:-$(nproc)}"
RAIDKIT="${RAIDKIT:-target/release/raidkit}"
VARIANTS="${VARIANTS:-raidkit=$RAIDKIT}"
for v in $VARIANTS; do
  b="${v#*=}"; b="${b%%:*}"
  [ -x "$b" ] || cargo build --release -q -p raidkit
done
first="${VARIANTS%% *}"; first="${first#*=}"; first="${first%%:*}"
W=$(mktemp -d /dev/shm/rk-r6.XXXXXX)
trap 'rm -rf "$W"' EXIT
M=("$W"/m{0,1,2,3,4,5})
"$first" create --level 6 --raid-devices 6 --chunk 512K --size 512M --assume-clean "${M[@]}" >/dev/null
# Fill the files so neither side writes into holes.
for f in "${M[@]}"; do
  dd if=/dev/zero of="$f" bs=1M seek=16 count=480 conv=notrunc status=none
done
raw() {
  local args=()
  for i in 0 1 2 3 4 5; do args+=(--name="m$i" --filename="${M[$i]}"); done
  fio --rw=write --bs=512k --ioengine=psync --offset=16M --size=480M --time_based \
      --runtime="$RT" --group_reporting --output-format=json --output="$W/fio.json" \
      "${args[@]}" >/dev/null 2>&1
  python3 -c 'import json,sys; print("%.1f" % (json.load(open(sys.argv[1]))["jobs"][0]["write"]["bw_bytes"]/1048576))' "$W/fio.json"
}
rk() { # variant spec "name=binary[:VAR=value]"
  local spec="${1#*=}" bin env=()
  bin="${spec%%:*}"
  [ "$bin" = "$spec" ] || env=("${spec#*:}")
  env "${env[@]}" "$bin" bench io --array "${M[@]}" --force --rw write --bs 2M --iodepth "$QD" \
      --runtime "${RT}s" --json | python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["mib_s"])'
}
echo "raidkit writer threads: $QD; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
head="| round | raw members MiB/s | raw × 4/6 |"; sep="|---|---|---|"
for v in $VARIANTS; do head+=" ${v%%=*} data MiB/s (ratio) |"; sep+="---|"; done
echo "$head"; echo "$sep"
declare -A ratios
for r in $(seq "$REP"); do
  a=$(raw)
  line="| $r | $a | $(python3 -c "print('%.1f' % ($a*4/6))") |"
  for v in $VARIANTS; do
    b=$(rk "$v")
    ratio=$(python3 -c "print('%.2f' % ($b / ($a * 4 / 6)))")
    ratios[${v%%=*}]+="$ratio "
    line+=" $b (${ratio}×) |"
  done
  echo "$line"
done
for v in $VARIANTS; do
  n="${v%%=*}"
  echo "median ratio $n: $(printf '%s\n' ${ratios[$n]} | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')×"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
