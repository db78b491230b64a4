#!/usr/bin/env bash
# Interleaved A/B of an offline `raidkit check` on one array, wall and CPU time (user +
# system) per run, against fio reading the same member files sequentially (one job per
# file, 1 MiB) measured first. On tmpfs a check is CPU-bound: its CPU seconds move much
# less with the machine's load than its wall time, so they tell two binaries apart where
# the wall times of a shared machine do not.
#   benches/check-ab.sh LEVEL(5|6) MEMBERS CHUNK_KIB COMP_MIB ROUNDS A=path B=path...
# e.g. benches/check-ab.sh 5 4 64 512 5 main=ab/raidkit-main new=target/release/raidkit
# Run it under the shared benchmark lock (flock) on a shared machine.
set -euo pipefail
level=$1 n=$2 chunk=$3 comp=$4 rounds=$5
shift 5
[ $# -ge 1 ] || { echo "name=binary arguments expected" >&2; exit 2; }
W=$(mktemp -d /dev/shm/rk-chkab.XXXXXX)
trap 'rm -rf "$W"' EXIT
export RAIDKIT_RUN_DIR="$W/run"
mkdir -m 0700 "$RAIDKIT_RUN_DIR"
first=${1#*=}
m=()
for ((i = 0; i < n; i++)); do m+=("$W/m$i"); done
data=$((level == 6 ? n - 2 : n - 1))
"$first" create --level "$level" --raid-devices "$n" --chunk "${chunk}K" --size $((comp + 8))M \
  --name s "${m[@]}" >/dev/null 2>&1
"$first" import --input <(head -c $((data * comp))M /dev/urandom) "${m[@]}" >/dev/null 2>&1
args=()
for ((i = 0; i < n; i++)); do args+=(--name="m$i" --filename="${m[$i]}"); done
fio --rw=read --bs=1M --ioengine=psync --offset=8M --size="${comp}M" --time_based --runtime=3 \
  --group_reporting --output-format=json --output="$W/fio.json" "${args[@]}" >/dev/null 2>&1
raw=$(python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"]
print("%.1f" % (sum(x["read"]["bw_bytes"] for x in j) / 1048576))' "$W/fio.json")
echo "RAID$level, $n × $comp MiB, $chunk KiB chunk; fio $n readers $raw MiB/s; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | binary | wall s | CPU s | member MiB/s | × raw |"
echo "|---|---|---|---|---|---|"
for ((r = 1; r <= rounds; r++)); do
  for v in "$@"; do
    name=${v%%=*} bin=${v#*=}
    t0=$(date +%s.%N)
    cpu=$( { TIMEFORMAT='%U %S'; time "$bin" check "${m[@]}" >/dev/null 2>&1; } 2>&1)
    t1=$(date +%s.%N)
    python3 -c "w = $t1 - $t0; u, s = map(float, '$cpu'.split()[-2:]); bw = $n * $comp / w
print('| %d | %s | %.2f | %.2f | %.0f | %.2f× |' % ($r, '$name', w, u + s, bw, bw / $raw))"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
