#!/usr/bin/env bash
# make-fixtures.sh — regenerate the kernel-made fixtures in tests/fixtures/kernel/.
#
#   tests/interop/make-fixtures.sh [--only NAME[,NAME...]]... [--list] [--keep]
#
# For every configuration of the matrix below, the real Linux md driver and mdadm (run
# by mdref in a qemu VM, batched up to 24 disks per VM) create the array with a pinned
# UUID, name, homehost (mdref) and clock, wait for the initial sync, fill the WHOLE array
# with the tagged pattern of a per-fixture seed (rk-pattern --tagged), read it back,
# run a 'check' scrub (mismatch_cnt must be 0), save `mdadm --detail` and, after the
# stop, `mdadm --examine` of every member. On the host every member image is compressed
# (xz -9 or zstd -19 --long, whichever is smaller) into tests/fixtures/kernel/<name>/,
# with manifest.json (see crates/raidkit-testkit/src/fixtures.rs for the fields).
#
# Idempotent: each run rebuilds the selected fixtures from scratch and replaces their
# directories (superblock times may differ by the VM's boot seconds; contents,
# UUIDs, seeds and geometry are the same). Without --only, fixture directories that are
# no longer in the matrix are removed. --list prints the matrix. --keep keeps the work
# directory (uncompressed images, logs).
#
# Needs: mdref (../shared/mdref/mdref-run beside the repo, or $RAIDKIT_MDREF), cargo,
# xz, zstd, jq. Time: about 7 minutes for the whole matrix (55 arrays, 10 VMs) on 2
# cores under TCG (≈ 10-20 s per VM, plus ≈ 0.5 s of xz per member); --only NAME: ≈ 15 s.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
MDREF=${RAIDKIT_MDREF:-$REPO/../shared/mdref/mdref-run}
OUT=$REPO/tests/fixtures/kernel
DATE=2024-01-01T00:00:00
MAX_DISKS=24

# name  level  layout  chunk_KiB  metadata  bitmap  member sizes in MiB (NxS or a,b,c)
# ('-' = not given). Member images: 3 MiB normally (1 MiB data offset for 1.1/1.2),
# 4 MiB for 512K chunks, 8 MiB for 1M chunks.
MATRIX='
r5-la-4d-64k        5  left-asymmetric     64   1.2  none      4x3
r5-ra-4d-16k        5  right-asymmetric    16   1.2  none      4x3
r5-ls-4d-128k       5  left-symmetric      128  1.2  none      4x3
r5-rs-5d-8k         5  right-symmetric     8    1.2  none      5x3
r5-pf-3d-4k         5  parity-first        4    1.2  none      3x3
r5-pl-3d-64k        5  parity-last         64   1.2  none      3x3
r5-ls-2d-64k        5  left-symmetric      64   1.2  none      2x3
r5-ls-3d-512k       5  left-symmetric      512  1.2  none      3x4
r5-ls-3d-1m         5  left-symmetric      1024 1.2  none      3x8
r5-ls-3d-64k-m090   5  left-symmetric      64   0.90 none      3x3
r5-ls-3d-64k-m10    5  left-symmetric      64   1.0  none      3x3
r5-ls-3d-64k-m11    5  left-symmetric      64   1.1  none      3x3
r5-ls-3d-64k-bitmap 5  left-symmetric      64   1.2  internal  3x3
r6-la-4d-64k        6  left-asymmetric     64   1.2  none      4x3
r6-ra-5d-16k        6  right-asymmetric    16   1.2  none      5x3
r6-ls-4d-64k        6  left-symmetric      64   1.2  none      4x3
r6-ls-8d-8k         6  left-symmetric      8    1.2  none      8x3
r6-rs-5d-128k       6  right-symmetric     128  1.2  none      5x3
r6-pf-4d-32k        6  parity-first        32   1.2  none      4x3
r6-pl-4d-64k        6  parity-last         64   1.2  none      4x3
r6-ddfzr-5d-64k     6  ddf-zero-restart    64   1.2  none      5x3
r6-ddfnr-6d-16k     6  ddf-N-restart       16   1.2  none      6x3
r6-ddfnc-4d-4k      6  ddf-N-continue      4    1.2  none      4x3
r6-la6-5d-64k       6  left-asymmetric-6   64   1.2  none      5x3
r6-ra6-5d-8k        6  right-asymmetric-6  8    1.2  none      5x3
r6-ls6-4d-64k       6  left-symmetric-6    64   1.2  none      4x3
r6-rs6-5d-16k       6  right-symmetric-6   16   1.2  none      5x3
r6-pf6-4d-64k       6  parity-first-6      64   1.2  none      4x3
r10-n2-3d-64k       10 n2                  64   1.2  none      3x3
r10-n2-4d-16k       10 n2                  16   1.2  none      4x3
r10-n2-4d-64k-bitmap 10 n2                 64   1.2  internal  4x3
r10-n3-3d-8k        10 n3                  8    1.2  none      3x3
r10-n3-5d-64k       10 n3                  64   1.2  none      5x3
r10-f2-3d-64k       10 f2                  64   1.2  none      3x3
r10-f2-4d-512k      10 f2                  512  1.2  none      4x4
r10-f2-5d-16k       10 f2                  16   1.2  none      5x3
r10-f3-4d-64k       10 f3                  64   1.2  none      4x3
r10-o2-3d-64k       10 o2                  64   1.2  none      3x3
r10-o2-4d-128k      10 o2                  128  1.2  none      4x3
r10-o2-5d-4k        10 o2                  4    1.2  none      5x3
r10-o3-4d-64k       10 o3                  64   1.2  none      4x3
r4-4d-64k           4  -                   64   1.2  none      4x3
r1-2d               1  -                   -    1.2  none      2x3
r1-3d               1  -                   -    1.2  none      3x3
r1-2d-m090          1  -                   -    0.90 none      2x3
r1-2d-m10           1  -                   -    1.0  none      2x3
r1-2d-m11           1  -                   -    1.1  none      2x3
r1-2d-bitmap        1  -                   -    1.2  internal  2x3
r1-3d-m10-bitmap    1  -                   -    1.0  internal  3x3
r0-4d-64k           0  -                   64   1.2  none      4x3
r0-8d-4k            0  -                   4    1.2  none      8x3
r0-3d-1m            0  -                   1024 1.2  none      3x8
r0-zones-original   0  original            16   1.2  none      3,4,5,5
r0-zones-alternate  0  alternate           16   1.2  none      3,4,5,5
linear-3d           linear -               -    1.2  none      3,4,5
'

ONLY=()
KEEP=0
while [ $# -gt 0 ]; do
	case "$1" in
	--only) IFS=, read -r -a more <<<"$2"; ONLY+=("${more[@]}"); shift 2 ;;
	--only=*) IFS=, read -r -a more <<<"${1#--only=}"; ONLY+=("${more[@]}"); shift ;;
	--list) echo "$MATRIX" | sed '/^$/d'; exit 0 ;;
	--keep) KEEP=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "make-fixtures: unknown argument: $1" >&2; exit 2 ;;
	esac
done

selected() { # NAME -> 0 if it is to be built
	[ ${#ONLY[@]} -eq 0 ] && return 0
	local o
	for o in "${ONLY[@]}"; do [ "$o" = "$1" ] && return 0; done
	return 1
}

for tool in xz zstd jq cargo; do
	command -v "$tool" >/dev/null || { echo "make-fixtures: $tool is required" >&2; exit 1; }
done
[ -x "$MDREF" ] || { echo "make-fixtures: mdref-run not found at $MDREF (set RAIDKIT_MDREF)" >&2; exit 1; }
if [ ${#ONLY[@]} -gt 0 ]; then
	for o in "${ONLY[@]}"; do
		echo "$MATRIX" | awk -v n="$o" '$1 == n {f = 1} END {exit !f}' ||
			{ echo "make-fixtures: no fixture named $o (see --list)" >&2; exit 2; }
	done
fi

echo "== building rk-pattern (release)"
(cd "$REPO" && cargo build --quiet --release -p raidkit-testkit --bin rk-pattern)
RKP=${CARGO_TARGET_DIR:-$REPO/target}/release/rk-pattern
case "$RKP" in /*) ;; *) RKP=$REPO/$RKP ;; esac
[ -x "$RKP" ] || { echo "make-fixtures: $RKP was not built" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rk-make-fixtures.XXXXXX")
if [ "$KEEP" = 1 ]; then echo "== work directory: $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi

seed_of() { printf %s "$1" | cksum | cut -d' ' -f1; } # stable per-name seed (CRC32)

# Guest-side function, defined once per batch script.
GUEST_FUNC='
mk() { # mk MD NAME SEED "DISKS" CREATE-ARGS...
	md=$1 name=$2 seed=$3 disks=$4
	shift 4
	o=/share/$name
	mkdir -p "$o"
	if ! mdadm --create "/dev/$md" --run "$@" $disks >"$o/create.log" 2>&1; then
		echo "RESULT $name create=FAIL"; cat "$o/create.log"; return
	fi
	mdref-wait "$md"
	size=$(blockdev --getsize64 "/dev/$md")
	./rk-pattern --tagged "$seed" "$size" | dd of="/dev/$md" bs=1M iflag=fullblock oflag=direct 2>/dev/null
	echo 3 >/proc/sys/vm/drop_caches
	if ./rk-pattern -c --tagged "$seed" "$size" <"/dev/$md" >"$o/verify.log"; then pat=ok; else pat=BAD; fi
	mm=n/a
	if [ -e "/sys/block/$md/md/sync_action" ]; then
		echo check >"/sys/block/$md/md/sync_action"
		mdref-wait "$md"
		mm=$(cat "/sys/block/$md/md/mismatch_cnt")
	fi
	echo "$size" >"$o/array_bytes"
	mdadm --detail "/dev/$md" >"$o/detail.txt"
	mdadm --stop "/dev/$md" >/dev/null 2>&1
	i=0
	for d in $disks; do mdadm --examine "$d" >"$o/examine-$i.txt"; i=$((i + 1)); done
	echo "RESULT $name size=$size pattern=$pat mismatch_cnt=$mm"
}
'

declare -a B_NAMES=()
BATCH_SCRIPT=""
BATCH_DISKS=()
NDISK=0
NMD=0
FAILED=()
BUILT=()
LETTERS=(a b c d e f g h i j k l m n o p q r s t u v w x)

size_list() { # "4x3" -> "3 3 3 3"; "3,4,5" -> "3 4 5"
	case "$1" in
	*x*) local n=${1%x*} s=${1#*x} i; for ((i = 0; i < n; i++)); do printf '%s ' "$s"; done ;;
	*) printf '%s ' ${1//,/ } ;;
	esac
}

finish_fixture() { # NAME LEVEL LAYOUT CHUNK META BITMAP SIZES SEED UUID
	local name=$1 layout=$3 meta=$5 bitmap=$6 seed=$8 uuid=$9
	local src=$WORK/share/$name dst=$WORK/out/$name
	mkdir -p "$dst"
	cp "$src/detail.txt" "$dst/detail.txt"
	local members='[]' i=0 img role ex xzf zsf file
	for img in "$WORK/img/$name"/*.img; do
		ex=$src/examine-$i.txt
		cp "$ex" "$dst/examine-$i.txt"
		if [ "$meta" = 0.90 ]; then
			role=$(awk '$1 == "this" {print $5}' "$ex")
		else
			role=$(sed -n 's/^ *Device Role : Active device \([0-9]*\).*/\1/p' "$ex")
		fi
		[ -n "$role" ] || { echo "make-fixtures: $name: no role in examine-$i.txt" >&2; return 1; }
		xz -9 -T1 -c "$img" >"$dst/$i.img.xz"
		zstd -q -19 --long -c "$img" >"$dst/$i.img.zst"
		xzf=$(stat -c %s "$dst/$i.img.xz")
		zsf=$(stat -c %s "$dst/$i.img.zst")
		if [ "$xzf" -le "$zsf" ]; then rm "$dst/$i.img.zst"; file=$i.img.xz; else rm "$dst/$i.img.xz"; file=$i.img.zst; fi
		members=$(jq -c --arg f "$file" --argjson b "$(stat -c %s "$img")" --argjson r "$role" \
			--arg e "examine-$i.txt" '. + [{file: $f, image_bytes: $b, role: $r, examine: $e}]' <<<"$members")
		i=$((i + 1))
	done
	local d=$dst/detail.txt
	field() { sed -n "s/^ *$1 : *//p" "$d" | head -n1; }
	local level ldisp uuid mdname chunk
	level=$(field 'Raid Level')
	ldisp=$(field 'Layout')
	uuid=$(field 'UUID' | awk '{print $1}')
	mdname=$(field 'Name' | awk '{print $1}')
	chunk=$(sed -n 's/^ *Chunk Size : \([0-9]*\)K.*/\1/p' "$dst/examine-0.txt" | head -n1)
	[ "$uuid" = "$uuid_expected" ] || { echo "make-fixtures: $name: uuid $uuid != $uuid_expected" >&2; return 1; }
	jq -n --arg fixture "$name" --arg level "$level" \
		--arg layout "$layout" --arg ldisp "$ldisp" --arg chunk "$chunk" --arg meta "$meta" \
		--argjson raid_disks "$i" --arg bitmap "$bitmap" --arg uuid "$uuid" --arg mdname "$mdname" \
		--argjson seed "$seed" --argjson bytes "$(cat "$src/array_bytes")" --argjson members "$members" \
		'{fixture: $fixture, level: $level,
		  layout: (if $layout == "-" then null else $layout end),
		  layout_display: (if $ldisp == "" or $ldisp == "-unknown-" then null else $ldisp end),
		  chunk_kib: (if $chunk == "" then null else ($chunk | tonumber) end),
		  metadata: $meta, raid_disks: $raid_disks, bitmap: $bitmap, uuid: $uuid,
		  name: (if $mdname == "" then null else $mdname end),
		  seed: $seed, pattern: "tagged", array_bytes: $bytes,
		  members: $members, detail: "detail.txt",
		  created_by: "mdadm 4.2 / Linux 6.1 via mdref (tests/interop/make-fixtures.sh)"}' \
		>"$dst/manifest.json"
	rm -rf "$OUT/$name.new"
	mv "$dst" "$OUT/$name.new"
	rm -rf "${OUT:?}/$name"
	mv "$OUT/$name.new" "$OUT/$name"
	rm -f "$WORK/img/$name"/*.img
}

run_batch() {
	[ ${#B_NAMES[@]} -gt 0 ] || return 0
	echo "== VM batch: ${B_NAMES[*]} ($NDISK disks)"
	local dargs=() d t0 out status line name
	for d in "${BATCH_DISKS[@]}"; do dargs+=(-d "$d"); done
	t0=$(date +%s)
	set +e
	out=$(printf '%s\n%s\n' "$GUEST_FUNC" "$BATCH_SCRIPT" |
		"$MDREF" -q -t 900 --date "$DATE" -s "$WORK/share" -f "$RKP" -l "$WORK/console-${B_NAMES[0]}.log" "${dargs[@]}" - 2>"$WORK/stderr-${B_NAMES[0]}.log")
	status=$?
	set -e
	echo "$out" | grep -v '^$' | sed 's/^/   /'
	echo "   (exit $status, $(($(date +%s) - t0)) s)"
	for name in "${B_NAMES[@]}"; do
		line=$(echo "$out" | grep "^RESULT $name " || true)
		if [[ "$line" == *"pattern=ok mismatch_cnt=0" || "$line" == *"pattern=ok mismatch_cnt=n/a" ]]; then
			local spec
			spec=$(echo "$MATRIX" | awk -v n="$name" '$1 == n')
			# shellcheck disable=SC2086
			set -- $spec
			uuid_expected=$(uuid_of "$1")
			if finish_fixture "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$(seed_of "$1")" "$uuid_expected"; then
				BUILT+=("$name")
			else
				FAILED+=("$name")
			fi
		else
			FAILED+=("$name")
			cat "$WORK/stderr-${B_NAMES[0]}.log" >&2 || true
		fi
	done
	B_NAMES=()
	BATCH_SCRIPT=""
	BATCH_DISKS=()
	NDISK=0
	NMD=0
}

uuid_of() { printf '5ee1c0de:f1c70e5e:%08x:%08x' "$(seed_of "$1")" "$(printf %s "$1" | wc -c)"; }

mkdir -p "$WORK/share" "$WORK/img" "$WORK/out" "$OUT"
while read -r name level layout chunk meta bitmap sizes; do
	[ -n "$name" ] || continue
	selected "$name" || continue
	read -r -a sz <<<"$(size_list "$sizes")"
	n=${#sz[@]}
	[ $((NDISK + n)) -le $MAX_DISKS ] || run_batch
	mkdir -p "$WORK/img/$name"
	disks=""
	for ((i = 0; i < n; i++)); do
		img=$WORK/img/$name/$i.img
		rm -f "$img"
		truncate -s "${sz[$i]}M" "$img"
		BATCH_DISKS+=("$img")
		disks="$disks /dev/vd${LETTERS[$NDISK]}"
		NDISK=$((NDISK + 1))
	done
	args="--level=$level --raid-devices=$n --metadata=$meta --uuid=$(uuid_of "$name") --homehost=mdref"
	[ "$layout" != - ] && args="$args --layout=$layout"
	[ "$chunk" != - ] && args="$args --chunk=$chunk"
	case "$meta" in 1*) args="$args --name=$name" ;; esac
	case "$level" in 0 | linear) ;; *) args="$args --bitmap=$bitmap" ;; esac
	BATCH_SCRIPT="$BATCH_SCRIPT
mk md$NMD $name $(seed_of "$name") \"${disks# }\" $args"
	B_NAMES+=("$name")
	NMD=$((NMD + 1))
done <<<"$MATRIX"
run_batch

if [ ${#ONLY[@]} -eq 0 ]; then # drop fixtures no longer in the matrix
	for d in "$OUT"/*/; do
		d=${d%/}
		echo "$MATRIX" | awk -v n="${d##*/}" '$1 == n {f = 1} END {exit !f}' || { echo "== removing stale $d"; rm -rf "$d"; }
	done
fi
echo "== built ${#BUILT[@]} fixture(s); total size $(du -sh "$OUT" | cut -f1)"
if [ ${#FAILED[@]} -gt 0 ]; then
	echo "make-fixtures: FAILED: ${FAILED[*]}" >&2
	exit 1
fi
