#!/usr/bin/env bash
# Stripe cache sweep: fixed sizes (512 … 32768 entries, as admins set md's
# stripe_cache_size) against the automatic size, through the engine (`raidkit bench io`,
# a fresh array per point on tmpfs, flush inside the measured time).
#   benches/stripe-cache-sweep.sh [RUNTIME_SECONDS] [REPEATS]    (default 4 s, 2 repeats)
# Arrays: RAID5 4 members and RAID6 5 members, 512 KiB chunk (1.5 MiB stripes both),
# 512 MiB per member in /dev/shm. Workloads: sequential 1 MiB writes (not a full stripe),
# random 4 KiB and 64 KiB writes over 48 MiB (fits the larger caches) and over the whole
# array (larger than any cache). Every point runs REPEATS times, the sizes interleaved
# (512, 1024, …, auto, 512, …) so load changes hit all alike; the table gives the median
# MiB/s and auto / best fixed. RAIDKIT=path picks the binary; ONLY="seq-1M rand-4K-all"
# limits the workloads run; ARRAYS="raid6" limits the arrays.
set -euo pipefail
cd "$(dirname "$0")/.."
RT="${1:-4}"
REP="${2:-2}"
RAIDKIT="${RAIDKIT:-target/release/raidkit}"
[ -x "$RAIDKIT" ] || cargo build --release -q -p raidkit
W=$(mktemp -d /dev/shm/rk-sc.XXXXXX)
trap 'rm -rf "$W"' EXIT
SIZES="512 1024 2048 4096 8192 16384 32768 auto"
WORK=(
  "seq-1M:--rw write --bs 1M --iodepth 4"
  "rand-4K-48M:--rw randwrite --bs 4K --iodepth 8 --region 48M"
  "rand-64K-48M:--rw randwrite --bs 64K --iodepth 8 --region 48M"
  "rand-4K-all:--rw randwrite --bs 4K --iodepth 8"
  "rand-64K-all:--rw randwrite --bs 64K --iodepth 8"
)
OUT="$W/results.txt"
: > "$OUT"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for cfg in "raid5:5:4" "raid6:6:5"; do
  IFS=: read -r name lvl n <<<"$cfg"
  [[ -z "${ARRAYS:-}" || " $ARRAYS " == *" $name "* ]] || continue
  for w in "${WORK[@]}"; do
    wn=${w%%:*}; spec=${w#*:}
    [[ -z "${ONLY:-}" || " $ONLY " == *" $wn "* ]] || continue
    for r in $(seq "$REP"); do
      for s in $SIZES; do
        # shellcheck disable=SC2086
        mib=$("$RAIDKIT" bench io --create "$lvl:$n:512M" --chunk 512K --dir "$W" \
              --stripe-cache "$s" $spec --runtime "${RT}s" --json |
              python3 -c 'import json,sys; j=json.load(sys.stdin); c=j.get("stripe_cache") or {}; print("%.1f %s" % (j["mib_s"], c.get("size_entries","-")))')
        echo "$name $wn $s $mib" >> "$OUT"
        echo "$name $wn $s $mib" >&2
      done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$OUT" "$SIZES" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list); ends = collections.defaultdict(list)
for l in open(sys.argv[1]):
    lvl, w, s, mib, end = l.split()
    rows[(lvl, w, s)].append(float(mib)); ends[(lvl, w, s)].append(end)
sizes = sys.argv[2].split()
print("| array | workload | " + " | ".join(sizes) + " | auto size at end | auto / best fixed |")
print("|---|---|" + "---|" * (len(sizes) + 2))
seen = []
for (lvl, w, s) in rows:
    if (lvl, w) not in seen: seen.append((lvl, w))
for lvl, w in seen:
    med = {s: statistics.median(rows[(lvl, w, s)]) for s in sizes}
    best = max(v for s, v in med.items() if s != "auto")
    print(f"| {lvl} | {w} | " + " | ".join("%.0f" % med[s] for s in sizes)
          + f" | {ends[(lvl, w, 'auto')][-1]} | {med['auto']/best:.2f}× |")
PY
