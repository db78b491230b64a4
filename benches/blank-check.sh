#!/usr/bin/env bash
# `raidkit check` of a blank RAID5 over 4 preallocated (fallocate) tmpfs members, nothing
# written but the metadata: every stripe is a hole on every member, so the pass is all
# hole tests (a file's SEEK_DATA walks to the next data: on such a member, to its end).
# Each build in turn, twice; wall, user and system seconds.
#   benches/blank-check.sh CREATE_BINARY BINARY...      (SIZE=member MiB, default 1032)
set -euo pipefail
SIZE=${SIZE:-1032}
W=$(mktemp -d /dev/shm/rk-blank.XXXXXX); trap 'rm -rf "$W"' EXIT
export RAIDKIT_RUN_DIR="$W/run"; mkdir -m 0700 "$RAIDKIT_RUN_DIR"
for i in 0 1 2 3; do fallocate -l "${SIZE}M" "$W/m$i"; done
"$1" create --level 5 --raid-devices 4 --chunk 512K --size "${SIZE}M" --assume-clean --name h \
  "$W"/m{0,1,2,3} >/dev/null 2>&1
shift
for _ in 1 2; do for b in "$@"; do
  out=$( { TIMEFORMAT='%R %U %S'; time "$b" check "$W"/m{0,1,2,3} >/dev/null 2>&1; } 2>&1 )
  echo "$b wall/user/sys s: $out"
done; done
