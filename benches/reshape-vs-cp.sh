#!/usr/bin/env bash
# reshape-vs-cp.sh — offline reshape throughput against the physical work (issue 15):
# a RAID6 4->5 grow (`raidkit grow ... --add d4 --raid-devices 5`) on tmpfs members, and
# in the same run, alternating, `cp` of the same five member files (which reads and
# writes the same bytes). Prints each run and the median of the ratio cp time / reshape
# time (>= 0.7 is the issue's bar).
#
#   benches/reshape-vs-cp.sh [REPEATS] [MEMBER_SIZE]     (defaults: 3, 256M)
#   RAIDKIT=target/release/raidkit DIR=/dev/shm benches/reshape-vs-cp.sh 5 512M
set -euo pipefail

REPEATS=${1:-3}
SIZE=${2:-256M}
RAIDKIT=${RAIDKIT:-target/release/raidkit}
BASE=${DIR:-/dev/shm}
[ -x "$RAIDKIT" ] || { echo "build it first: cargo build --release -p raidkit" >&2; exit 1; }
RAIDKIT=$(cd "$(dirname "$RAIDKIT")" && pwd)/$(basename "$RAIDKIT")
W=$(mktemp -d "$BASE/rk-reshape-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W"
mkdir tpl run copy
# Every byte of every member allocated (a sparse file would flatter cp).
for i in 0 1 2 3 4; do head -c "$(numfmt --from=iec "$SIZE")" /dev/zero >tpl/d$i; done
(cd tpl && "$RAIDKIT" create --level 6 --raid-devices 4 --chunk 512 --metadata 1.2 \
	--name bench --homehost none d0 d1 d2 d3 >/dev/null 2>&1)
bytes=$("$RAIDKIT" detail --json tpl/d0 tpl/d1 tpl/d2 tpl/d3 | sed -n 's/.*"array_bytes": \([0-9]*\).*/\1/p')
head -c "$bytes" /dev/urandom >data
(cd tpl && "$RAIDKIT" import --input ../data d0 d1 d2 d3 >/dev/null 2>&1)
rm data
member_bytes=$(( $(stat -c %s tpl/d0) * 5 ))
echo "RAID6 4->5, members of $SIZE on $BASE ($((member_bytes >> 20)) MiB in the five member files), $REPEATS repeats, $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
ratios=()
now() { date +%s.%N; }
for r in $(seq 1 "$REPEATS"); do
	rm -f run/* copy/*
	cp --sparse=never tpl/* run/
	t0=$(now)
	cp --sparse=never run/d0 run/d1 run/d2 run/d3 run/d4 copy/
	t1=$(now)
	(cd run && "$RAIDKIT" grow d0 d1 d2 d3 --add d4 --raid-devices 5 2>/dev/null)
	t2=$(now)
	(cd run && "$RAIDKIT" check d0 d1 d2 d3 d4 2>&1 | grep -q ': 0 mismatched range(s)') || { echo "check failed" >&2; exit 1; }
	calc() { awk "BEGIN { print $1 }"; }
	cp_s=$(calc "$t1 - $t0")
	rs_s=$(calc "$t2 - $t1")
	ratio=$(calc "$cp_s / $rs_s")
	ratios+=("$ratio")
	printf 'run %d: cp %.2f s (%.0f MiB/s), reshape %.2f s (%.0f MiB/s), reshape/cp rate %.2f\n' "$r" \
		"$cp_s" "$(calc "$member_bytes / 1048576 / $cp_s")" \
		"$rs_s" "$(calc "$member_bytes / 1048576 / $rs_s")" "$ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
printf 'median reshape/cp rate: %.2f\n' "$median"
