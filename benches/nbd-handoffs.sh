#!/usr/bin/env bash
# What an NBD server pays per request, beyond the request's own IO: CPU time, context
# switches (voluntary and not), and system calls, for 4 KiB random reads (RAID0, RAID10,
# RAID5) and 4 KiB random writes (RAID10), at QD1 and QD32, for one or more raidkit
# builds against nbdkit's file plugin on one tmpfs file, all in the same run. Rounds are
# interleaved: every round runs each build in turn on the same arrays (in reverse order in
# even rounds), and each cell of a build right after nbdkit ran that cell (target
# "nbdkit:BUILD"), so a build's ratio is to an anchor measured seconds before it.
#   benches/nbd-handoffs.sh ROUNDS name=binary [name=binary ...]
# e.g. benches/nbd-handoffs.sh 3 main=ab/raidkit-main new=target/release/raidkit
# RT = seconds measured per cell (default 3); CELLS limits
# the cells (default "r0-rr1 r0-rr32 r10-rr1 r10-rr32 r5-rr1 r5-rr32 r10-rw1 r10-rw32";
# nbdkit runs the same cells on its file). SIZE_MIB = data per array (default 512).
# Per cell: IOPS, and the server's CPU ticks (/proc/PID/stat) and voluntary / involuntary
# switches (/proc/PID/task/*/status) over RT seconds inside the fio run, per request;
# then (first PERF_ROUNDS rounds) a 2 s window of
#   perf stat -I 250 -e context-switches,syscalls:sys_enter_{futex,recvfrom,sendto,read,write,
#     poll,ppoll,pread64,pwrite64,sched_yield} -p SERVER
# in a second fio run, per member IO. fio's own CPU per request comes from its json.
# Prints one CSV line per cell and round, then medians per (target, cell).
# Needs root (or perf_event_paranoid ≤ -1) for the syscall tracepoints.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:?rounds}; shift
[ $# -ge 1 ] || { echo "name=binary arguments expected" >&2; exit 2; }
RT=${RT:-3}
SIZE_MIB=${SIZE_MIB:-512}
CELLS=${CELLS:-"r0-rr1 r0-rr32 r10-rr1 r10-rr32 r5-rr1 r5-rr32 r10-rw1 r10-rw32"}
W=$(mktemp -d /dev/shm/rk-hand.XXXXXX)
export RAIDKIT_RUN_DIR="$W/run"
mkdir -m 0700 "$RAIDKIT_RUN_DIR"
trap 'kill $(jobs -p) 2>/dev/null || true; sleep 0.5; rm -rf "$W"' EXIT
wait_sock() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; return 1; }
first=${1#*=}
EVENTS=context-switches
for s in futex recvfrom sendto read write poll ppoll pread64 pwrite64 sched_yield; do
  EVENTS+=",syscalls:sys_enter_$s"
done
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
switches() { # pid -> "voluntary involuntary" summed over its live threads
  cat /proc/"$1"/task/*/status 2>/dev/null \
    | awk '/^voluntary_ctxt/{v+=$2} /^nonvoluntary_ctxt/{n+=$2} END{print v+0, n+0}'
}
# fio_run SOCKET EXPORT CELL SECONDS: fio in the background (1 s of ramp first), FPID.
fio_run() {
  local rw qd
  case $3 in *-rr*) rw=randread ;; *-rw*) rw=randwrite ;; esac
  qd=${3##*-r[rw]}
  fio --name=b --ioengine=nbd --uri="nbd+unix:///$2?socket=$1" --rw=$rw --bs=4k \
      --iodepth="$qd" --size="${SIZE_MIB}M" --time_based --ramp_time=1 --runtime="$4" \
      --output-format=json --output="$W/fio.json" >/dev/null 2>&1 &
  FPID=$!
}
# measure TARGET CELL ROUND SOCKET EXPORT PID: one fio run with the server's CPU time and
# switches read from /proc inside it (IOPS × that window = its requests); then, in
# rounds up to PERF_ROUNDS (default 1), a second run with perf attached, its counts
# divided by the member IOs perf counted in the same intervals (perf slows the server, so
# fio's IOPS would not count its requests): 1 pread64 per 4 KiB read, 2 pwrite64 per
# RAID10 write, 1 for nbdkit.
measure() {
  local tgt=$1 cell=$2 round=$3 sock=$4 exp=$5 pid=$6
  local c0 s0 t0 c1 s1 t1
  fio_run "$sock" "$exp" "$cell" $((RT + 1))
  sleep 1.2
  c0=$(cpu_ticks "$pid"); s0=$(switches "$pid"); t0=$(date +%s.%N)
  sleep "$RT"
  c1=$(cpu_ticks "$pid"); s1=$(switches "$pid"); t1=$(date +%s.%N)
  wait "$FPID"
  cp "$W/fio.json" "$W/fio-clean.json"
  : > "$W/perf.csv"
  if [ "$round" -le "${PERF_ROUNDS:-1}" ]; then
    fio_run "$sock" "$exp" "$cell" 4
    sleep 1.2
    perf stat -I 250 -x, -o "$W/perf.csv" -e "$EVENTS" -p "$pid" -- sleep 2 2>/dev/null
    wait "$FPID"
  fi
  local per=1
  [[ $tgt != nbdkit* && $cell == *-rw* ]] && per=2
  python3 - "$W/fio-clean.json" "$W/perf.csv" "$c0" "$c1" "$s0" "$s1" "$t0" "$t1" "$per" \
      "$tgt" "$cell" "$round" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY' >> "$W/all.csv"
import json, os, sys
fj, pc, c0, c1, s0, s1, t0, t1, per, tgt, cell, rnd, load = sys.argv[1:]
j = json.load(open(fj))["jobs"][0]
d = j["read"] if j["read"]["total_ios"] > 0 else j["write"]
iops = d["iops"]
reqs = max(iops * (float(t1) - float(t0)), 1)
hz = os.sysconf("SC_CLK_TCK")
cpu_us = (int(c1) - int(c0)) / hz * 1e6 / reqs
v0, n0 = map(int, s0.split()); v1, n1 = map(int, s1.split())
# perf's 250 ms intervals after the first (attaching takes a while).
iv = {}
for line in open(pc):
    p = line.strip().split(",")
    if len(p) > 3 and p[0].strip()[:1].isdigit() and p[1].strip().isdigit():
        iv.setdefault(float(p[0]), {})[p[3].replace("syscalls:sys_enter_", "")] = int(p[1])
ev = {}
for t in sorted(iv)[1:]:
    for k, n in iv[t].items():
        ev[k] = ev.get(k, 0) + n
io = ev.get("pread64", 0) + ev.get("pwrite64", 0)
preqs = io / int(per)
fio_us = (j["usr_cpu"] + j["sys_cpu"]) / 100 * 1e6 / max(iops, 1)
keys = ("context-switches", "futex", "recvfrom", "read", "sendto", "write", "poll", "ppoll",
        "sched_yield", "pread64", "pwrite64")
cols = ["%.3f" % (ev.get(k, 0) / preqs) if preqs else "" for k in keys]
print(",".join([rnd, tgt, cell, "%.0f" % iops, "%.2f" % cpu_us, "%.2f" % fio_us,
               "%.3f" % ((v1 - v0) / reqs), "%.3f" % ((n1 - n0) / reqs)] + cols + [load]))
PY
}
# Arrays: 4 tmpfs members, 512 KiB chunk, SIZE_MIB of data, written in full (no holes).
truncate -s "${SIZE_MIB}M" "$W/one.img"
dd if=/dev/urandom of="$W/one.img" bs=1M count="$SIZE_MIB" conv=notrunc status=none
nbdkit -U "$W/k.sock" --exit-with-parent -f file "$W/one.img" & KPID=$!
wait_sock "$W/k.sock"
for l in 0 5 10; do
  per=$((SIZE_MIB / 2 + 8))
  [ $l = 0 ] && per=$((SIZE_MIB / 4 + 8))
  [ $l = 5 ] && per=$((SIZE_MIB / 3 + 8))
  mkdir -p "$W/r$l"
  "$first" create --level $l --raid-devices 4 --chunk 512K --size "${per}M" --assume-clean \
      "$W/r$l"/m{0,1,2,3} >/dev/null 2>&1
  "$first" serve --socket "$W/r$l/s.sock" --export a "$W/r$l"/m{0,1,2,3} >/dev/null 2>&1 & p=$!
  wait_sock "$W/r$l/s.sock"
  fio --name=fill --ioengine=nbd --uri="nbd+unix:///a?socket=$W/r$l/s.sock" --rw=write \
      --bs=1M --iodepth=16 --size="${SIZE_MIB}M" >/dev/null 2>&1
  kill $p; wait $p 2>/dev/null || true
done
echo "round,target,cell,iops,cpu_us,fio_cpu_us,vol_cs,invol_cs,cs,futex,recvfrom,read,sendto,write,poll,ppoll,sched_yield,pread64,pwrite64,load1" > "$W/all.csv"
echo "machine: $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
BUILDS=("$@")
for r in $(seq "$ROUNDS"); do
  # Builds in the given order in odd rounds, reversed in even ones (no build always last).
  order=("${BUILDS[@]}")
  if [ $((r % 2)) = 0 ]; then
    order=(); for ((i = ${#BUILDS[@]} - 1; i >= 0; i--)); do order+=("${BUILDS[i]}"); done
  fi
  for v in "${order[@]}"; do
    name=${v%%=*} bin=${v#*=}
    for l in 0 5 10; do
      [[ " $CELLS " == *" r$l-"* ]] || continue
      rm -f "$W/r$l/s.sock"
      "$bin" serve --socket "$W/r$l/s.sock" --export a "$W/r$l"/m{0,1,2,3} >/dev/null 2>&1 & p=$!
      wait_sock "$W/r$l/s.sock"
      for c in $CELLS; do
        [[ $c == "r$l-"* ]] || continue
        # The anchor runs the same cell just before, as in nbd-vs-anchors.sh: a ratio is
        # taken seconds apart, whatever the load does over the round.
        measure "nbdkit:$name" "$c" "$r" "$W/k.sock" "" "$KPID"
        measure "$name" "$c" "$r" "$W/r$l/s.sock" a "$p"
      done
      kill $p; wait $p 2>/dev/null || true
    done
  done
  echo "round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
cat "$W/all.csv"
[ -n "${CSV:-}" ] && cp "$W/all.csv" "$CSV"
python3 - "$W/all.csv" <<'PY'
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cells = list(dict.fromkeys(r["cell"] for r in rows))
tgts = list(dict.fromkeys(r["target"] for r in rows))
print()
print("medians over the rounds; per request: server CPU µs, fio CPU µs, context switches "
      "(perf), voluntary/involuntary (/proc), futex, recv (recvfrom+read), send (sendto+write), poll")
print("| cell | target | IOPS | × nbdkit (median of rounds) | CPU µs | fio µs | cs | vol / invol | futex | recv | send | poll |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for c in cells:
    for t in tgts:
        rs = [r for r in rows if r["cell"] == c and r["target"] == t]
        if not rs:
            continue
        def m(k, rs=rs):
            v = [float(r[k]) for r in rs if r[k] != ""]
            return st.median(v) if v else float("nan")
        ratios = []
        for r in rs:
            k = [x for x in rows if x["cell"] == c and x["target"] == "nbdkit:" + t and x["round"] == r["round"]]
            if k:
                ratios.append(float(r["iops"]) / float(k[0]["iops"]))
        rt = "%.2f× [%.2f–%.2f]" % (st.median(ratios), min(ratios), max(ratios)) if ratios else "–"
        rec, snd, pol = m("recvfrom") + m("read"), m("sendto") + m("write"), m("poll") + m("ppoll")
        print(f"| {c} | {t} | {m('iops'):.0f} | {rt} | {m('cpu_us'):.1f} | {m('fio_cpu_us'):.1f} | "
              f"{m('cs'):.2f} | {m('vol_cs'):.2f} / {m('invol_cs'):.2f} | {m('futex'):.2f} | {rec:.2f} | {snd:.2f} | {pol:.2f} |")
PY
