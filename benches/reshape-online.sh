#!/usr/bin/env bash
# reshape-online.sh — an online reshape under client load (issue 15): a served RAID6 4->5
# (`raidkit grow NAME --add d4 --raid-devices 5`) while fio runs a mixed workload through
# NBD. Reported side by side, per round:
#   anchor   the fio mix on the same array before the reshape (no reshape running)
#   during   the same fio mix while the reshape runs, and the reshape's own speed meanwhile
#            (array data moved per second, from progress samples taken while it runs)
#   alone    the reshape's speed with no client IO (its first ALONE seconds, default 1.5)
# Members are files on tmpfs, fully allocated.
#
#   benches/reshape-online.sh [ROUNDS] [MEMBER_SIZE] [FIO_SECONDS]   (defaults: 2, 256M, 10)
#   RAIDKIT=target/release/raidkit DIR=/dev/shm benches/reshape-online.sh
# FIO_MIX (default "randrw, rwmixread=70, bs 4k/64k split 50/50, QD8") is fio's options.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
SIZE=${2:-256M}
RT=${3:-10}
ALONE=${ALONE:-1.5} # seconds the reshape runs alone before the fio mix starts
RAIDKIT=${RAIDKIT:-target/release/raidkit}
[ -x "$RAIDKIT" ] || cargo build --release -q -p raidkit
RAIDKIT=$(realpath "$RAIDKIT")
FIO_MIX=${FIO_MIX:---rw=randrw --rwmixread=70 --bssplit=4k/50:64k/50 --iodepth=8}
W=$(mktemp -d "${DIR:-/dev/shm}/rk-reshape-online.XXXXXX")
export RAIDKIT_RUN_DIR="$W/run"
SERVER=
cleanup() {
	[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true
	sleep 0.3
	rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/run" "$W/tpl"
cd "$W"
for i in 0 1 2 3 4; do head -c "$(numfmt --from=iec "$SIZE")" /dev/zero >tpl/d$i; done
(cd tpl && "$RAIDKIT" create --level 6 --raid-devices 4 --chunk 512 --metadata 1.2 \
	--name bench --homehost none d0 d1 d2 d3 >/dev/null 2>&1)
bytes=$("$RAIDKIT" detail --json tpl/d0 tpl/d1 tpl/d2 tpl/d3 | sed -n 's/.*"array_bytes": \([0-9]*\).*/\1/p')
head -c "$bytes" /dev/urandom >data
(cd tpl && "$RAIDKIT" import --input ../data d0 d1 d2 d3 >/dev/null 2>&1)
rm data

wait_sock() {
	for _ in $(seq 400); do
		python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])" "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "no server on $1" >&2
	return 1
}
fio_mibs() { # client MiB/s (reads + writes) of the mix for RT seconds
	# shellcheck disable=SC2086
	fio --name=t --ioengine=nbd --uri="nbd+unix:///a?socket=$W/a.sock" $FIO_MIX \
		--size="$((bytes / 2))" --time_based --runtime="$RT" --output-format=json 2>"$W/fio.err" |
		python3 -c "import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index('{'):])['jobs'][0]; print(f\"{(j['read']['bw_bytes']+j['write']['bw_bytes'])/1048576:.1f}\")"
}
done_sectors() { # the reshape's progress (sectors), or "none"
	"$RAIDKIT" status --json | python3 -c "import json,sys; r=json.load(sys.stdin)[0].get('reshape'); print(r['done_sectors'] if r else 'none')"
}
now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }

echo "RAID6 4->5 online, members of $SIZE on ${DIR:-/dev/shm}, fio ${RT} s: $FIO_MIX; $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
printf '| round | client alone MiB/s | client during reshape MiB/s (ratio) | reshape during client MiB/s | reshape alone MiB/s |\n|---|---|---|---|---|\n'
for r in $(seq 1 "$ROUNDS"); do
	rm -f d*
	cp --sparse=never tpl/* .
	"$RAIDKIT" serve --socket "$W/a.sock" --export a d0 d1 d2 d3 >/dev/null 2>"$W/serve.log" &
	SERVER=$!
	wait_sock "$W/a.sock"
	anchor=$(fio_mibs)
	"$RAIDKIT" grow a --add "$W/d4" --raid-devices 5 >/dev/null
	# Progress samples "time sectors" every 0.2 s while the reshape runs.
	(while p=$(done_sectors) && [ "$p" != none ]; do echo "$(now) $p"; sleep 0.2; done) >"$W/samples" &
	SAMPLER=$!
	ta=$(now)
	sleep "$ALONE"
	tb=$(now)
	during=$(fio_mibs)
	tc=$(now)
	wait "$SAMPLER" || true
	rate() { # MiB/s of reshape progress between two times, from the samples inside them
		awk -v a="$1" -v b="$2" '$1 >= a && $1 <= b { if (!n++) { t0 = $1; s0 = $2 } t1 = $1; s1 = $2 }
			END { if (n < 2) print "n/a"; else printf "%.1f", (s1 - s0) * 512 / 1048576 / (t1 - t0) }' "$W/samples"
	}
	rs_alone=$(rate "$ta" "$tb")
	rs_during=$(rate "$tb" "$tc")
	last=$(tail -1 "$W/samples" | cut -d' ' -f1)
	if awk -v l="$last" -v c="$tc" 'BEGIN { exit !(l < c - 0.5) }'; then
		echo "round $r: the reshape finished before the fio run did, so the client figure mixes both; use larger members or a shorter FIO_SECONDS" >&2
	fi
	printf '| %d | %.1f | %.1f (%.2f×) | %s | %s |\n' "$r" "$anchor" "$during" "$(calc "$during / $anchor")" "$rs_during" "$rs_alone"
	kill "$SERVER"
	wait "$SERVER" 2>/dev/null || true
	SERVER=
done
