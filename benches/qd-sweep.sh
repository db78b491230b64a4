#!/usr/bin/env bash
# Queue-depth and client sweep through NBD (issue 17): one client at QD 1..32 and 1..8
# clients at QD1, for each workload, against
#   - raw:     fio's io_uring engine on 4 raw tmpfs files (the member files' own speed),
#   - nbdkit:  nbdkit's file plugin on one tmpfs file,
#   - raidN:   `raidkit serve` of RAID N over 4 tmpfs members (512 KiB chunk),
# interleaved per point (raw, nbdkit, then every level, seconds apart), so each ratio is
# same-run. Every target holds about 512 MiB of data, written in full before the sweep.
#
#   benches/qd-sweep.sh run CSV        one round, appended to CSV (keep a locked run short:
#                                      call it once per round, under flock, see BENCHMARKS)
#   benches/qd-sweep.sh report CSV [SVG]
#                                      medians over the rounds as a markdown table (IOPS or
#                                      MiB/s and raidkit / nbdkit, raidkit / raw), and the
#                                      plot drawn with `raidkit bench plot` to SVG
# Environment: RT seconds per fio run (default 2), LEVELS (default "0 5"), WORKLOADS
# (randread randwrite read1m write1m; default "randread randwrite"), POINTS (default
# "q1 q2 q4 q8 q16 q32 c2 c4 c8"), RAIDKIT (binary, default target/release/raidkit).
# CSV columns: round,workload,point,target,iops,mib_s,load1 (load1 = 1-minute load average
# when the point started). Needs fio (with the nbd engine) and nbdkit.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: qd-sweep.sh run|report CSV [SVG]}
CSV=${2:?usage: qd-sweep.sh run|report CSV [SVG]}
RAIDKIT="$(realpath "${RAIDKIT:-target/release/raidkit}")"
[ -x "$RAIDKIT" ] || cargo build --release -q -p raidkit

report() {
  python3 - "$CSV" "${1:-}" "$RAIDKIT" <<'PY'
import csv, statistics, subprocess, sys, os, tempfile
path, svg, rk = sys.argv[1], sys.argv[2], sys.argv[3]
rows = list(csv.DictReader(open(path)))
wls = list(dict.fromkeys(r["workload"] for r in rows))
pts = list(dict.fromkeys(r["point"] for r in rows))
tgs = list(dict.fromkeys(r["target"] for r in rows))
rounds = sorted({r["round"] for r in rows})
loads = [float(r["load1"]) for r in rows]
seq = lambda w: not w.startswith("rand")
val = lambda r, w: float(r["mib_s"]) if seq(w) else float(r["iops"])
med = {}
for w in wls:
    for p in pts:
        for t in tgs:
            v = [val(r, w) for r in rows if (r["workload"], r["point"], r["target"]) == (w, p, t)]
            if v:
                med[w, p, t] = statistics.median(v)
label = lambda p: ("1 client × QD" + p[1:]) if p[0] == "q" else (p[1:] + " clients × QD1")
levels = [t for t in tgs if t.startswith("raid")]
print(f"rounds: {len(rounds)}; load average (1 min) during the points: {min(loads):.1f}–{max(loads):.1f}")
for w in wls:
    unit = "MiB/s" if seq(w) else "IOPS"
    print(f"\n{w} ({unit}, median of {len(rounds)} rounds)\n")
    head = "| clients × QD | " + " | ".join(tgs) + " | " + " | ".join(f"{l} / nbdkit | {l} / raw" for l in levels) + " |"
    print(head)
    print("|" + "---|" * (1 + len(tgs) + 2 * len(levels)))
    for p in pts:
        if (w, p, "nbdkit") not in med:
            continue
        cells = [f"{med.get((w, p, t), float('nan')):.0f}" for t in tgs]
        for l in levels:
            v = med.get((w, p, l), float("nan"))
            cells += [f"{v / med[w, p, 'nbdkit']:.2f}×", f"{v / med[w, p, 'raw']:.2f}×"]
        print(f"| {label(p)} | " + " | ".join(cells) + " |")
if svg:
    names = {"raw": "raw files (fio io_uring)", "nbdkit": "nbdkit file"}
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        out = csv.writer(f)
        out.writerow(["panel", "x", "series", "value"])
        for w in wls:
            what = ("1 MiB " + w[:-2] + " MiB/s" if seq(w) else "4 KiB " + w + " IOPS")
            for kind, sel in (("one client, QD", lambda p: p[0] == "q"),
                              ("clients at QD1", lambda p: p == "q1" or p[0] == "c")):
                for p in pts:
                    if not sel(p):
                        continue
                    for t in tgs:
                        if (w, p, t) in med:
                            v = med[w, p, t] * (1048576 if seq(w) else 1)
                            out.writerow([f"{what}: {kind}", p[1:], names.get(t, "raidkit " + t.upper()), v])
    unit = "bytes-per-sec" if all(seq(w) for w in wls) else "count"
    sub = f"medians of {len(rounds)} interleaved rounds · tmpfs · 2 vCPUs shared, load {min(loads):.1f}–{max(loads):.1f}"
    subprocess.run([rk, "bench", "plot", f.name, "--out", svg, "--unit", unit,
                    "--title", "NBD queue depth and clients: raidkit over 4 tmpfs members, nbdkit, raw files",
                    "--subtitle", sub, "--x", "queue depth / clients",
                    "--y", "throughput" if unit == "bytes-per-sec" else "IOPS"], check=True)
    os.unlink(f.name)
PY
}
if [ "$MODE" = report ]; then report "${3:-}"; exit 0; fi
[ "$MODE" = run ] || { echo "usage: qd-sweep.sh run|report CSV [SVG]" >&2; exit 2; }

RT="${RT:-2}"
LEVELS="${LEVELS:-0 5}"
WORKLOADS="${WORKLOADS:-randread randwrite}"
POINTS="${POINTS:-q1 q2 q4 q8 q16 q32 c2 c4 c8}"
W=$(mktemp -d /dev/shm/rk-qd.XXXXXX)
export RAIDKIT_RUN_DIR="$W/run"
mkdir -m 0700 "$RAIDKIT_RUN_DIR"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.3; rm -rf "$W"; }
trap cleanup EXIT
wait_sock() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; return 1; }
[ -s "$CSV" ] || echo "round,workload,point,target,iops,mib_s,load1" > "$CSV"
ROUND=$(( $(tail -n +2 "$CSV" | cut -d, -f1 | sort -n | tail -1 || echo 0) + 1 ))

# Targets, each ~512 MiB of data, written in full.
for i in 0 1 2 3; do dd if=/dev/urandom of="$W/raw$i" bs=1M count=128 status=none; done
dd if=/dev/urandom of="$W/one.img" bs=1M count=512 status=none
nbdkit -U "$W/k.sock" --exit-with-parent -f file "$W/one.img" & PIDS+=($!)
wait_sock "$W/k.sock"
for l in $LEVELS; do
  d="$W/raid$l"; mkdir -p "$d"
  case $l in 0) per=136 ;; 5) per=179 ;; 6|10|1) per=264 ;; *) echo "level $l?" >&2; exit 2 ;; esac
  "$RAIDKIT" create --level "$l" --raid-devices 4 --chunk 512K --size ${per}M --assume-clean \
      "$d"/m{0,1,2,3} >/dev/null 2>&1
  for f in "$d"/m{0,1,2,3}; do dd if=/dev/urandom of="$f" bs=1M seek=8 count=$((per - 8)) conv=notrunc status=none; done
  "$RAIDKIT" serve --socket "$d/s.sock" --export a "$d"/m{0,1,2,3} >"$d/serve.log" 2>&1 & PIDS+=($!)
  wait_sock "$d/s.sock"
done

spec() { # workload -> fio args
  case $1 in
    randread) echo "--rw=randread --bs=4k" ;;
    randwrite) echo "--rw=randwrite --bs=4k" ;;
    read1m) echo "--rw=read --bs=1M" ;;
    write1m) echo "--rw=write --bs=1M" ;;
    *) echo "unknown workload $1" >&2; exit 2 ;;
  esac
}
measure() { # target fio-args... -> "iops mib_s"
  local t=$1; shift
  local eng
  case $t in
    raw) eng=(--ioengine=io_uring --filename="$W/raw0:$W/raw1:$W/raw2:$W/raw3") ;;
    nbdkit) eng=(--ioengine=nbd --uri="nbd+unix:///?socket=$W/k.sock") ;;
    raid*) eng=(--ioengine=nbd --uri="nbd+unix:///a?socket=$W/$t/s.sock") ;;
  esac
  fio --name=b "${eng[@]}" "$@" --group_reporting --time_based --runtime="$RT" \
      --output-format=json --output="$W/fio.json" >/dev/null 2>&1
  python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"]
io=sum(x["read"]["iops"]+x["write"]["iops"] for x in j)
bw=sum(x["read"]["bw_bytes"]+x["write"]["bw_bytes"] for x in j)
print("%.0f %.1f" % (io, bw/1048576))' "$W/fio.json"
}
echo "round $ROUND: load before $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for wl in $WORKLOADS; do
  for p in $POINTS; do
    if [[ $p == c* ]]; then q=(--iodepth=1 --numjobs="${p#c}"); else q=(--iodepth="${p#q}"); fi
    for t in raw nbdkit $(for l in $LEVELS; do echo "raid$l"; done); do
      load=$(cut -d' ' -f1 /proc/loadavg)
      # shellcheck disable=SC2046
      read -r iops mib < <(measure "$t" $(spec "$wl") "${q[@]}")
      echo "$ROUND,$wl,$p,$t,$iops,$mib,$load" >> "$CSV"
    done
  done
done
echo "round $ROUND: load after $(cut -d' ' -f1-3 /proc/loadavg)" >&2
