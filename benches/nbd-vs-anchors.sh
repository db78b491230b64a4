#!/usr/bin/env bash
# NBD serving throughput: fio (ioengine=nbd) through a Unix socket against
#   - raidkit serve, RAID0/5/6/10 over 4 member files on tmpfs,
#   - nbdkit's file plugin serving one tmpfs file,
#   - qemu-nbd serving one tmpfs file,
# all in the same run, interleaved: every server is started once, every target is written
# in full, then each round runs each cell (workload) on every target back to back, so
# the ratio of a cell is taken seconds apart (no ramp: the fill is the warm-up). Prints a
# markdown table: the median over the rounds (MiB/s, IOPS) and the median of the per-round
# ratios against nbdkit, with their range when there is more than one round.
#   benches/nbd-vs-anchors.sh [RUNTIME_SECONDS] [ROUNDS]   (default 8 s, 1 round)
# RAIDKIT=path picks the binary; TARGETS="raid0 raid5" limits the raidkit levels run
# (the anchors always run, so ratios stay same-run); SIZE_MIB = data per target (default
# 1024); QEMU=0 leaves qemu-nbd out; CSV=file also writes every measurement
# (round,cell,target,mib_s,iops,cpu_us,load1). A second table gives the server's CPU time
# (user + system, from /proc/PID/stat) per request: steadier than throughput under load.
# Needs: fio with the nbd engine, nbdkit, qemu-nbd (tests/nbd/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
RT="${1:-8}"
ROUNDS="${2:-1}"
RAIDKIT="${RAIDKIT:-target/release/raidkit}"
[ -x "$RAIDKIT" ] || cargo build --release -q -p raidkit
W=$(mktemp -d /dev/shm/rk-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.5; rm -rf "$W"; }
trap cleanup EXIT
SIZE_MIB="${SIZE_MIB:-1024}"   # array data size target per target
jobs_spec=(
  "seqwrite:--rw=write --bs=1M --iodepth=16"
  "seqread:--rw=read --bs=1M --iodepth=16"
  "randwrite:--rw=randwrite --bs=4k --iodepth=32"
  "randread:--rw=randread --bs=4k --iodepth=32"
)
uri() { # target -> NBD URI
  case $1 in
    nbdkit) echo "nbd+unix:///?socket=$W/nbdkit.sock" ;;
    qemu-nbd) echo "nbd+unix:///q?socket=$W/qemu.sock" ;;
    *) echo "nbd+unix:///a?socket=$W/$1/s.sock" ;;
  esac
}
declare -A SPID
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }   # user + system, clock ticks
run_fio() { # target spec -> "MiB/s IOPS server-CPU-µs-per-request"
  local c0 c1
  c0=$(cpu_ticks "${SPID[$1]}")
  fio --name=b --ioengine=nbd --uri="$(uri "$1")" $2 \
      --time_based --runtime="$RT" --output-format=json --output="$W/fio.json" >/dev/null 2>&1
  c1=$(cpu_ticks "${SPID[$1]}")
  python3 -c 'import json,sys,os; j=json.load(sys.stdin)["jobs"][0]; r=j["read"]; w=j["write"]; d=r if r["io_bytes"]>0 else w
us = (int(sys.argv[2]) - int(sys.argv[1])) / os.sysconf("SC_CLK_TCK") * 1e6 / max(d["total_ios"], 1)
print("%.0f %.0f %.1f" % (d["bw_bytes"]/1048576, d["iops"], us))' "$c0" "$c1" < "$W/fio.json"
}
wait_sock() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "no socket $1" >&2; return 1; }
# Anchors: one tmpfs file of the same size.
truncate -s "${SIZE_MIB}M" "$W/one.img"
nbdkit -U "$W/nbdkit.sock" --exit-with-parent -f file "$W/one.img" & PIDS+=($!); SPID[nbdkit]=$!
wait_sock "$W/nbdkit.sock"
ANCHORS="nbdkit"
if [ "${QEMU:-1}" != 0 ]; then
  qemu-nbd -k "$W/qemu.sock" -f raw -x q --cache=none --aio=threads "$W/one.img" -t & PIDS+=($!); SPID[qemu-nbd]=$!
  wait_sock "$W/qemu.sock"
  ANCHORS="nbdkit qemu-nbd"
fi
TARGETS="${TARGETS:-raid0 raid5 raid6 raid10}"
for cfg in "raid0:0:" "raid5:5:" "raid6:6:" "raid10:10:"; do
  name=${cfg%%:*}; lvl=$(echo "$cfg" | cut -d: -f2)
  [[ " $TARGETS " == *" $name "* ]] || continue
  d="$W/$name"; mkdir -p "$d"
  per=$(( SIZE_MIB / 2 + 8 ))M
  [ "$lvl" = 0 ] && per=$(( SIZE_MIB / 4 + 8 ))M
  [ "$lvl" = 5 ] && per=$(( SIZE_MIB / 3 + 8 ))M
  "$RAIDKIT" create --level "$lvl" --raid-devices 4 --chunk 512K --size "$per" --assume-clean "$d"/m{0,1,2,3} >/dev/null 2>&1
  "$RAIDKIT" serve --socket "$d/s.sock" --export a "$d"/m{0,1,2,3} >/dev/null 2>&1 & PIDS+=($!); SPID[$name]=$!
  wait_sock "$d/s.sock"
done
ALL="$ANCHORS $TARGETS"
# Every target is fully written (no holes) before anything is measured, so no server can
# answer reads from sparse regions without moving data.
for t in $ALL; do
  fio --name=fill --ioengine=nbd --uri="$(uri "$t")" --rw=write --bs=1M --iodepth=16 \
      --output="$W/fill.out" >/dev/null 2>&1
done
: "${CSV:=$W/all.csv}"
[ -s "$CSV" ] || echo "round,cell,target,mib_s,iops,cpu_us,load1" > "$CSV"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq "$ROUNDS"); do
  for js in "${jobs_spec[@]}"; do
    n=${js%%:*}; spec=${js#*:}
    for t in $ALL; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      read -r bw iops us < <(run_fio "$t" "$spec")
      echo "$r,$n,$t,$bw,$iops,$us,$load" >> "$CSV"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$CSV" $ALL <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
targets = sys.argv[2:]
cells = ["seqwrite", "seqread", "randwrite", "randread"]
heads = ["seq write 1M QD16", "seq read 1M QD16", "rand write 4K QD32", "rand read 4K QD32"]
rounds = sorted({r["round"] for r in rows})
loads = [float(r["load1"]) for r in rows]
def v(r, c):
    return float(r["mib_s"] if c.startswith("seq") else r["iops"])
print(f"{len(rounds)} round(s), load average (1 min) at the cells: {min(loads):.1f}–{max(loads):.1f}")
print("| target | " + " | ".join(heads) + " |")
print("|---" * (len(heads) + 1) + "|")
for t in targets:
    row = f"| {t}"
    for c in cells:
        u = "MiB/s" if c.startswith("seq") else "IOPS"
        vals, ratios = [], []
        for rd in rounds:
            me = [v(r, c) for r in rows if (r["round"], r["cell"], r["target"]) == (rd, c, t)]
            an = [v(r, c) for r in rows if (r["round"], r["cell"], r["target"]) == (rd, c, "nbdkit")]
            if me and an and an[0] > 0:
                vals.append(me[0]); ratios.append(me[0] / an[0])
        if not vals:
            row += " | –"; continue
        cell = f" | {statistics.median(vals):.0f} {u} ({statistics.median(ratios):.2f}×"
        if len(ratios) > 1:
            cell += f" [{min(ratios):.2f}–{max(ratios):.2f}]"
        row += cell + ")"
    print(row + " |")
print()
print("server CPU per request, µs (median over the rounds)")
print("| target | " + " | ".join(heads) + " |")
print("|---" * (len(heads) + 1) + "|")
for t in targets:
    out = []
    for c in cells:
        us = [float(r["cpu_us"]) for r in rows if (r["cell"], r["target"]) == (c, t)]
        out.append(f"{statistics.median(us):.1f}" if us else "–")
    print(f"| {t} | " + " | ".join(out) + " |")
PY
