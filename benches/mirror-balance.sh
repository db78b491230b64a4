#!/usr/bin/env bash
# Read balancing on mismatched mirrors, through NBD with fio (ioengine=nbd, Unix socket).
# Every member is a tmpfs file wrapped in raidkit's device model (fault:slow=,qd=,bw=):
#   FAST = slow=500us,qd=4,bw=100M  (NVMe-like: 8 K IOPS, 100 MiB/s)
#   SLOW = slow=3ms,qd=4,bw=17M     (6× slower in latency, IOPS and bandwidth: SATA-SSD-like)
# Both are scaled down about 10× from real devices so that device time, not the CPU of a
# shared 2-core machine, decides the results.
# The anchor is the fast member(s) alone on the same serving path and model: a 1-member
# RAID1 of FAST (for 2-member mirrors) or a 2-member RAID0 of FAST (for 4-member RAID10,
# whose two fast members hold one copy of everything). Anchors and arrays run interleaved,
# ROUNDS times, and the table gives the median of the rounds.
#   benches/mirror-balance.sh [RUNTIME_SECONDS] [ROUNDS]     (default 6 s, 2 rounds)
# Tests:
#   rand   4 KiB random read, 4 jobs × QD32: members FAST+SLOW (RAID10 ×4: FAST,SLOW,FAST,SLOW)
#   seq    one sequential reader, 1 MiB, QD1: two FAST members
#   seq2   one sequential reader, 1 MiB, QD2: two FAST members
#   seq128 one sequential reader, 128 KiB, QD1: two FAST members
#   seqmix one sequential reader, 1 MiB, QD1: FAST+SLOW (for information; no target)
# Member shares are the bytes each member read, as counted by the array (raidkit stats).
# RAIDKIT=path picks the binary; TESTS="rand seq" limits the tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
RT="${1:-6}"
ROUNDS="${2:-2}"
RAIDKIT="${RAIDKIT:-target/release/raidkit}"
[ -x "$RAIDKIT" ] || cargo build --release -q -p raidkit
TESTS="${TESTS:-rand seq seq2 seq128 seqmix}"
FAST="slow=500us,qd=4,bw=100M"
SLOW="slow=3ms,qd=4,bw=17M"
W=$(mktemp -d /dev/shm/rk-mirror.XXXXXX)
export RAIDKIT_RUN_DIR="$W/run"
SERVER=
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; sleep 0.3; rm -rf "$W"; }
trap cleanup EXIT
MIB=256   # per member

wait_sock() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "no socket $1" >&2; return 1; }

# make NAME LEVEL NMEMBERS [create options...]: create an array over fresh tmpfs files and
# fill it (written through raidkit, without the model), so every read moves real data.
make() {
  local name=$1 level=$2 n=$3; shift 3
  local d="$W/$name" m=()
  mkdir -p "$d"
  for i in $(seq 0 $((n - 1))); do m+=("$d/m$i"); done
  "$RAIDKIT" create --level "$level" --raid-devices "$n" --size "${MIB}M" --assume-clean \
    --name "$name" "$@" "${m[@]}" >/dev/null
  "$RAIDKIT" serve --socket "$d/s.sock" --export a "${m[@]}" >/dev/null 2>&1 &
  SERVER=$!
  wait_sock "$d/s.sock"
  fio --name=fill --ioengine=nbd --uri="nbd+unix:///a?socket=$d/s.sock" --rw=write --bs=1M \
    --iodepth=8 --output=/dev/null >/dev/null 2>&1
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=
}

# measure NAME MODELS FIO-ARGS: serve NAME's members wrapped in MODELS (comma-free list
# separated by spaces, one per member), run fio, print "IOPS MiB/s share0/share1/...".
measure() {
  local name=$1 models=$2 spec=$3 d="$W/$1" specs=() i=0
  for mdl in $models; do specs+=("fault:$mdl:$d/m$i"); i=$((i + 1)); done
  rm -f "$d/r.sock"
  "$RAIDKIT" serve --read-only --workers 32 --socket "$d/r.sock" --export a "${specs[@]}" \
    >/dev/null 2>&1 &
  SERVER=$!
  wait_sock "$d/r.sock"
  # shellcheck disable=SC2086
  fio --name=b --ioengine=nbd --uri="nbd+unix:///a?socket=$d/r.sock" $spec --group_reporting \
    --time_based --runtime="$RT" --ramp_time=1 --output-format=json --output="$W/fio.json" \
    >/dev/null 2>&1
  "$RAIDKIT" stats --json >"$W/stats.json"
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=
  python3 - "$W/fio.json" "$W/stats.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["jobs"][0]["read"]
st = json.load(open(sys.argv[2]))[0]["members"]
tot = sum(m["read_bytes"] for m in st) or 1
print("%.0f %.1f %s" % (r["iops"], r["bw_bytes"] / 1048576,
      "/".join("%.0f" % (100 * m["read_bytes"] / tot) for m in st)))
EOF
}

RAND="--rw=randread --bs=4k --iodepth=32 --numjobs=4"
SEQ="--rw=read --bs=1M --iodepth=1"
SEQ2="--rw=read --bs=1M --iodepth=2"
SEQ128="--rw=read --bs=128k --iodepth=1"
# test:target:array:models (space-separated, one per member)
runs=()
for t in $TESTS; do
  case $t in
    rand)
      runs+=("rand:fast alone:one:$FAST")
      for a in raid1 n2 f2 o2; do runs+=("rand:$a ×2:${a}x2:$FAST $SLOW"); done
      runs+=("rand:fast pair alone (raid0):zero:$FAST $FAST")
      for a in n2 f2 o2; do runs+=("rand:$a ×4:${a}x4:$FAST $SLOW $FAST $SLOW"); done ;;
    seq | seq2 | seq128)
      runs+=("$t:fast alone:one:$FAST")
      for a in raid1 n2 f2 o2; do runs+=("$t:$a ×2:${a}x2:$FAST $FAST"); done ;;
    seqmix)
      runs+=("$t:fast alone:one:$FAST")
      for a in raid1 f2; do runs+=("$t:$a ×2:${a}x2:$FAST $SLOW"); done ;;
  esac
done

make one 1 1
make zero 0 2 --chunk 512K
for a in raid1 n2 f2 o2; do
  if [ $a = raid1 ]; then make ${a}x2 1 2; else make ${a}x2 10 2 --layout $a --chunk 512K; fi
done
for a in n2 f2 o2; do make ${a}x4 10 4 --layout $a --chunk 512K; done

declare -A RES
for round in $(seq "$ROUNDS"); do
  for r in "${runs[@]}"; do
    IFS=: read -r t label arr models <<<"$r"
    case $t in rand) spec=$RAND ;; seq | seqmix) spec=$SEQ ;; seq2) spec=$SEQ2 ;; seq128) spec=$SEQ128 ;; esac
    RES[$t:$label]+="$(measure "$arr" "$models" "$spec");"
  done
done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, ${RT}s × $ROUNDS rounds (median)"
echo
echo "| test | target | result | vs anchor | member read shares % |"
echo "|---|---|---|---|---|"
for t in $TESTS; do
  anchor=
  for r in "${runs[@]}"; do
    IFS=: read -r tt label arr models <<<"$r"
    [ "$tt" = "$t" ] || continue
    case $label in "fast pair alone (raid0)") anchor= ;; esac
    line=$(python3 - "$t" "$label" "${RES[$t:$label]}" "${anchor:-}" <<'EOF'
import sys, statistics
t, label, res, anchor = sys.argv[1:5]
rows = [x.split() for x in res.strip(";").split(";")]
iops = statistics.median(float(r[0]) for r in rows)
mibs = statistics.median(float(r[1]) for r in rows)
val = iops if t == "rand" else mibs
anc = float(anchor) if anchor else val
unit = "%.0f IOPS" % iops if t == "rand" else "%.1f MiB/s" % mibs
shares = " ; ".join(r[2] for r in rows)
print("%s|| %s | %s | %s | %.2f× | %s |" % (val, t, label, unit, val / anc, shares))
EOF
)
    [ -z "$anchor" ] && anchor=${line%%||*}
    echo "${line#*||}"
  done
done
