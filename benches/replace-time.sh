#!/usr/bin/env bash
# Hot replace of an array's last member onto a blank spare, against the members' raw
# bandwidth. A RAID5 (4 members) or RAID6 (6) over tmpfs files, filled with random data,
# served (`raidkit serve`); `manage --replace LAST --with SPARE`, timed from the command's
# start until `monitor --json` delivers replace_finished (polled every 10 ms; so the time
# includes the CLI's start and the event's delivery; the spare is added before: the
# replace_started event arrives
# batched with replace_finished when the copy is short, so it cannot be the start). The
# anchor, measured first on the same files: fio with one sequential 1 MiB reader (a
# member) and one writer (the spare), as the replace reads one member and writes one.
# Rate: member bytes moved (2 × component) per second. The spare ends equal to the old
# member (checked with cmp).
#   benches/replace-time.sh BINARY LEVEL(5|6) CHUNK_KIB COMP_MIB
# Run it under the shared benchmark lock (flock) on a shared machine.
set -euo pipefail
B=$(realpath "$1") lvl=$2 ch=$3 comp=$4
W=$(mktemp -d /dev/shm/rk-repl.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; sleep 0.3; rm -rf "$W"' EXIT
cd "$W"
export RAIDKIT_RUN_DIR="$W/run"
mkdir -m 0700 run
n=$((lvl == 6 ? 6 : 4)) data=$((lvl == 6 ? 4 : 3))
m=()
for ((i = 0; i < n; i++)); do m+=("$W/m$i"); done
"$B" create --level "$lvl" --raid-devices "$n" --chunk "${ch}K" --size $((comp + 8))M --name s \
  "${m[@]}" >/dev/null 2>&1
"$B" import --input <(head -c $((data * comp))M /dev/urandom) "${m[@]}" >/dev/null 2>&1
last=$((n - 1)) sz=$(stat -c %s "${m[$n - 1]}")
fallocate -l "$sz" spare
fio --bs=1M --ioengine=psync --offset=8M --size="${comp}M" --time_based --runtime=2 \
  --group_reporting --output-format=json --output=fio.json --name=r --rw=read \
  --filename="${m[0]}" --name=w --rw=write --filename=spare >/dev/null 2>&1
raw=$(python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"]
print(sum(x["read"]["bw_bytes"] + x["write"]["bw_bytes"] for x in j) / 2**20)' fio.json)
# The spare's pages allocated up front, as fio's writer found them (see issue17.sh sync).
rm -f spare
fallocate -l "$sz" spare
"$B" serve --socket s.sock --export a "${m[@]}" >serve.log 2>&1 &
SPID=$!
for _ in $(seq 200); do [ -S s.sock ] && break; sleep 0.05; done
nm=""
for _ in $(seq 100); do
  nm=$("$B" status --json | python3 -c "import json,sys; print(next((a['name'] for a in json.load(sys.stdin) if a['pid'] == $SPID), ''))")
  [ -n "$nm" ] && break
  sleep 0.05
done
[ -n "$nm" ] || { echo "the server (pid $SPID) never showed in raidkit status" >&2; exit 1; }
"$B" monitor --json > >(python3 -u -c 'import sys,time
for l in sys.stdin: print("%.6f %s" % (time.time(), l), end="", flush=True)' >events) &
sleep 0.3
# The spare is added first (its blank check is not the replace's time).
"$B" manage "$nm" --add "$W/spare" >/dev/null 2>&1
t0=$(date +%s.%N)
"$B" manage "$nm" --replace "${m[$last]}" --with "$W/spare" >/dev/null 2>&1
for _ in $(seq 3000); do grep -q replace_finished events && break; sleep 0.01; done
t1=$(date +%s.%N)
grep -q replace_finished events || { echo "no replace_finished event" >&2; exit 1; }
t=$(python3 -c "print('%.3f' % ($t1 - $t0))")
kill "$SPID"
wait "$SPID" 2>/dev/null || true
same=$(cmp -s -n $((comp << 20)) -i 8388608 spare "${m[$last]}" && echo "the spare equals the old member" || echo "THE SPARE DIFFERS")
python3 -c "import sys
t, comp, raw = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
print('| RAID$lvl, $n × $comp MiB, ${ch} KiB chunk | %.3f s | %.0f | %.0f (1 reader + 1 writer) | %.2f× | %s |' % (t, 2 * comp / t, raw, 2 * comp / t / raw, sys.argv[4]))" "$t" "$comp" "$raw" "$same"
