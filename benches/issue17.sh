#!/usr/bin/env bash
# Issue 17's measurements, each against an anchor measured in the same run:
#   qd1       QD1 1 MiB through NBD on modelled members (fault:slow=500us,qd=4,bw=100M):
#             RAID0 (2 members), RAID10 n2 (4), RAID5 (3) reads against the data members'
#             combined modelled bandwidth (2 × 100 MiB/s); RAID1 (2) writes against one
#             member (100 MiB/s). The model books completions on a virtual clock, so its
#             capacity is exact whatever the load; fio (nbd engine) is the client.
#             Also: ms per request against the model's ideal, the ratio at QD2, and ms
#             per request on the same members unmodelled (plain tmpfs).
#   randwrite RAID5 (4 members) / RAID6 (6 members) 4 KiB random writes on tmpfs, through
#             the engine (`bench io --array`, iodepth = 2 × cores) and through NBD (fio,
#             QD32), against the member-IO ceiling: fio's 4 KiB random IOPS on the same
#             member files (one psync job per file, randrw 50/50 = the mix of a small
#             parity write: as many reads as writes), divided by 4 (RAID5: 2 reads + 2
#             writes) or 6 (RAID6: 3 + 3). Then the NBD bound: the same NBD job against
#             nbdkit's file plugin on one tmpfs file and raidkit serving a 1-member
#             RAID1 (no RAID work), and each array's NBD IOPS against it.
#   sync      RAID5 over 4 tmpfs members (SYNC_LEVEL=1: RAID1 over 2, 6: RAID6 over 6;
#             CHUNK_KIB, default 512): `raidkit check` (offline) against fio reading the
#             same files sequentially (one job per file, 1 MiB), and a rebuild onto a spare
#             (serve, manage --fail/--remove/--add) against fio with n-1 sequential readers
#             and 1 sequential writer on the same files, timed twice: --add until its
#             rebuild_finished event arrives (no polling), and the engine's rebuild_started →
#             rebuild_finished events as `monitor --json` delivers them. Rates are member
#             bytes moved per second (n × component, both).
#   syncmodel The sync section's check and rebuild with every member and the spare in the
#             device model ($MODEL, SYNC_LEVEL 1, 5, 6 or 10): each member's rate against
#             the model's bandwidth (a check reads all members at once, a rebuild writes
#             the spare at the model's rate): the regime of disks, not of 2 cores.
#   qd        4 KiB random reads, one client at QD 1..32 and 1..8 clients at QD1: raidkit
#             RAID0 over 4 tmpfs members against nbdkit (file plugin) on one tmpfs file and
#             fio's io_uring engine on that raw file. One sample per cell: the table and
#             plot in BENCHMARKS come from benches/qd-sweep.sh (interleaved, repeated,
#             RAID0 and RAID5, reads and writes).
# The other targets have their own scripts: benches/raid6-vs-raw.sh (RAID6 full-stripe
# writes against raw), benches/nbd-vs-anchors.sh (NBD against nbdkit on tmpfs).
#   benches/issue17.sh [SECTION...]   (default: qd1 randwrite sync qd)
# RT=seconds per fio run (default 3). RAIDKIT=path picks the binary. MODEL=fault:SPEC the
# device model of qd1 and syncmodel (default fault:slow=500us,qd=4,bw=100M). COMP_MIB = the sync
# section's component size (default 256; larger makes process start and polling matter less).
set -euo pipefail
cd "$(dirname "$0")/.."
RT="${RT:-3}"
RAIDKIT="$(realpath "${RAIDKIT:-target/release/raidkit}")"
[ -x "$RAIDKIT" ] || cargo build --release -q -p raidkit
W=$(mktemp -d /dev/shm/rk-i17.XXXXXX)
export RAIDKIT_RUN_DIR="$W/run"
mkdir -m 0700 "$RAIDKIT_RUN_DIR"
trap 'kill $(jobs -p) 2>/dev/null || true; sleep 0.5; rm -rf "$W"' EXIT
SECTIONS=("$@")
[ ${#SECTIONS[@]} -gt 0 ] || SECTIONS=(qd1 randwrite sync qd)
MODEL="${MODEL:-fault:slow=500us,qd=4,bw=100M}"
py() { python3 -c "$@"; }
wait_sock() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; return 1; }
fio_json() { # field(read|write|both) -> "MiB/s IOPS" of the json in $W/fio.json
  py 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"]
k=sys.argv[2]
bw=sum((x["read"]["bw_bytes"] if k!="write" else 0)+(x["write"]["bw_bytes"] if k!="read" else 0) for x in j)
io=sum((x["read"]["iops"] if k!="write" else 0)+(x["write"]["iops"] if k!="read" else 0) for x in j)
print("%.1f %.0f" % (bw/1048576, io))' "$W/fio.json" "$1"
}
nbd_fio() { # socket export rw-field fio-args... -> "MiB/s IOPS"
  local sock=$1 exp=$2 k=$3; shift 3
  fio --name=b --ioengine=nbd --uri="nbd+unix:///$exp?socket=$sock" "$@" --time_based \
      --runtime="$RT" --output-format=json --output="$W/fio.json" >/dev/null 2>&1
  fio_json "$k"
}
serve() { # dir members... : serve the array of these members at dir/s.sock, SPID
  local d=$1; shift
  "$RAIDKIT" serve --socket "$d/s.sock" --export a "$@" >"$d/serve.log" 2>&1 &
  SPID=$!
  wait_sock "$d/s.sock"
}
unserve() { kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; }
echo "machine: $(nproc) cores, shared with other engineers' builds; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

qd1() {
  echo
  echo "### QD1 1 MiB through NBD, members modelled at 100 MiB/s ($MODEL)"
  # Where a QD1 shortfall comes from: the time per request beyond the model's ideal (1 MiB
  # split over the data members: latency + transfer, all members at once) is what the
  # server, the client and the scheduler add serially; at QD2 a server that serialized
  # requests would gain nothing.
  # The same members unmodelled (plain tmpfs) give the time a request costs outside the
  # devices: NBD, engine, copies, scheduling.
  # nbdkit's file plugin on one plain tmpfs file, same op at QD1, is that cost's anchor.
  truncate -s 160M "$W/qd1-one.img"
  dd if=/dev/urandom of="$W/qd1-one.img" bs=1M count=160 conv=notrunc status=none
  nbdkit -U "$W/qd1-k.sock" --exit-with-parent -f file "$W/qd1-one.img" & local KPID=$!
  wait_sock "$W/qd1-k.sock"
  echo "| array | op | QD1 MiB/s | anchor MiB/s | QD1 ratio | ms/request: ideal, measured | QD2 ratio | ms/request on plain tmpfs: raidkit, nbdkit |"
  echo "|---|---|---|---|---|---|---|---|"
  for cfg in "raid0:0:2::read:200" "raid10-n2:10:4:--layout n2:read:200" \
             "raid5:5:3::read:200" "raid1:1:2::write:100"; do
    IFS=: read -r name lvl n extra op anchor <<<"$cfg"
    local d="$W/$name"; mkdir -p "$d"
    local m=() fm=()
    for i in $(seq 0 $((n - 1))); do m+=("$d/m$i"); fm+=("$MODEL:$d/m$i"); done
    # shellcheck disable=SC2086
    "$RAIDKIT" create --level "$lvl" --raid-devices "$n" --size 160M --assume-clean \
        $extra "${m[@]}" >/dev/null
    for f in "${m[@]}"; do dd if=/dev/urandom of="$f" bs=1M seek=8 count=150 conv=notrunc status=none; done
    serve "$d" "${fm[@]}"
    read -r bw _ < <(nbd_fio "$d/s.sock" a "$op" --rw="$op" --bs=1M --iodepth=1 --size=128M)
    read -r bw2 _ < <(nbd_fio "$d/s.sock" a "$op" --rw="$op" --bs=1M --iodepth=2 --size=128M)
    unserve
    serve "$d" "${m[@]}"
    read -r bwp _ < <(nbd_fio "$d/s.sock" a "$op" --rw="$op" --bs=1M --iodepth=1 --size=128M)
    unserve
    read -r bwk _ < <(nbd_fio "$W/qd1-k.sock" "" "$op" --rw="$op" --bs=1M --iodepth=1 --size=128M)
    # Ideal: 0.5 ms latency + the request's share per data member at 100 MiB/s.
    local ideal; ideal=$(py "print('%.2f' % (0.5 + 1000 / $anchor))")
    echo "| $name ($n members) | $op | $bw | $anchor | $(py "print('%.2f' % ($bw / $anchor))")× | $ideal, $(py "print('%.2f' % (1000 / $bw))") | $(py "print('%.2f' % ($bw2 / $anchor))")× | $(py "print('%.2f, %.2f' % (1000 / $bwp, 1000 / $bwk))") |"
  done
  kill "$KPID" 2>/dev/null || true
}

randwrite() {
  local cores; cores=$(nproc)
  echo
  echo "### RAID5 / RAID6 4 KiB random writes against the member-IO ceiling (tmpfs)"
  echo "| array | raw randrw IOPS (all members) | ceiling (/4 or /6) | engine IOPS (ratio) | NBD QD32 IOPS (ratio) |"
  echo "|---|---|---|---|---|"
  local nbds=()
  for cfg in "raid5:5:4:4" "raid6:6:6:6"; do
    IFS=: read -r name lvl n div <<<"$cfg"
    local d="$W/rw-$name"; mkdir -p "$d"
    local m=() args=()
    for i in $(seq 0 $((n - 1))); do m+=("$d/m$i"); args+=(--name="m$i" --filename="$d/m$i"); done
    "$RAIDKIT" create --level "$lvl" --raid-devices "$n" --size 136M --assume-clean "${m[@]}" >/dev/null
    for f in "${m[@]}"; do dd if=/dev/zero of="$f" bs=1M seek=8 count=128 conv=notrunc status=none; done
    fio --rw=randrw --rwmixread=50 --bs=4k --ioengine=psync --offset=8M --size=128M \
        --time_based --runtime="$RT" --group_reporting --output-format=json \
        --output="$W/fio.json" "${args[@]}" >/dev/null 2>&1
    read -r _ raw < <(fio_json both)
    local ceil; ceil=$(py "print('%.0f' % ($raw / $div))")
    local eng
    eng=$("$RAIDKIT" bench io --array "${m[@]}" --force --rw randwrite --bs 4K \
        --iodepth $((2 * cores)) --region 256M --runtime "${RT}s" --json \
        | py 'import json,sys; print("%.0f" % json.load(sys.stdin)["iops"])')
    serve "$d" "${m[@]}"
    read -r _ nbd < <(nbd_fio "$d/s.sock" a write --rw=randwrite --bs=4k --iodepth=32 --size=256M)
    unserve
    echo "| $name ($n members) | $raw | $ceil | $eng ($(py "print('%.2f' % ($eng / $ceil))")×) | $nbd ($(py "print('%.2f' % ($nbd / $ceil))")×) |"
    nbds+=("$name:$nbd:$ceil")
  done
  # The NBD bound: the same fio job (QD32 4 KiB random writes) against servers that do no
  # RAID work: nbdkit's file plugin on one tmpfs file, and raidkit serving a 1-member
  # RAID1 of one. What the protocol and the cores allow a server, whatever it stores.
  local d="$W/rw-bound"; mkdir -p "$d"
  truncate -s 264M "$d/one.img"
  nbdkit -U "$d/k.sock" --exit-with-parent -f file "$d/one.img" & local KPID=$!
  wait_sock "$d/k.sock"
  read -r _ kit < <(nbd_fio "$d/k.sock" "" write --rw=randwrite --bs=4k --iodepth=32 --size=256M)
  kill "$KPID" 2>/dev/null || true; wait "$KPID" 2>/dev/null || true
  "$RAIDKIT" create --level 1 --raid-devices 1 --size 264M --assume-clean "$d/r1" >/dev/null 2>&1
  serve "$d" "$d/r1"
  read -r _ r1 < <(nbd_fio "$d/s.sock" a write --rw=randwrite --bs=4k --iodepth=32 --size=256M)
  unserve
  echo
  echo "NBD bound (QD32 4 KiB random writes, no RAID work): nbdkit file plugin on one tmpfs file"
  echo "$kit IOPS, raidkit serving a 1-member RAID1 $r1 IOPS ($(py "print('%.2f' % ($r1 / $kit))")× nbdkit)."
  echo "| array | NBD IOPS | / nbdkit bound | / member-IO ceiling | nbdkit bound / ceiling |"
  echo "|---|---|---|---|---|"
  local x
  for x in "${nbds[@]}"; do
    IFS=: read -r name nbd ceil <<<"$x"
    echo "| $name | $nbd | $(py "print('%.2f' % ($nbd / $kit))")× | $(py "print('%.2f' % ($nbd / $ceil))")× | $(py "print('%.2f' % ($kit / $ceil))")× |"
  done
}

status_json() { "$RAIDKIT" status --json 2>/dev/null || echo '[]'; }
# rebuild_onto DIR SPARE FAILED MEMBERS...: serve MEMBERS, fail and remove FAILED, add SPARE
# and wait for the rebuild to finish. Sets RB_T0/RB_T1 (--add to rebuild_finished seen, no
# polling), RB_TE (rebuild_started -> rebuild_finished events, or nan) and RB_CPU (the
# server's CPU seconds over the rebuild).
rebuild_onto() {
  local d=$1 spare=$2 failed=$3; shift 3
  serve "$d" "$@"
  # This server's array (other servers may be running): found by its pid, once it is up.
  local nm=""
  for _ in $(seq 200); do
    nm=$(status_json | py "import json,sys; print(next((a['name'] for a in json.load(sys.stdin) if a['pid'] == $SPID), ''))")
    [ -n "$nm" ] && break
    sleep 0.05
  done
  [ -n "$nm" ] || { echo "the server (pid $SPID) never showed in raidkit status" >&2; exit 1; }
  # The failed member as status names it (a wrapped member: "PATH (fault-injected)").
  failed=$(status_json | py "import json,sys
a=[a for a in json.load(sys.stdin) if a['pid'] == $SPID][0]
print(next(m['device'] for m in a['members'] if m['device'] == sys.argv[1] or m['device'].startswith(sys.argv[1] + ' ')))" "$failed")
  "$RAIDKIT" manage "$nm" --fail "$failed" >/dev/null
  "$RAIDKIT" manage "$nm" --remove "$failed" >/dev/null
  # The rebuild's own time: from its rebuild_started event to its rebuild_finished, each
  # stamped as `monitor --json` delivers it (no process start, --add or polling in it).
  # The stamper also says "done" on a fifo once rebuild_finished has come: the timing below
  # waits on it, without polling.
  rm -f "$d/fin"; mkfifo "$d/fin"; exec 3<>"$d/fin"
  "$RAIDKIT" monitor --json 2>/dev/null > >(python3 -u -c 'import sys,time
for l in sys.stdin:
    print("%.6f %s" % (time.time(), l), end="", flush=True)
    if "\"rebuild_finished\"" in l: open(sys.argv[1], "w").write("done\n")' "$d/fin" >"$d/events") &
  local MPID=$!
  sleep 0.3
  # The server's CPU time (user + system, clock ticks) over the rebuild.
  local c0; c0=$(awk '{print $14 + $15}' "/proc/$SPID/stat")
  RB_T0=$(date +%s.%N)
  "$RAIDKIT" manage "$nm" --add "$spare" >/dev/null
  # The end is the rebuild_finished event, waited for on the fifo (no polling): polling
  # `status --json` through python every 50 ms (about 0.1 s of CPU per poll) while the
  # rebuild ran took most of a core of these 2 from the server, which fio's anchor never paid.
  read -r -t 300 _ <&3 || { echo "no rebuild_finished event in 300 s" >&2; exit 1; }
  RB_T1=$(date +%s.%N)
  exec 3<&-
  local c1; c1=$(awk '{print $14 + $15}' "/proc/$SPID/stat")
  RB_CPU=$(py "print('%.3f' % (($c1 - $c0) / $(getconf CLK_TCK)))")
  # Then the array must say it is whole and idle.
  for _ in $(seq 200); do
    status_json | py "import json,sys; s=[a for a in json.load(sys.stdin) if a['pid'] == $SPID]; sys.exit(0 if s and not s[0]['degraded'] and s[0]['sync']['action']=='idle' else 1)" && break
    sleep 0.05
  done
  kill "$MPID" 2>/dev/null || true
  unserve
  RB_TE=$(py 'import sys
t={}
for l in open(sys.argv[1]):
    ts,_,j=l.partition(" ")
    for k in ("rebuild_started","rebuild_finished"):
        if "\""+k+"\"" in j: t.setdefault(k,float(ts))
print("%.3f" % (t["rebuild_finished"]-t["rebuild_started"]) if len(t)==2 else "nan")' "$d/events")
}
# sync_array NAME: a filled array for the sync sections in $W/NAME. SYNC_LEVEL 5 (4 members,
# default), 6 (6 members), 1 (2 members) or 10 (4 members, near 2); CHUNK_KIB (512);
# COMP_MIB (256) of data per member, 8 MiB more per member for metadata and slack.
# Sets SA_LEVEL, SA_N, SA_DATA (data members' worth per stripe), SA_COMP, SA_CHUNK,
# SA_DIR and SA_M (the member files).
sync_array() {
  SA_LEVEL=${SYNC_LEVEL:-5} SA_CHUNK=${CHUNK_KIB:-512} SA_COMP=${COMP_MIB:-256}
  case $SA_LEVEL in
    1) SA_N=2 SA_DATA=1 ;; 5) SA_N=4 SA_DATA=3 ;; 6) SA_N=6 SA_DATA=4 ;; 10) SA_N=4 SA_DATA=2 ;;
    *) echo "SYNC_LEVEL 1, 5, 6 or 10" >&2; exit 2 ;;
  esac
  SA_DIR="$W/$1"; mkdir -p "$SA_DIR"
  SA_M=()
  local i chunk_arg=(--chunk "${SA_CHUNK}K")
  for ((i = 0; i < SA_N; i++)); do SA_M+=("$SA_DIR/m$i"); done
  [ "$SA_LEVEL" = 1 ] && chunk_arg=()
  "$RAIDKIT" create --level "$SA_LEVEL" --raid-devices "$SA_N" "${chunk_arg[@]}" \
      --size $((SA_COMP + 8))M --name s "${SA_M[@]}" >/dev/null
  "$RAIDKIT" import --input <(head -c $((SA_DATA * SA_COMP))M /dev/urandom) "${SA_M[@]}" >/dev/null
}
sync_() {
  [ "${SYNC_LEVEL:-5}" != 10 ] || { echo "sync: RAID10 only in syncmodel (its rebuild reads one copy)" >&2; exit 2; }
  sync_array sync
  local level=$SA_LEVEL n=$SA_N comp=$SA_COMP chunk=$SA_CHUNK d=$SA_DIR i
  local m=("${SA_M[@]}")
  echo
  echo "### Rebuild and check against the members' raw sequential bandwidth (RAID$level, $n tmpfs members, $chunk KiB chunk)"
  local args=()
  for ((i = 0; i < n; i++)); do args+=(--name="m$i" --filename="${m[$i]}"); done
  fio --rw=read --bs=1M --ioengine=psync --offset=8M --size=${comp}M --time_based \
      --runtime="$RT" --group_reporting --output-format=json --output="$W/fio.json" \
      "${args[@]}" >/dev/null 2>&1
  read -r rawr _ < <(fio_json read)
  local t0 t1 cpu
  t0=$(date +%s.%N)
  # The check's CPU time (user + system) too: on tmpfs it is CPU-bound, and CPU seconds
  # move less with the machine's load than wall time.
  cpu=$( { TIMEFORMAT='%U %S'; time "$RAIDKIT" check "${m[@]}" >/dev/null 2>&1; } 2>&1 )
  t1=$(date +%s.%N)
  cpu=$(py "print('%.2f' % sum(map(float, '$cpu'.split()[-2:])))")
  local chk; chk=$(py "print('%.1f' % ($n * $comp / ($t1 - $t0)))")
  echo "| job | raw MiB/s (same files) | raidkit member MiB/s | ratio |"
  echo "|---|---|---|---|"
  echo "| check (offline, $n × ${comp} MiB read, $(py "print('%.2f s' % ($t1 - $t0))"), ${cpu} s CPU) | $rawr ($n readers) | $chk | $(py "print('%.2f' % ($chk / $rawr))")× |"
  # Rebuild: n-1 sequential readers and 1 sequential writer on the same files.
  local last=$((n - 1)) rargs=()
  for ((i = 0; i < last; i++)); do rargs+=(--name="r$i" --filename="${m[$i]}"); done
  cp --sparse=always "${m[$last]}" "$d/spare"
  fio --bs=1M --ioengine=psync --offset=8M --size=${comp}M --time_based --runtime="$RT" \
      --group_reporting --output-format=json --output="$W/fio.json" \
      --rw=read "${rargs[@]}" --name=w --rw=write --filename="$d/spare" >/dev/null 2>&1
  read -r rawrw _ < <(fio_json both)
  # fio's CPU seconds per GiB moved (its jobs' user + system time over their bytes).
  local fcpu; fcpu=$(py 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"]
cpu=sum((x["usr_cpu"]+x["sys_cpu"])/100*x["job_runtime"]/1000 for x in j)
b=sum(x["read"]["io_bytes"]+x["write"]["io_bytes"] for x in j)
print("%.3f" % (cpu/(b/2**30)))' "$W/fio.json")
  # The spare's pages allocated up front (zeros), as fio's writer found them: on tmpfs a
  # write into a hole also allocates and clears the page (a fifth of a RAID1 rebuild's CPU
  # time in `perf`), which a disk does not do and the anchor did not pay.
  rm -f "$d/spare"; fallocate -l $((comp + 8))M "$d/spare"
  rebuild_onto "$d" "$d/spare" "${m[$last]}" "${m[@]}"
  local t0=$RB_T0 t1=$RB_T1 te=$RB_TE
  local scpu; scpu=$(py "print('%.3f' % ($RB_CPU / ($n * $comp / 1024)))")
  local reb; reb=$(py "print('%.1f' % ($n * $comp / ($t1 - $t0)))")
  # (nan also when both events came in one read: `monitor` delivered rebuild_started late,
  # so the window says nothing; the --add row still does.)
  local rebe; rebe=$(py "t=float('$te'); print('%.1f' % ($n * $comp / t) if t == t and t > 0 else 'nan')")
  echo "| rebuild onto a spare, --add to rebuild_finished seen ($last × ${comp} MiB read, ${comp} MiB written, $(py "print('%.2f s' % ($t1 - $t0))"), no polling) | $rawrw ($last readers + 1 writer) | $reb | $(py "print('%.2f' % ($reb / $rawrw))")× |"
  echo "| rebuild onto a spare, rebuild_started→rebuild_finished events (${te} s) | $rawrw | $rebe | $(py "t='$rebe'; print('%.2f' % (float(t) / $rawrw) if t != 'nan' else 'nan')")× |"
  echo "| CPU seconds per GiB moved: the server over the rebuild (--add to rebuild_finished), fio's anchor | $fcpu (fio) | $scpu (server) | $(py "print('%.2f' % ($scpu / $fcpu))")× |"
}

syncmodel() {
  # The same check and rebuild with every member, and the spare, in the device model
  # ($MODEL): the regime of real disks, where the members' bandwidth and not this machine's
  # 2 cores is the bound. The anchor is the model's bandwidth, exact whatever the load (the
  # model books completions on a virtual clock): a check reads every member at once, so each
  # member should be read at the model's rate; a rebuild writes the spare at it.
  sync_array syncmodel
  local level=$SA_LEVEL n=$SA_N d=$SA_DIR i
  local m=("${SA_M[@]}") fm=()
  local bw; bw=$(py 'import re,sys; v=re.search(r"bw=(\d+)([KMG])", sys.argv[1]); print(int(v[1]) * {"K": 1/1024, "M": 1, "G": 1024}[v[2]])' "$MODEL")
  for ((i = 0; i < n; i++)); do fm+=("$MODEL:${m[$i]}"); done
  echo
  echo "### Check and rebuild on modelled members ($MODEL, RAID$level, $n members, $SA_CHUNK KiB chunk)"
  # The member files unmodelled, for scale: fio reading them all at once.
  local args=()
  for ((i = 0; i < n; i++)); do args+=(--name="m$i" --filename="${m[$i]}"); done
  fio --rw=read --bs=1M --ioengine=psync --offset=8M --size=${SA_COMP}M --time_based \
      --runtime="$RT" --group_reporting --output-format=json --output="$W/fio.json" \
      "${args[@]}" >/dev/null 2>&1
  local rawr; read -r rawr _ < <(fio_json read)
  echo "| job | time s | MiB/s per member | model MiB/s | ratio |"
  echo "|---|---|---|---|---|"
  local t0 t1 out bytes per
  t0=$(date +%s.%N)
  out=$("$RAIDKIT" check "${fm[@]}" 2>/dev/null)
  t1=$(date +%s.%N)
  # "check of array bytes 0..N: ..." -> the bytes each member holds of the array.
  bytes=$(py 'import re,sys; print(int(re.search(r"bytes 0\.\.(\d+)", sys.argv[1])[1]) // int(sys.argv[2]))' "$out" "$SA_DATA")
  per=$(py "print('%.1f' % ($bytes / 2**20 / ($t1 - $t0)))")
  echo "| check, every member read ($(py "print('%.0f' % ($bytes / 2**20))") MiB each) | $(py "print('%.2f' % ($t1 - $t0))") | $per | $bw | $(py "print('%.2f' % ($per / $bw))")× |"
  rm -f "$d/spare"; fallocate -l $((SA_COMP + 8))M "$d/spare"
  rebuild_onto "$d" "$MODEL:$d/spare" "${m[$((n - 1))]}" "${fm[@]}"
  per=$(py "print('%.1f' % ($bytes / 2**20 / ($RB_T1 - $RB_T0)))")
  echo "| rebuild onto a spare, --add to rebuild_finished seen | $(py "print('%.2f' % ($RB_T1 - $RB_T0))") | $per (spare written) | $bw | $(py "print('%.2f' % ($per / $bw))")× |"
  per=$(py "t=float('$RB_TE'); print('%.1f' % ($bytes / 2**20 / t) if t == t and t > 0 else 'nan')")
  echo "| rebuild onto a spare, rebuild_started→rebuild_finished events | $RB_TE | $per (spare written) | $bw | $(py "t='$per'; print('%.2f' % (float(t) / $bw) if t != 'nan' else 'nan')")× |"
  echo
  echo "(Unmodelled, fio reads these files at $(py "print('%.0f' % ($rawr / $n))") MiB/s per member, all $n at once. The server's CPU over the rebuild: $RB_CPU s.)"
}

qd() {
  echo
  echo "### 4 KiB random reads: QD 1→32 (one client) and 1→8 clients (QD1 each), IOPS"
  local d="$W/qd"; mkdir -p "$d"
  truncate -s 512M "$d/one.img"
  dd if=/dev/urandom of="$d/one.img" bs=1M count=512 conv=notrunc status=none
  "$RAIDKIT" create --level 0 --raid-devices 4 --size 136M --assume-clean "$d"/m{0,1,2,3} >/dev/null
  for f in "$d"/m{0,1,2,3}; do dd if=/dev/urandom of="$f" bs=1M seek=8 count=128 conv=notrunc status=none; done
  nbdkit -U "$d/k.sock" --exit-with-parent -f file "$d/one.img" & local KPID=$!
  wait_sock "$d/k.sock"
  serve "$d" "$d"/m{0,1,2,3}
  echo "| load | raw file (io_uring) | nbdkit | raidkit RAID0 ×4 | raidkit / nbdkit |"
  echo "|---|---|---|---|---|"
  local row
  for q in 1 2 4 8 16 32 c2 c4 c8; do
    local extra label
    if [[ $q == c* ]]; then
      extra=(--iodepth=1 --numjobs="${q#c}" --group_reporting); label="${q#c} clients × QD1"
    else
      extra=(--iodepth="$q"); label="1 client × QD$q"
    fi
    fio --name=raw --filename="$d/one.img" --ioengine=io_uring --rw=randread --bs=4k \
        --size=512M "${extra[@]}" --time_based --runtime="$RT" --output-format=json \
        --output="$W/fio.json" >/dev/null 2>&1
    read -r _ raw < <(fio_json read)
    read -r _ kit < <(nbd_fio "$d/k.sock" "" read --rw=randread --bs=4k --size=512M "${extra[@]}")
    read -r _ rk < <(nbd_fio "$d/s.sock" a read --rw=randread --bs=4k --size=512M "${extra[@]}")
    echo "| $label | $raw | $kit | $rk | $(py "print('%.2f' % ($rk / $kit))")× |"
  done
  unserve
  kill "$KPID" 2>/dev/null || true
}

for s in "${SECTIONS[@]}"; do
  case $s in
    qd1) qd1 ;;
    randwrite) randwrite ;;
    sync) sync_ ;;
    syncmodel) syncmodel ;;
    qd) qd ;;
    *) echo "unknown section $s" >&2; exit 2 ;;
  esac
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
