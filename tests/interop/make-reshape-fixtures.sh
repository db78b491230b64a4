#!/usr/bin/env bash
# make-reshape-fixtures.sh — regenerate the kernel-made mid-reshape fixtures in
# tests/fixtures/kernel-reshape/.
#
#   tests/interop/make-reshape-fixtures.sh [--only NAME[,NAME...]]... [--list] [--keep]
#
# For every configuration of the matrix below, the real Linux md driver and mdadm (run by
# mdref in a qemu VM, one VM per fixture) create the array with a pinned UUID, name,
# homehost (mdref) and clock, fill the WHOLE array with the tagged pattern of a per-fixture
# seed (rk-pattern --tagged), read it back, run a 'check' scrub (mismatch_cnt must be 0),
# then add members / shrink the array size as the reshape needs, lower the reshape speed
# (speed_limit_min = speed_limit_max = 200 KiB/s per member), start the reshape with `mdadm --grow`,
# wait until it has made progress (reshape_position moved; with a backup file: until mdadm
# has written a critical section to it), and stop the array with `mdadm --stop` in the
# middle of the reshape. Nothing is resumed: the member images hold
# the on-disk state at the stop. The backup file of a reshape that uses one is kept.
#
# Saved per fixture (tests/fixtures/kernel-reshape/<name>/): each member image compressed
# (xz -9 or zstd -19 --long, whichever is smaller), `mdadm --examine` of every member after
# the stop (examine-N.txt), `mdadm --detail` before the grow and at the stop, the backup
# file if any (backup.xz), and manifest.json:
#   fixture, description, metadata, seed, pattern ("tagged"), array_bytes (the array size
#   the pattern was written to, before the reshape), members [{file, image_bytes, examine}]
#   in device order (created members first, then added ones), backup (file name or null),
#   create (mdadm --create arguments), grow (the guest commands that started the reshape),
#   created_by.
# The reshape state itself (position, direction, geometries, offsets) is in the
# superblocks: tests read it from there and compare it with examine-N.txt.
#
# Then a second VM lets the kernel resume and finish the reshape on copies of the stopped
# images (`mdadm --assemble`, `mdadm --wait`), reads the array back against the pattern and
# scrubs it: finished/examine-N.txt and finished/detail.txt hold the finished superblocks
# (the reference for raidkit's own finish), and manifest.json's `resumed_by_kernel` the
# verdict (`pattern` ok/BAD, `mismatch_cnt`). On Linux 6.1 + mdadm 4.2 a stopped
# same-device-count forwards reshape resumes from a stale reshape_position and the pattern
# comes back BAD: that is recorded, not an error of this script.
#
# Needs: mdref (../shared/mdref/mdref-run beside the repo, or $RAIDKIT_MDREF), cargo, xz,
# zstd, jq. Time: about 20-40 s per fixture under TCG.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
MDREF=${RAIDKIT_MDREF:-$REPO/../shared/mdref/mdref-run}
OUT=$REPO/tests/fixtures/kernel-reshape
DATE=2024-01-01T00:00:00

# name | members created + added | MiB per member | mdadm --create arguments (level,
# layout, chunk, metadata; uuid/name/homehost are added) | guest commands starting the
# reshape ($MD is the array, $ADD the added members, $SIZE_KIB the component size in KiB,
# /tmp/md.backup the backup file when one is used) | when to stop: `position` (the
# recorded reshape_position moved) or `backup` (mdadm wrote a critical section to the
# backup file: a grow's critical section is at its start, a shrink's at its very end) |
# description
MATRIX='
r5-grow-4to5|4+1|8|--level=5 --layout=left-symmetric --chunk=64 --metadata=1.2|mdadm $MD --add $ADD; mdadm --grow $MD --raid-devices=5|position|RAID5 grow 4->5 devices, data offset moves down (no backup)
r6-grow-4to5|4+1|8|--level=6 --layout=left-symmetric --chunk=64 --metadata=1.2|mdadm $MD --add $ADD; mdadm --grow $MD --raid-devices=5|position|RAID6 grow 4->5 devices, data offset moves down
r5-shrink-5to4-m10-backup|5+0|8|--level=5 --layout=left-symmetric --chunk=64 --metadata=1.0|mdadm --grow $MD --array-size=$((SIZE_KIB * 3)); mdadm --grow $MD --raid-devices=4 --backup-file=/tmp/md.backup|position|RAID5 shrink 5->4 devices on 1.0 metadata with a backup file (not yet written: md needs it only for the last step), after --array-size (backwards, no offset change)
r5-chunk-64to128-5d|5+0|8|--level=5 --layout=left-symmetric --chunk=64 --metadata=1.2|mdadm --grow $MD --chunk=128|position|RAID5 5 devices chunk 64K->128K (same device count: the Linux 6.1 stop/resume corruption case)
r5-layout-ls-to-la-4d|4+0|8|--level=5 --layout=left-symmetric --chunk=64 --metadata=1.2|mdadm --grow $MD --layout=left-asymmetric|position|RAID5 4 devices layout left-symmetric->left-asymmetric
r5-layout-backwards-4d|4+0|8|--level=5 --layout=left-symmetric --chunk=64 --metadata=1.2 --data-offset=64K --size=6M|mdadm --grow $MD --layout=left-asymmetric|position|RAID5 layout change with no room before the data: the data offset moves up and the reshape runs backwards (RESHAPE_BACKWARDS)
r5-to-r6-4to5|4+1|8|--level=5 --layout=left-symmetric --chunk=64 --metadata=1.2|mdadm $MD --add $ADD; mdadm --grow $MD --level=6 --raid-devices=5|position|RAID5 4 devices -> RAID6 5 devices
r10-n2-grow-4to5|4+1|8|--level=10 --layout=n2 --chunk=64 --metadata=1.2|mdadm $MD --add $ADD; mdadm --grow $MD --raid-devices=5|position|RAID10 near=2 grow 4->5 devices, data offset moves down
r5-grow-3to4-m090|3+1|8|--level=5 --layout=left-symmetric --chunk=64 --metadata=0.90|mdadm $MD --add $ADD; mdadm --grow $MD --raid-devices=4 --backup-file=/tmp/md.backup|backup|RAID5 grow 3->4 devices on 0.90 metadata (minor version 91) with a backup file
'

ONLY=()
KEEP=0
while [ $# -gt 0 ]; do
	case "$1" in
	--only) IFS=, read -r -a more <<<"$2"; ONLY+=("${more[@]}"); shift 2 ;;
	--only=*) IFS=, read -r -a more <<<"${1#--only=}"; ONLY+=("${more[@]}"); shift ;;
	--list) echo "$MATRIX" | sed '/^$/d' | cut -d'|' -f1,7; exit 0 ;;
	--keep) KEEP=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "make-reshape-fixtures: unknown argument: $1" >&2; exit 2 ;;
	esac
done

selected() {
	[ ${#ONLY[@]} -eq 0 ] && return 0
	local o
	for o in "${ONLY[@]}"; do [ "$o" = "$1" ] && return 0; done
	return 1
}

for tool in xz zstd jq cargo; do
	command -v "$tool" >/dev/null || { echo "make-reshape-fixtures: $tool is required" >&2; exit 1; }
done
[ -x "$MDREF" ] || { echo "make-reshape-fixtures: mdref-run not found at $MDREF (set RAIDKIT_MDREF)" >&2; exit 1; }

echo "== building rk-pattern (release)"
(cd "$REPO" && cargo build --quiet --release -p raidkit-testkit --bin rk-pattern)
RKP=${CARGO_TARGET_DIR:-$REPO/target}/release/rk-pattern
case "$RKP" in /*) ;; *) RKP=$REPO/$RKP ;; esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rk-make-reshape.XXXXXX")
if [ "$KEEP" = 1 ]; then echo "== work directory: $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi

seed_of() { printf %s "$1" | cksum | cut -d' ' -f1; }
uuid_of() { printf '5ee1c0de:7e5a9e00:%08x:%08x' "$(seed_of "$1")" "$(printf %s "$1" | wc -c)"; }

# Guest script: $1 name, $2 seed, $3 members created, rest: create args. GROW from env.
GUEST='
exec 2>&1
name=$1 seed=$2 ncreate=$3
shift 3
o=/share/$name
mkdir -p "$o"
MD=/dev/md0
create="" ADD="" i=0
for d in $MDREF_DISKS; do
	if [ $i -lt "$ncreate" ]; then create="$create $d"; else ADD="$ADD $d"; fi
	i=$((i + 1))
done
if ! mdadm --create $MD --run --assume-clean --raid-devices="$ncreate" "$@" $create >"$o/create.log" 2>&1; then
	echo "RESULT $name create=FAIL"; cat "$o/create.log"; exit 1
fi
size=$(blockdev --getsize64 $MD)
./rk-pattern --tagged "$seed" "$size" | dd of=$MD bs=1M iflag=fullblock oflag=direct 2>/dev/null
echo 3 >/proc/sys/vm/drop_caches
if ./rk-pattern -c --tagged "$seed" "$size" <$MD >"$o/verify.log"; then pat=ok; else pat=BAD; fi
echo check >/sys/block/md0/md/sync_action
mdref-wait md0
mm=$(cat /sys/block/md0/md/mismatch_cnt)
echo "$size" >"$o/array_bytes"
mdadm --detail $MD >"$o/detail-before.txt"
SIZE_KIB=$(sed -n "s/.*Used Dev Size : \([0-9]*\).*/\1/p" "$o/detail-before.txt")
echo 200 >/proc/sys/dev/raid/speed_limit_min
echo 200 >/proc/sys/dev/raid/speed_limit_max
eval "$GROW" >"$o/grow.log" 2>&1 || { echo "RESULT $name grow=FAIL"; cat "$o/grow.log"; exit 1; }
p0=$(cat /sys/block/md0/md/reshape_position)
moved=no
want=$STOP
for t in $(seq 1 1500); do
	p=$(cat /sys/block/md0/md/reshape_position)
	if [ $want = backup ]; then
		# Stop while mdadm holds a critical section in the backup file.
		if [ -f /tmp/md.backup ] && head -c 16 /tmp/md.backup | grep -q md_backup_data; then
			moved=yes; break
		fi
	else
		done_=$(cut -d" " -f1 /sys/block/md0/md/sync_completed)
		if [ "$p" != none ] && [ "$p" != "$p0" ] && [ "$done_" != none ] && [ "$done_" -gt 0 ] 2>/dev/null; then
			moved=yes; break
		fi
	fi
	[ "$p" = none ] && [ $t -gt 20 ] && break
	sleep 0.1
done
cat /proc/mdstat >"$o/mdstat.txt"
mdadm --detail $MD >"$o/detail.txt"
# mdadm removes the backup file when the array stops after its critical section: copy it
# first (it holds the data of the section md is moving, or zeros before any was saved).
[ -f /tmp/md.backup ] && cp /tmp/md.backup "$o/backup"
mdadm --stop $MD >/dev/null 2>&1
i=0
for d in $MDREF_DISKS; do mdadm --examine "$d" >"$o/examine-$i.txt"; i=$((i + 1)); done
echo "RESULT $name pattern=$pat mismatch_cnt=$mm moved=$moved from=$p0 to=$p"
'

# Guest script 2: the kernel resumes the stopped reshape (on copies of the images) and
# finishes it: $1 name, $2 seed, $3 bytes of pattern written.
RESUME='
exec 2>&1
name=$1 seed=$2 bytes=$3
o=/share/$name/finished
mkdir -p "$o"
bk=""
[ -f /root/md.backup ] && bk="--backup-file=/root/md.backup"
ok=no
for opts in "$bk" "" "$bk --invalid-backup"; do
	echo "== mdadm --assemble $opts" >>"$o/assemble.log"
	if mdadm --assemble /dev/md0 $opts $MDREF_DISKS >>"$o/assemble.log" 2>&1; then ok=yes; break; fi
	mdadm --stop /dev/md0 >/dev/null 2>&1
done
if [ $ok = no ]; then
	echo "RESULT $name resume=FAIL"; cat "$o/assemble.log"; exit 0
fi
echo 500000 >/proc/sys/dev/raid/speed_limit_max
echo 100000 >/proc/sys/dev/raid/speed_limit_min
mdadm --wait /dev/md0
while [ "$(cat /sys/block/md0/md/reshape_position)" != none ]; do sleep 0.5; done
size=$(blockdev --getsize64 /dev/md0)
n=$bytes
[ "$size" -lt "$n" ] && n=$size
echo 3 >/proc/sys/vm/drop_caches
if head -c "$n" /dev/md0 | ./rk-pattern -c --tagged "$seed" "$n" >"$o/verify.log" 2>&1; then pat=ok; else pat=BAD; fi
echo check >/sys/block/md0/md/sync_action
mdref-wait md0
mm=$(cat /sys/block/md0/md/mismatch_cnt)
mdadm --detail /dev/md0 >"$o/detail.txt"
mdadm --stop /dev/md0 >/dev/null 2>&1
i=0
for d in $MDREF_DISKS; do mdadm --examine "$d" >"$o/examine-$i.txt"; i=$((i + 1)); done
echo "RESULT $name resumed pattern=$pat mismatch_cnt=$mm"
'

# Let the kernel resume and finish the fixture NAME (on the uncompressed images, already
# saved), keep its examine/detail/verify output in finished/ and its verdict in the
# manifest (`resumed_by_kernel`).
resume_fixture() { # NAME SEED
	local name=$1 seed=$2 dargs=() img out line fargs=()
	for img in "$WORK/img/$name"/*.img; do dargs+=(-d "$img"); done
	[ -f "$WORK/share/$name/backup" ] && fargs=(-f "$WORK/share/$name/backup:md.backup")
	out=$(printf '%s\n' "$RESUME" | "$MDREF" -q -t 600 --date "$DATE" -s "$WORK/share" -f "$RKP" \
		"${fargs[@]}" "${dargs[@]}" - "$name" "$seed" "$(cat "$WORK/share/$name/array_bytes")" 2>>"$WORK/stderr-$name.log") || true
	echo "$out" | grep -v '^$' | sed 's/^/   /'
	line=$(echo "$out" | grep "^RESULT $name resume" || true)
	[ -n "$line" ] || return 1
	mkdir -p "$OUT/$name/finished"
	cp "$WORK/share/$name/finished"/*.txt "$WORK/share/$name/finished"/*.log "$OUT/$name/finished/" 2>/dev/null || true
	local pat mm verdict
	if [[ "$line" == *"resume=FAIL"* ]]; then
		# mdadm could not assemble it (kept in finished/assemble.log).
		verdict='{assembled: false, files: "finished/"}'
		jq "$(printf '.resumed_by_kernel = %s' "$verdict")" "$OUT/$name/manifest.json" >"$OUT/$name/m.json"
	else
		pat=$(sed -n 's/.*pattern=\([A-Za-z]*\).*/\1/p' <<<"$line")
		mm=$(sed -n 's/.*mismatch_cnt=\([0-9]*\).*/\1/p' <<<"$line")
		jq --arg p "$pat" --argjson m "$mm" \
			'.resumed_by_kernel = {assembled: true, pattern: $p, mismatch_cnt: $m, files: "finished/"}' \
			"$OUT/$name/manifest.json" >"$OUT/$name/m.json"
	fi
	mv "$OUT/$name/m.json" "$OUT/$name/manifest.json"
}

finish_fixture() { # NAME CREATE GROW DESCRIPTION
	local name=$1 create=$2 grow=$3 desc=$4
	local src=$WORK/share/$name dst=$WORK/out/$name
	local meta seed
	meta=$(sed -n 's/.*--metadata=\([0-9.]*\).*/\1/p' <<<"$create")
	seed=$(seed_of "$name")
	mkdir -p "$dst"
	cp "$src/detail.txt" "$src/detail-before.txt" "$src/mdstat.txt" "$dst/"
	local members='[]' i=0 img xzf zsf file backup=null
	for img in "$WORK/img/$name"/*.img; do
		cp "$src/examine-$i.txt" "$dst/examine-$i.txt"
		xz -9 -T1 -c "$img" >"$dst/$i.img.xz"
		zstd -q -19 --long -c "$img" >"$dst/$i.img.zst"
		xzf=$(stat -c %s "$dst/$i.img.xz")
		zsf=$(stat -c %s "$dst/$i.img.zst")
		if [ "$xzf" -le "$zsf" ]; then rm "$dst/$i.img.zst"; file=$i.img.xz; else rm "$dst/$i.img.xz"; file=$i.img.zst; fi
		members=$(jq -c --arg f "$file" --argjson b "$(stat -c %s "$img")" \
			--arg e "examine-$i.txt" '. + [{file: $f, image_bytes: $b, examine: $e}]' <<<"$members")
		i=$((i + 1))
	done
	if [ -f "$src/backup" ]; then
		xz -9 -T1 -c "$src/backup" >"$dst/backup.xz"
		backup='"backup.xz"'
	fi
	jq -n --arg fixture "$name" --arg desc "$desc" --arg meta "$meta" --argjson seed "$seed" \
		--argjson bytes "$(cat "$src/array_bytes")" --argjson members "$members" \
		--argjson backup "$backup" --arg create "$create" \
		--arg grow "$grow" \
		'{fixture: $fixture, description: $desc, metadata: $meta, seed: $seed,
		  pattern: "tagged", array_bytes: $bytes, members: $members, backup: $backup,
		  backup_bytes: null, create: $create, grow: $grow,
		  created_by: "mdadm 4.2 / Linux 6.1 via mdref (tests/interop/make-reshape-fixtures.sh)"}' \
		>"$dst/manifest.json"
	if [ -f "$src/backup" ]; then
		jq --argjson n "$(stat -c %s "$src/backup")" '.backup_bytes = $n' "$dst/manifest.json" >"$dst/m.json"
		mv "$dst/m.json" "$dst/manifest.json"
	fi
	rm -rf "$OUT/$name.new"
	mv "$dst" "$OUT/$name.new"
	rm -rf "${OUT:?}/$name"
	mv "$OUT/$name.new" "$OUT/$name"
}

mkdir -p "$WORK/share" "$WORK/img" "$WORK/out" "$OUT"
BUILT=()
FAILED=()
while IFS='|' read -r name counts mib create grow stop desc; do
	[ -n "$name" ] || continue
	selected "$name" || continue
	ncreate=${counts%+*}
	nadd=${counts#*+}
	mkdir -p "$WORK/img/$name"
	dargs=()
	for ((i = 0; i < ncreate + nadd; i++)); do
		img=$WORK/img/$name/$i.img
		rm -f "$img"
		truncate -s "${mib}M" "$img"
		dargs+=(-d "$img")
	done
	cargs="$create --uuid=$(uuid_of "$name") --homehost=mdref"
	case "$create" in *--metadata=1*) cargs="$cargs --name=$name" ;; esac
	echo "== $name: $desc"
	t0=$(date +%s)
	set +e
	# shellcheck disable=SC2086
	out=$(printf '%s\n' "$GUEST" | "$MDREF" -q -t 600 --date "$DATE" -s "$WORK/share" -f "$RKP" \
		-e "GROW=$grow" -e "STOP=$stop" -l "$WORK/console-$name.log" "${dargs[@]}" - "$name" "$(seed_of "$name")" "$ncreate" $cargs \
		2>"$WORK/stderr-$name.log")
	status=$?
	set -e
	echo "$out" | grep -v '^$' | sed 's/^/   /'
	echo "   (exit $status, $(($(date +%s) - t0)) s)"
	line=$(echo "$out" | grep "^RESULT $name " || true)
	if [[ "$line" == *"pattern=ok mismatch_cnt=0 moved=yes"* ]] && finish_fixture "$name" "$cargs" "$grow" "$desc" &&
		resume_fixture "$name" "$(seed_of "$name")"; then
		BUILT+=("$name")
	else
		FAILED+=("$name")
		cat "$WORK/stderr-$name.log" >&2 || true
	fi
	rm -f "$WORK/img/$name"/*.img
done <<<"$MATRIX"

if [ ${#ONLY[@]} -eq 0 ]; then
	for d in "$OUT"/*/; do
		d=${d%/}
		echo "$MATRIX" | awk -F'|' -v n="${d##*/}" '$1 == n {f = 1} END {exit !f}' || { echo "== removing stale $d"; rm -rf "$d"; }
	done
fi
echo "== built ${#BUILT[@]} fixture(s); total size $(du -sh "$OUT" | cut -f1)"
if [ ${#FAILED[@]} -gt 0 ]; then
	echo "make-reshape-fixtures: FAILED: ${FAILED[*]}" >&2
	exit 1
fi
