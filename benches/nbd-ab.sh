#!/usr/bin/env bash
# A/B of two raidkit builds serving over NBD, interleaved in one run (A, B, A, B, ...),
# through fio's nbd engine over a Unix socket; nbdkit's file plugin on one tmpfs file runs
# in each round as the anchor. Prints the median of each cell (and the range over the
# rounds) and B/A of the medians; then the server's CPU time per request (user+system
# from /proc/PID/stat over each fio run, ramp included, divided by the requests fio
# counted), which a shared, loaded machine disturbs far less than throughput.
#   A=path/to/old/raidkit B=target/release/raidkit benches/nbd-ab.sh [ROUNDS] [SECONDS]
# LEVELS="0 5" picks the RAID levels (4 tmpfs members, 512 KiB chunk, ~1 GiB of data).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"; RT="${2:-5}"
A="${A:?set A=path to the baseline raidkit binary}"
B="${B:-target/release/raidkit}"
LEVELS="${LEVELS:-0 5}"
W=$(mktemp -d /dev/shm/rk-ab.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; sleep 0.5; rm -rf "$W"' EXIT
jobs_spec=(
  "seqwrite:--rw=write --bs=1M --iodepth=16"
  "seqread:--rw=read --bs=1M --iodepth=16"
  "randwrite:--rw=randwrite --bs=4k --iodepth=32"
  "randread:--rw=randread --bs=4k --iodepth=32"
)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run_fio() { # socket export spec server-pid -> "MiB/s IOPS server-CPU-us-per-request"
  local t0 t1; t0=$(cpu_ticks "$4")
  fio --name=b --ioengine=nbd --uri="nbd+unix:///$2?socket=$1" $3 \
      --time_based --runtime="$RT" --ramp_time=1 --output-format=json --output="$W/fio.json" >/dev/null 2>&1
  t1=$(cpu_ticks "$4")
  python3 -c 'import json,sys,os; j=json.load(sys.stdin)["jobs"][0]; r=j["read"]; w=j["write"]; d=r if r["io_bytes"]>0 else w; hz=os.sysconf("SC_CLK_TCK"); print("%.0f %.0f %.2f" % (d["bw_bytes"]/1048576, d["iops"], (int(sys.argv[2])-int(sys.argv[1]))/hz*1e6/max(d["total_ios"],1)))' "$t0" "$t1" < "$W/fio.json"
}
wait_sock() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "no socket $1" >&2; return 1; }
truncate -s 1G "$W/one.img"
nbdkit -U "$W/k.sock" --exit-with-parent -f file "$W/one.img" & KPID=$!; wait_sock "$W/k.sock"
for l in $LEVELS; do
  per=$(( 1024 / 2 + 8 ))M
  [ "$l" = 0 ] && per=$(( 1024 / 4 + 8 ))M
  [ "$l" = 5 ] && per=$(( 1024 / 3 + 8 ))M
  mkdir -p "$W/r$l"
  "$B" create --level "$l" --raid-devices 4 --chunk 512K --size "$per" --assume-clean "$W/r$l"/m{0,1,2,3} >/dev/null
done
: > "$W/results"
for round in $(seq "$ROUNDS"); do
  for js in "${jobs_spec[@]}"; do
    echo "nbdkit ${js%%:*} $(run_fio "$W/k.sock" "" "${js#*:}" "$KPID")" >> "$W/results"
  done
  for l in $LEVELS; do
    for side in A B; do
      bin=${!side}
      "$bin" serve --socket "$W/s.sock" --export a "$W/r$l"/m{0,1,2,3} >/dev/null 2>&1 & SPID=$!
      wait_sock "$W/s.sock"
      for js in "${jobs_spec[@]}"; do
        echo "raid$l-$side ${js%%:*} $(run_fio "$W/s.sock" a "${js#*:}" "$SPID")" >> "$W/results"
      done
      kill %% 2>/dev/null || true; wait %% 2>/dev/null || true
      for _ in $(seq 50); do [ -S "$W/s.sock" ] || break; sleep 0.1; done
    done
  done
  echo "round $round done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
python3 - "$W/results" "$LEVELS" <<'EOF'
import sys, statistics
rows, cpu = {}, {}
for line in open(sys.argv[1]):
    t, job, bw, iops, us = line.split()
    rows.setdefault((t, job), []).append(float(bw) if job.startswith("seq") else float(iops))
    cpu.setdefault((t, job), []).append(float(us))
jobs = ["seqwrite", "seqread", "randwrite", "randread"]
targets = ["nbdkit"] + [f"raid{l}-{s}" for l in sys.argv[2].split() for s in "AB"]
def table(title, unit, data):
    med = {k: statistics.median(v) for k, v in data.items()}
    print(f"\n{title}\n")
    print(f"| target | seq write 1M QD16 ({unit[0]}) | seq read 1M QD16 ({unit[0]}) | rand write 4K QD32 ({unit[1]}) | rand read 4K QD32 ({unit[1]}) |")
    print("|---|---|---|---|---|")
    for t in targets:
        cells = []
        for j in jobs:
            v = med[(t, j)]
            spread = f"{min(data[(t, j)]):.4g}–{max(data[(t, j)]):.4g}"
            if t.endswith("-B"):
                a = med[(t[:-1] + "A", j)]
                cells.append(f"{v:.4g} [{spread}] (B/A {v / a:.2f})")
            else:
                cells.append(f"{v:.4g} [{spread}]")
        print(f"| {t} | " + " | ".join(cells) + " |")
table("Throughput: median [range over rounds]", ("MiB/s", "IOPS"), rows)
table("Server CPU per request, µs: median [range]", ("µs", "µs"), cpu)
EOF
