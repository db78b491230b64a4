#!/usr/bin/env bash
# Let the real Linux kernel judge an array: assemble MEMBER... in a throwaway VM (shared/mdref,
# --snapshot so the files stay unchanged), show mdadm --examine checksums and --detail,
# run a `check` scrub and print mismatch_cnt. Exit 0 only if all is well.
#   scripts/kernel-check.sh d0.img d1.img d2.img d3.img
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 MEMBER..." >&2; exit 2; }
MDREF="${RAIDKIT_MDREF:-$(cd "$(dirname "$0")/.." && pwd)/../shared/mdref/mdref-run}"
[ -x "$MDREF" ] || { echo "mdref not found at $MDREF (set RAIDKIT_MDREF)" >&2; exit 2; }
args=()
for m in "$@"; do args+=(-d "$m"); done
MDREF_ACCEL="${MDREF_ACCEL:-tcg}" "$MDREF" -q --snapshot "${args[@]}" <<'GUEST'
exec 2>&1
mdadm --assemble --run /dev/md0 $MDREF_DISKS || exit 2
for d in $MDREF_DISKS; do echo "$d: $(mdadm --examine $d | grep -E 'Checksum')"; done
mdadm --detail /dev/md0 | grep -E 'Raid Level|Array Size|State :|Active Devices'
echo check > /sys/block/md0/md/sync_action
mdref-wait md0
m=$(cat /sys/block/md0/md/mismatch_cnt)
echo "kernel check: mismatch_cnt=$m"
bad=$(for d in $MDREF_DISKS; do mdadm --examine $d; done | grep -c 'Checksum.*correct' || true)
[ "$m" = 0 ] && [ "$bad" = "$MDREF_NDISKS" ]
GUEST
