#!/usr/bin/env bash
# Engine 4 KiB random writes, two builds interleaved (A/B), RAID5 over 4 and RAID6 over 6
# tmpfs members: per round and level the member-IO ceiling (fio randrw 50/50 on the member
# files, one psync job per file, / 4 or / 6, as benches/issue17.sh randwrite), then each
# build's `bench io --array` (iodepth 2 x cores, 256 MiB region): IOPS, its ratio to the
# ceiling, CPU per write ((user + sys) / writes, far less load-sensitive than IOPS) and
# member reads per write (2 / 3: bypassing the stripe cache; below: through it).
#   benches/small-writes-ab.sh ROUNDS MODE BUILD_A BUILD_B
# MODE: auto (the cache decides), on / off (RAIDKIT_STRIPE_CACHE_BYPASS: forced);
# MODE_A / MODE_B set each side's mode apart (the same build on both paths). RT=seconds.
# REGION=bytes the written region (default 256M; the arrays hold 384M / 512M);
# EXTRA="--stripe-cache-max 4M" more `bench io` options (a working set beyond the budget).
# Run it under the bench lock; files live in /dev/shm and are removed at exit.
# prints per round and level: load, fio ceiling, then per binary IOPS (ratio), CPU us/write,
# member reads/write, and the stripe cache's size at the end [switches between bypassing
# and using the cache over the run, where the build counts them]
set -euo pipefail
ROUNDS=$1; MODE=$2; A=$3; B=$4
MODE_A=${MODE_A:-$MODE}; MODE_B=${MODE_B:-$MODE}
W=$(mktemp -d /dev/shm/rk-swab.XXXXXX)
trap 'rm -rf "$W"' EXIT
RT=${RT:-3}
REGION=${REGION:-256M}
read -r -a extra <<<"${EXTRA:-}"
cores=$(nproc)
mk() { # level n -> dir
  local d="$W/r$1"; mkdir -p "$d"; local m=()
  for i in $(seq 0 $(($2-1))); do m+=("$d/m$i"); done
  "$A" create --level "$1" --raid-devices "$2" --size 136M --assume-clean "${m[@]}" >/dev/null
  for f in "${m[@]}"; do dd if=/dev/zero of="$f" bs=1M seek=8 count=128 conv=notrunc status=none; done
}
mk 5 4; mk 6 6
one() { # bin level mode
  local d="$W/r$2"; local m=("$d"/m*)
  local envs=(); [ "$3" != auto ] && envs=(RAIDKIT_STRIPE_CACHE_BYPASS=$3)
  env ${envs[@]+"${envs[@]}"} /usr/bin/time -f '%U %S' -o "$W/t" "$1" bench io --array "${m[@]}" --force --rw randwrite --bs 4K \
     --iodepth $((2*cores)) --region "$REGION" ${extra[@]+"${extra[@]}"} --runtime "${RT}s" --json 2>/dev/null > "$W/o.json"
  python3 - "$W/o.json" "$W/t" <<'PY'
import json,sys
j=json.load(open(sys.argv[1])); u,s=map(float,open(sys.argv[2]).read().split()[-2:])
mr=sum(m.get("reads",0) for m in j["members"])
c=j.get("stripe_cache") or {}
print("%.0f %.2f %.2f %s[%s]" % (j["iops"], (u+s)/j["ios"]*1e6, mr/j["writes"], c.get("size_entries","-"), c.get("bypass_switches","-")))
PY
}
for r in $(seq $ROUNDS); do
  for lvl in 5 6; do
    d="$W/r$lvl"; args=(); for f in "$d"/m*; do args+=(--name="$(basename $f)" --filename="$f"); done
    l0=$(cut -d' ' -f1 /proc/loadavg)
    fio --rw=randrw --rwmixread=50 --bs=4k --ioengine=psync --offset=8M --size=128M --time_based --runtime=$RT \
      --group_reporting --output-format=json --output="$W/fio.json" "${args[@]}" >/dev/null 2>&1
    raw=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"]; print("%.0f"%sum(x["read"]["iops"]+x["write"]["iops"] for x in j))' "$W/fio.json")
    div=4; [ $lvl = 6 ] && div=6
    ceil=$((raw/div))
    if [ $((r % 2)) = 1 ]; then order=(A B); else order=(B A); fi
    out=""
    for w in "${order[@]}"; do
      bin=$A; mode=$MODE_A; [ $w = B ] && bin=$B && mode=$MODE_B
      read -r iops cpu rpw size < <(one "$bin" $lvl $mode)
      out="$out | $w $iops ($(python3 -c "print('%.2f'%($iops/$ceil))")x) ${cpu}us ${rpw}r/w ${size}e"
    done
    echo "round $r raid$lvl load $l0->$(cut -d' ' -f1 /proc/loadavg) ceiling $ceil $out"
  done
done
