#!/usr/bin/env bash
# Rebuild onto a spare, alone, A/B: the members are created and filled once, then each round
# rebuilds the last member onto a fallocated spare once per variant (order reversed every
# other round), from fresh copies of the members read twice first (as `issue17.sh sync`'s
# fio and check runs read them: no LRU activation in the rebuild). Per rebuild: seconds
# from `manage --add` to its rebuild_finished event (no polling), the same between the
# rebuild_started and rebuild_finished events as `monitor --json` delivered them (nan, or
# 0, when it delivered them late), and the server's CPU seconds (user + system) over it.
# Each rebuilt spare is compared with the lost member's data area ("MISMATCH" on stderr).
# Each round starts and ends with fio's anchor on the same kind of files (n-1 sequential
# readers + 1 writer, 1 MiB, member MiB/s, as `issue17.sh sync`).
#
#   benches/rebuild-ab.sh LEVEL COMP_MIB ROUNDS VARIANT...
#   VARIANT = LABEL=[ENV=VALUE,...]:BINARY, e.g. "A=:$A" "B=:$B" "B2=RAIDKIT_PIECES=256:$B"
#   ENV SPARE=written: the spare is a copy of a member (pages written) instead of fallocated.
#   PERF=DIR: `perf record -g` of the server over each rebuild, into DIR/perf-LABEL.data
#   (PERF_EV: perf's event arguments, default "-F 2000").
# LEVEL 1 (2 members), 5 (4) or 6 (6); 512 KiB chunks; members of COMP_MIB + 8 MiB.
set -euo pipefail
LEVEL=$1 COMP=$2 ROUNDS=$3
shift 3
VARS=("$@")
[ ${#VARS[@]} -gt 0 ] || { echo "no variant" >&2; exit 2; }
W=$(mktemp -d /dev/shm/rk-rbab.XXXXXX)
export RAIDKIT_RUN_DIR="$W/run"
mkdir -m 0700 "$RAIDKIT_RUN_DIR"
trap 'kill $(jobs -p) 2>/dev/null || true; sleep 0.3; rm -rf "$W"' EXIT
case $LEVEL in
  1) N=2 D=1 ;; 5) N=4 D=3 ;; 6) N=6 D=4 ;;
  *) echo "LEVEL 1, 5 or 6" >&2; exit 2 ;;
esac
BIN0=${VARS[0]##*:}
P=()
for ((i = 0; i < N; i++)); do P+=("$W/p$i"); done
CH=(--chunk 512K)
[ "$LEVEL" = 1 ] && CH=()
"$BIN0" create --level "$LEVEL" --raid-devices $N "${CH[@]}" --size $((COMP + 8))M --name s "${P[@]}" >/dev/null
"$BIN0" import --input <(head -c $((D * COMP))M /dev/urandom) "${P[@]}" >/dev/null
LAST=$((N - 1))
# The data area: from the data offset (2 MiB for these members) to the end of what is used.
DOFF=$((2 << 20)) DLEN=$(((COMP + 6) << 20))
data_area() { tail -c +$((DOFF + 1)) "$1" | head -c $DLEN; }
anchor() {
  local a=()
  for ((i = 0; i < LAST; i++)); do a+=(--name="r$i" --filename="$W/p$i"); done
  cp "$W/p$LAST" "$W/fs"
  fio --bs=1M --ioengine=psync --offset=8M --size=${COMP}M --time_based --runtime=3 \
      --group_reporting --output-format=json --output="$W/fio.json" \
      --rw=read "${a[@]}" --name=w --rw=write --filename="$W/fs" >/dev/null 2>&1
  rm -f "$W/fs"
  python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"]
print("%.0f" % (sum(x["read"]["bw_bytes"]+x["write"]["bw_bytes"] for x in j)/1048576))' "$W/fio.json"
}
one() { # LABEL ENVS BINARY: one rebuild; prints "LABEL add_s events_s cpu_s"
  local lab=$1 envs=${2//,/ } bin=$3 m=() i
  for ((i = 0; i < N; i++)); do cp "$W/p$i" "$W/m$i"; m+=("$W/m$i"); done
  for ((i = 0; i < LAST; i++)); do cat "${m[$i]}" >/dev/null; cat "${m[$i]}" >/dev/null; done
  rm -f "$W/spare"
  if [[ " $envs " == *" SPARE=written "* ]]; then cp "$W/p0" "$W/spare"; else fallocate -l $((COMP + 8))M "$W/spare"; fi
  # shellcheck disable=SC2086
  env $envs "$bin" serve --socket "$W/s.sock" --export a "${m[@]}" >"$W/serve.log" 2>&1 &
  local spid=$! nm=""
  for _ in $(seq 200); do
    nm=$("$bin" status --json 2>/dev/null | python3 -c "import json,sys; print(next((a['name'] for a in json.load(sys.stdin) if a['pid'] == $spid), ''))" 2>/dev/null || true)
    [ -n "$nm" ] && break
    sleep 0.05
  done
  [ -n "$nm" ] || { echo "the server never showed in status" >&2; exit 1; }
  "$bin" manage "$nm" --fail "${m[$LAST]}" >/dev/null 2>&1
  "$bin" manage "$nm" --remove "${m[$LAST]}" >/dev/null 2>&1
  rm -f "$W/fin"; mkfifo "$W/fin"; exec 3<>"$W/fin"
  "$bin" monitor --json 2>/dev/null > >(python3 -u -c 'import sys,time
for l in sys.stdin:
    print("%.6f %s" % (time.time(), l), end="", flush=True)
    if "\"rebuild_finished\"" in l: open(sys.argv[1], "w").write("done\n")' "$W/fin" >"$W/events") &
  local mpid=$! pp=""
  sleep 0.3
  if [ -n "${PERF:-}" ]; then
    # shellcheck disable=SC2086
    perf record ${PERF_EV:--F 2000} -g -p $spid -o "$PERF/perf-$lab.data" >/dev/null 2>&1 &
    pp=$!
    sleep 0.5
  fi
  local c0 t0 t1 c1
  c0=$(awk '{print $14 + $15}' "/proc/$spid/stat")
  t0=$(date +%s.%N)
  "$bin" manage "$nm" --add "$W/spare" >/dev/null 2>&1
  read -r -t 300 _ <&3 || { echo "no rebuild_finished in 300 s" >&2; exit 1; }
  t1=$(date +%s.%N)
  exec 3<&-
  c1=$(awk '{print $14 + $15}' "/proc/$spid/stat")
  [ -z "$pp" ] || { kill -INT "$pp"; wait "$pp" || true; }
  kill "$mpid" 2>/dev/null || true
  kill "$spid"; wait "$spid" 2>/dev/null || true
  cmp -s <(data_area "$W/spare") <(data_area "$W/p$LAST") || echo "MISMATCH $lab" >&2
  local te
  te=$(python3 -c 'import sys
t={}
for l in open(sys.argv[1]):
    ts,_,j=l.partition(" ")
    for k in ("rebuild_started","rebuild_finished"):
        if "\""+k+"\"" in j: t.setdefault(k,float(ts))
print("%.3f" % (t["rebuild_finished"]-t["rebuild_started"]) if len(t)==2 else "nan")' "$W/events")
  echo "$lab $(python3 -c "print('%.3f %s %.2f' % ($t1 - $t0, '$te', ($c1 - $c0) / $(getconf CLK_TCK)))")"
}
echo "# RAID$LEVEL, $N members of $COMP MiB; rebuild moves $((N * (COMP + 6))) MiB (n x the data area)"
echo "# label add_s events_s cpu_s"
for ((r = 0; r < ROUNDS; r++)); do
  order=("${VARS[@]}")
  if ((r % 2)); then
    order=()
    for ((k = ${#VARS[@]} - 1; k >= 0; k--)); do order+=("${VARS[$k]}"); done
  fi
  echo "round $r anchor_MiBs $(anchor) load $(cut -d' ' -f1 /proc/loadavg)"
  for v in "${order[@]}"; do
    lab=${v%%=*} rest=${v#*=}
    one "$lab" "${rest%%:*}" "${rest#*:}"
  done
  echo "round $r anchor_MiBs $(anchor)"
done
