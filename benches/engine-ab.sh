#!/usr/bin/env bash
# Engine A/B: two raidkit builds run the same `raidkit bench io` workloads on throwaway
# arrays in /dev/shm, alternating (A, B, A, B ...) so load changes hit both alike; prints
# the median CPU time (task-clock, every thread, for a fixed amount of IO) and the median
# MiB/s of each, and B / A. CPU time for fixed work is steadier than throughput on a
# shared machine. Needs perf(1) for the CPU time (else only MiB/s).
#   A=path/to/raidkit B=path/to/raidkit benches/engine-ab.sh [REPEATS]   (default 7)
set -euo pipefail
REP="${1:-7}"
A="${A:?A=path of the base raidkit binary}"
B="${B:?B=path of the raidkit binary to compare}"
W=$(mktemp -d /dev/shm/rk-ab.XXXXXX)
trap 'rm -rf "$W"' EXIT
CASES=(
  "r5-seq1M|5:4:256M|--chunk 512K --rw write --bs 1M --iodepth 4 --size 128M"
  "r5-rand4K|5:4:256M|--chunk 512K --rw randwrite --bs 4K --iodepth 8 --size 8M"
  "r5-rand64K-48M|5:4:256M|--chunk 512K --rw randwrite --bs 64K --iodepth 8 --region 48M --size 64M"
  "r5-randread4K|5:4:256M|--chunk 512K --rw randread --bs 4K --iodepth 8 --size 32M"
  "r6-seq1M|6:5:256M|--chunk 512K --rw write --bs 1M --iodepth 4 --size 128M"
  "r6-full1536K|6:5:256M|--chunk 512K --rw write --bs 1536K --iodepth 4 --size 192M"
  "r6-rand4K|6:5:256M|--chunk 512K --rw randwrite --bs 4K --iodepth 8 --size 8M"
  "r1-seqread1M|1:2:256M|--rw read --bs 1M --iodepth 4 --size 256M"
  "r10-randwrite16K|10:4:256M|--chunk 64K --rw randwrite --bs 16K --iodepth 8 --size 64M"
  "r10-seqwrite4M|10:4:256M|--chunk 64K --rw write --bs 4M --iodepth 2 --size 256M"
)
OUT="$W/results.txt"
: > "$OUT"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq "$REP"); do
  for c in "${CASES[@]}"; do
    IFS='|' read -r name create spec <<<"$c"
    for which in A B; do
      bin=$A; [ "$which" = B ] && bin=$B
      # shellcheck disable=SC2086
      if command -v perf >/dev/null; then
        perf stat -x, -o "$W/stat" -e task-clock "$bin" bench io --create "$create" \
          --dir "$W" $spec --json > "$W/json"
        ms=$(awk -F, '/task-clock/{print $1}' "$W/stat")
      else
        "$bin" bench io --create "$create" --dir "$W" $spec --json > "$W/json"
        ms=0
      fi
      mib=$(python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["mib_s"])' "$W/json")
      echo "$name $which $ms $mib" | tee -a "$OUT" >&2
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$OUT" <<'PY'
import sys, statistics, collections
cpu = collections.defaultdict(list); mib = collections.defaultdict(list); names = []
for l in open(sys.argv[1]):
    n, w, ms, m = l.split()
    cpu[(n, w)].append(float(ms)); mib[(n, w)].append(float(m))
    if n not in names:
        names.append(n)
print("| workload | CPU ms A | CPU ms B | B / A | MiB/s A | MiB/s B | B / A |")
print("|---|---|---|---|---|---|---|")
for n in names:
    ca, cb = statistics.median(cpu[(n, "A")]), statistics.median(cpu[(n, "B")])
    ma, mb = statistics.median(mib[(n, "A")]), statistics.median(mib[(n, "B")])
    print(f"| {n} | {ca:.0f} | {cb:.0f} | {cb / ca if ca else 0:.2f} | {ma:.0f} | {mb:.0f} | {mb / ma:.2f} |")
PY
