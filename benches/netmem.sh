#!/usr/bin/env bash
# Network members (issue #16): a RAID1 of a local file and a remote nbdkit export (file
# plugin, Unix socket), served by raidkit over NBD and driven by fio (ioengine=nbd).
# Anchors, in the same run: the remote export alone (fio straight at nbdkit) and the local
# file alone (a 1-member RAID1 served the same way). Every file is on /dev/shm.
#   benches/netmem.sh [SIZE_MIB] [ROUNDS]      (default 256 MiB written per run, 2 rounds)
# Tests:
#   write  sequential 1 MiB writes, QD4, a flush after every 16 writes and at the end
#          (synchronous mirroring: a write is acknowledged once both copies have it)
#   read   sequential 1 MiB reads, QD4, of what was written; the bytes each member read
#          come from raidkit's member counters (status --json)
#   return the remote killed, CHANGED_MIB (default 1) MiB written at spread offsets, the remote
#          restarted: time from its restart to in sync, and the bytes copied to it
#   wm-write / wm-read  the same mirror created with the remote `--write-mostly` and
#          `--write-behind WB` (default 256): writes acknowledged once the local copy has
#          them (compared with the local member alone), reads never sent to the remote
#   burst / wm-burst  BURSTS (default 4) write bursts of BURST MiB (default 32: they fit the
#          write-behind queue, 64 MiB) to new regions, the same fio writes; before each the
#          array's write-behind backlog is let drain. MiB/s over the bursts' acknowledged
#          time, against the local member alone doing the same bursts (BURST=0: no rows).
#          What write-behind promises is this: a burst that fits the queue is acknowledged
#          at the local member's speed; a stream longer than the queue (the wm-write rows,
#          SIZE MiB) is paced by the remote once the queue is full, as md's is.
# PREALLOC=1 preallocates every member file, anchors' and mirrors' alike, before each
# row (default 0: sparse, each row's files new; see `fresh`). An A/B run alternates which side
# runs first in a round and ends with a summary: per row the median (min-max) over the
# rounds of its MiB/s, of its ratios to the same round's anchors and of its CPU per MiB,
# and the anchors' own spread.
# REUSE=1 writes the two member files through once when the run starts and reuses them in
# every row, anchors' and mirrors' alike (no row allocates or frees file pages): the mode
# whose anchors hold still in CPU per MiB on this VM (docs/BENCHMARKS.md, session 9). Each
# A/B row is followed by a `vm` line: the row's changes in direct reclaim, compaction, THP,
# page faults, PSI and the MiB the balloon's free page reporting handed back to the host;
# the summary adds each row's CPU-bound ratio (the anchor's CPU per MiB over the row's, same
# round: what the rows would give if both were limited by these 2 cores). ANCHORS_ONLY=1
# measures the anchors alone (a line per round). NETMEM_DIR=DIR puts the files in another
# tmpfs than /dev/shm (one mounted huge=always: 2 MiB pages).
# NBDKIT_NICE=N runs nbdkit at nice N (default 0). On this one machine the remote's own
# receive and file write take the same cores as fio and raidkit; a real remote has cores
# of its own. At 19 its work runs in the time fio and raidkit leave, an approximation of
# that: a diagnostic of how much of a write-behind row's gap is the co-located remote's
# CPU, not a condition to claim a target under.
# BMCHUNK=SIZE is the bitmap chunk of every array (default 1M: the return copies 1 MiB).
# DELAY=DUR puts nbdkit's delay filter in front of the remote (e.g. DELAY=2ms: every remote
# read and write takes 2 ms more, a slow link), in the anchor and in the mirrors alike.
# RAIDKIT=path picks the binary. RAIDKIT_B=path makes it an A/B run: each round measures the
# anchors, then the synchronous and the write-behind mirror's writes with RAIDKIT (rows
# `A-write`, `A-wm-write`, `A-wm-burst`; the burst anchor is the local member alone) and
# RAIDKIT_B (`B-...`), interleaved; no read or return rows. Their last column is the
# server's CPU time (user + system, all threads, from /proc/PID/stat) per MiB written,
# in µs: far less sensitive to a busy machine than MiB/s; then that of every process of
# the row (fio's from its own report, nbdkit's from /proc), and a line per round with the
# anchors' (remote: fio + nbdkit; local: fio + raidkit serve): on a CPU-bound machine the
# ratio of those totals is the throughput ratio a perfect scheduler would give.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE="${1:-256}"
ROUNDS="${2:-2}"
RAIDKIT="${RAIDKIT:-target/release/raidkit}"
[ -x "$RAIDKIT" ] || cargo build --release -q -p raidkit
RAIDKIT="$(realpath "$RAIDKIT")"
W=$(mktemp -d "${NETMEM_DIR:-/dev/shm}/rk-netmem.XXXXXX") # NETMEM_DIR: another tmpfs (e.g. one mounted huge=always)
export RAIDKIT_RUN_DIR="$W/run"
SERVER=
NBDKIT=
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true
  [ -n "$NBDKIT" ] && kill "$NBDKIT" 2>/dev/null || true
  sleep 0.3
  cat "$W/fio.err" 2>/dev/null; rm -rf "$W"
}
trap cleanup EXIT
MEMBER_MIB=$((SIZE + 64))

# Until a connection is accepted (the file exists from bind(), before listen()).
wait_sock() {
  for _ in $(seq 200); do
    python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "no server on $1" >&2; return 1
}

start_nbdkit() { # start_nbdkit FILE
  rm -f "$W/r.sock"
  if [ -n "${DELAY:-}" ]; then
    nice -n "${NBDKIT_NICE:-0}" nbdkit -f -U "$W/r.sock" --filter=delay file "$1" delay-read="$DELAY" delay-write="$DELAY" >/dev/null 2>&1 &
  else
    nice -n "${NBDKIT_NICE:-0}" nbdkit -f -U "$W/r.sock" file "$1" >/dev/null 2>&1 &
  fi
  NBDKIT=$!
  wait_sock "$W/r.sock"
}

start_server() { # start_server MEMBER...
  "$RAIDKIT" serve --socket "$W/a.sock" --export a "$@" >/dev/null 2>"$W/serve.log" &
  SERVER=$!
  wait_sock "$W/a.sock"
  for _ in $(seq 200); do "$RAIDKIT" status --json >/dev/null 2>&1 && return 0; sleep 0.05; done
}

stop_server() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=; }
stop_nbdkit() { kill "${1:--TERM}" "$NBDKIT"; wait "$NBDKIT" 2>/dev/null || true; NBDKIT=; }

fio_mibs() { # fio_mibs URI RW: MiB/s (fio's own CPU µs per MiB goes to $W/fiocpu)
  fio --name=t --ioengine=nbd --uri="$1" --rw="$2" --bs=1M --iodepth=4 --size="${SIZE}M" \
    --fsync=16 --end_fsync=1 --output-format=json 2>"$W/fio.err" |
    python3 -c "import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index('{'):])['jobs'][0]; k='$2'.replace('rand',''); k='write' if 'write' in k else 'read'; print(f\"{j[k]['bw_bytes']/1048576:.1f}\"); open('$W/fiocpu','w').write(str(round((j['usr_cpu']+j['sys_cpu'])/100*j['job_runtime']*1000/$SIZE)))"
}

# Until nothing is queued behind (at most a minute).
wait_backlog() {
  for _ in $(seq 1200); do
    [ "$("$RAIDKIT" status --json | python3 -c "import json,sys; print(sum(m.get('write_behind_backlog', 0) for a in json.load(sys.stdin) for m in a['members']))")" = 0 ] && break
    sleep 0.05
  done
}

# bursts URI: MiB/s of BURSTS bursts of BURST MiB at new offsets (bytes over the sum of
# the bursts' fio run times), each once nothing is queued behind.
bursts() {
  local i ts=""
  for i in $(seq 0 $((BURSTS - 1))); do
    wait_backlog
    ts+=" $(fio --name=b --ioengine=nbd --uri="$1" --rw=write --bs=1M --iodepth=4 --size="${BURST}M" \
      --offset=$((i * BURST))M --fsync=16 --end_fsync=1 --output-format=json 2>"$W/fio.err" |
      python3 -c "import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index('{'):])['jobs'][0]['write']; print(j['io_bytes']/j['bw_bytes'])")"
  done
  python3 -c "import sys; s=[float(x) for x in sys.argv[1:]]; print(f'{$BURSTS*$BURST/sum(s):.1f}')" $ts
}

member_reads() { # bytes read per role, from status
  "$RAIDKIT" status --json | python3 -c "import json,sys; a=json.load(sys.stdin)[0]; print(' '.join(f\"{m['role']}:{m['read_bytes']>>20}MiB\" for m in a['io']))"
}

BURST="${BURST:-32}"
BURSTS="${BURSTS:-4}"
[ $((BURST * BURSTS)) -le "$SIZE" ] || { echo "BURST*BURSTS must fit SIZE" >&2; exit 1; }

# Each row gets new member files, sparse (PREALLOC=1: preallocated). On tmpfs the first
# write into a hole allocates the page: about half of the CPU of a file write (measured:
# raidkit serve 507-625 against 273-351 us/MiB for the local anchor, nbdkit 546-664
# against 312-390). Preallocated, the anchors run 1.3-1.6x faster, but no steadier
# (docs/BENCHMARKS.md, session 8): the rounds that swing are ones where the same work's
# CPU per MiB, fio's own included, jumps 2-8x.
# REUSE=1: the two member files are written through once (every page touched) when the
# run starts and reused by every row, anchors' and mirrors' alike; nothing is freed until
# the run ends. See `vm_line` for why: on this VM a tmpfs page freed by one row and
# allocated by a later one can cost several times its copy.
fresh() {
  if [ "${REUSE:-0}" = 1 ]; then
    [ -f "$W/local.img" ] && [ -f "$W/remote.img" ] && return 0
    for f in "$W/local.img" "$W/remote.img"; do
      dd if=/dev/zero of="$f" bs=1M count="$MEMBER_MIB" status=none
    done
    return 0
  fi
  rm -f "$W"/*.img
  truncate -s "${MEMBER_MIB}M" "$W/local.img" "$W/remote.img"
  [ "${PREALLOC:-0}" = 0 ] || for f in "$W/local.img" "$W/remote.img"; do fallocate -l "${MEMBER_MIB}M" "$f"; done
}

# The VM's memory counters, for `vm_line`: reclaim and compaction (/proc/vmstat), the
# balloon's free page reporting (MiB handed back to the host so far), PSI's cpu and memory
# `some` totals (µs), free memory (MiB).
FORCE= # reused files carry the last row's superblock: a mirror's create must overwrite it
[ "${REUSE:-0}" = 1 ] && FORCE=--force
PR=/sys/module/page_reporting/parameters/reported_kib
vm_snap() {
  local v
  v=$(awk '$1 ~ /^(pgsteal_direct|pgscan_direct|compact_stall|compact_fail|thp_fault_alloc|thp_fault_fallback|thp_file_alloc|thp_file_fallback|pgfault|pgmajfault)$/ {printf "%s=%s ", $1, $2}' /proc/vmstat)
  echo "$v reported_mib=$(( $(cat $PR 2>/dev/null || echo 0) >> 10 )) psi_cpu=$(awk '/^some/ {sub("total=", "", $5); print $5}' /proc/pressure/cpu 2>/dev/null || echo 0) psi_mem=$(awk '/^some/ {sub("total=", "", $5); print $5}' /proc/pressure/memory 2>/dev/null || echo 0) free_mib=$(awk '/^MemFree/ {print int($2 / 1024)}' /proc/meminfo)"
}
# vm_delta BEFORE: each counter's change since BEFORE (free memory as it is now), for a
# `vm` line. Rows whose CPU per MiB jumps can then be matched with direct reclaim,
# compaction, page faults or the host taking pages back.
vm_delta() {
  python3 -c '
import sys
a = dict(kv.split("=") for kv in sys.argv[1].split())
b = dict(kv.split("=") for kv in sys.argv[2].split())
out = []
for k, v in b.items():
    d = int(v) if k == "free_mib" else int(v) - int(a.get(k, 0))
    if k.startswith("psi"): k, d = k + "_ms", d // 1000
    out.append(f"{k}={d}")
print(*out)
' "$1" "$(vm_snap)"
}
URI_R="nbd+unix:///?socket=$W/r.sock"
URI_A="nbd+unix:///a?socket=$W/a.sock"

# CPU time of process $1 so far, in clock ticks (user + system, every thread, live or not).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# µs per MiB of $1 ticks over $2 MiB.
us_per_mib() { echo $(( $1 * 1000000 / $(getconf CLK_TCK) / $2 )); }

# mirror_write BIN [create options...]: MiB/s of the RAID1 (local + remote) written by fio
# (MEASURE=bursts: by `bursts`); the server's CPU µs per MiB written goes to $W/cpu, and
# the CPU µs per MiB of the server, nbdkit and fio together to $W/cpu_all (not for bursts).
mirror_write() {
  local bin="$1"; shift
  fresh
  start_nbdkit "$W/remote.img"
  "$bin" create --level 1 --raid-devices 2 --bitmap internal --bitmap-chunk "${BMCHUNK:-1M}" --assume-clean \
    $FORCE "$@" "$W/local.img" "$URI_R" >/dev/null
  local saved="$RAIDKIT"; RAIDKIT="$bin"
  start_server "$W/local.img" "$URI_R"
  local c0 n0 v0 mib=$SIZE; c0=$(cpu_ticks "$SERVER"); n0=$(cpu_ticks "$NBDKIT"); v0=$(vm_snap)
  echo - >"$W/fiocpu"
  if [ "${MEASURE:-}" = bursts ]; then bursts "$URI_A"; mib=$((BURSTS * BURST)); else fio_mibs "$URI_A" write; fi
  wait_backlog # the CPU of the writes still queued behind counts too
  vm_delta "$v0" >"$W/vm"
  local s n; s=$(us_per_mib $(( $(cpu_ticks "$SERVER") - c0 )) "$mib"); n=$(us_per_mib $(( $(cpu_ticks "$NBDKIT") - n0 )) "$mib")
  echo "$s" >"$W/cpu"
  if [ "$(cat "$W/fiocpu")" = - ]; then echo - >"$W/cpu_all"; else echo $(( s + n + $(cat "$W/fiocpu") )) >"$W/cpu_all"; fi
  stop_server
  RAIDKIT="$saved"
  stop_nbdkit -KILL
}

# summary <rows: per test, the median over the rounds (and min-max) of the row's MiB/s, of
# its ratios to the anchors measured in the same round, of its CPU per MiB; and the
# anchors' own spread. Throughput swings with the machine's load: the medians of ratios
# to same-round anchors, and the CPU per MiB, are what to compare.
summary() {
  python3 -c '
import sys, statistics as st
rows = {}
anchors = {"remote": {}, "local": {}, "local-burst": {}}
anchor_cpu = {}
round_cpu = {}
for line in sys.stdin:
    f = line.split()
    if len(f) >= 3 and f[1] == "anchor-cpu":
        for kv in f[2:]:
            k, v = kv.split("=")
            anchor_cpu.setdefault(k, []).append(v)
            round_cpu.setdefault(f[0], {})[k] = v
    if len(f) < 10 or f[1] in ("test", "anchor-cpu", "vm"):
        continue
    # What a CPU-bound machine would give: the CPU per MiB of the anchor over that of the row (both
    # fio + servers), with the anchors of the same round.
    a = round_cpu.get(f[0], {})
    base = a.get("local" if "wm" in f[1] else "remote")
    f = f + [f"{float(base) / float(f[9]):.2f}" if base and f[9] != "-" else "-"]
    rows.setdefault(f[1], []).append(f)
    if f[2] != "-": anchors["remote"][f[0]] = float(f[2])
    (anchors["local-burst"] if f[1].endswith("burst") else anchors["local"])[f[0]] = float(f[3])
def spread(xs):
    xs = [float(x) for x in xs if x != "-"]
    if not xs: return "-"
    return f"{st.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if max(xs) < 10 else f"{st.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"
print("summary: median (min-max) over", len(anchors["local"]), "rounds")
for k, v in anchors.items():
    if v: print(f"anchor {k} MiB/s {spread(v.values())}")
for k, v in anchor_cpu.items():
    print(f"anchor {k} cpu_us_per_MiB (fio + nbdkit or serve) {spread(v)}")
print("test MiB/s ratio_vs_remote ratio_vs_local server_cpu_us_per_MiB total_cpu_us_per_MiB cpu_bound_ratio")
for k in sorted(rows):
    fs = rows[k]
    print(k, *(spread(f[i] for f in fs) for i in (4, 5, 6, 8, 9, 10)))
'
}

if [ -n "${RAIDKIT_B:-}" ]; then
  RAIDKIT_B="$(realpath "$RAIDKIT_B")"
  # total_cpu: CPU µs per MiB of every process of the row (fio, raidkit serve, nbdkit);
  # the anchors' (fio + nbdkit; fio + raidkit serve) are on each round's `anchor-cpu` line.
  echo "round test anchor_remote anchor_local raid1 ratio_vs_remote ratio_vs_local load server_cpu_us_per_MiB total_cpu_us_per_MiB"
  for r in $(seq "$ROUNDS"); do
    fresh
    start_nbdkit "$W/remote.img"
    n0=$(cpu_ticks "$NBDKIT"); v0=$(vm_snap)
    remote_w=$(fio_mibs "$URI_R" write)
    remote_cpu=$(( $(us_per_mib $(( $(cpu_ticks "$NBDKIT") - n0 )) "$SIZE") + $(cat "$W/fiocpu") ))
    echo "$r vm anchor-remote $(vm_delta "$v0")" | tee -a "$W/rows"
    stop_nbdkit
    fresh
    "$RAIDKIT" create --level 1 --raid-devices 1 --force --bitmap internal --bitmap-chunk "${BMCHUNK:-1M}" "$W/local.img" >/dev/null
    start_server "$W/local.img"
    c0=$(cpu_ticks "$SERVER"); v0=$(vm_snap)
    local_w=$(fio_mibs "$URI_A" write)
    local_cpu=$(( $(us_per_mib $(( $(cpu_ticks "$SERVER") - c0 )) "$SIZE") + $(cat "$W/fiocpu") ))
    echo "$r vm anchor-local $(vm_delta "$v0")" | tee -a "$W/rows"
    stop_server
    echo "$r anchor-cpu remote=$remote_cpu local=$local_cpu" | tee -a "$W/rows"
    if [ "$BURST" -gt 0 ]; then
      fresh
      "$RAIDKIT" create --level 1 --raid-devices 1 --force --bitmap internal --bitmap-chunk "${BMCHUNK:-1M}" "$W/local.img" >/dev/null
      start_server "$W/local.img"
      local_b=$(bursts "$URI_A")
      stop_server
    fi
    [ "${ANCHORS_ONLY:-0}" = 1 ] && { echo "$r anchors $remote_w $local_w ${local_b:--}" | tee -a "$W/rows"; continue; }
    order="A B"; [ $((r % 2)) = 0 ] && order="B A" # neither side always runs first
    for ab in $order; do
      bin="$RAIDKIT"; [ "$ab" = B ] && bin="$RAIDKIT_B"
      w=$(mirror_write "$bin"); wcpu="$(cat "$W/cpu") $(cat "$W/cpu_all")"; wvm=$(cat "$W/vm")
      wm=$(mirror_write "$bin" --write-mostly "$URI_R" --write-behind "${WB:-256}"); wmcpu="$(cat "$W/cpu") $(cat "$W/cpu_all")"
      load=$(cut -d' ' -f1 /proc/loadavg)
      python3 -c "print('$r $ab-write $remote_w $local_w $w', f'{$w/$remote_w:.2f}', f'{$w/$local_w:.2f}', '$load', '$wcpu')"
      echo "$r vm $ab-write $wvm"
      python3 -c "print('$r $ab-wm-write $remote_w $local_w $wm', f'{$wm/$remote_w:.2f}', f'{$wm/$local_w:.2f}', '$load', '$wmcpu')"
      echo "$r vm $ab-wm-write $(cat "$W/vm")"
      if [ "$BURST" -gt 0 ]; then
        wb=$(MEASURE=bursts mirror_write "$bin" --write-mostly "$URI_R" --write-behind "${WB:-256}")
        load=$(cut -d' ' -f1 /proc/loadavg)
        python3 -c "print('$r $ab-wm-burst - $local_b $wb', '-', f'{$wb/$local_b:.2f}', '$load', '$(cat "$W/cpu") -')"
      fi
    done | tee -a "$W/rows"
  done
  summary <"$W/rows"
  exit 0
fi

echo "round test anchor_remote anchor_local raid1 ratio_vs_remote ratio_vs_local member_reads"
for r in $(seq "$ROUNDS"); do
  fresh
  start_nbdkit "$W/remote.img"
  remote_w=$(fio_mibs "$URI_R" write)
  stop_nbdkit
  fresh
  "$RAIDKIT" create --level 1 --raid-devices 1 --force --bitmap internal --bitmap-chunk "${BMCHUNK:-1M}" "$W/local.img" >/dev/null
  start_server "$W/local.img"
  local_w=$(fio_mibs "$URI_A" write)
  local_r=$(fio_mibs "$URI_A" read)
  stop_server
  if [ "$BURST" -gt 0 ]; then
    fresh
    "$RAIDKIT" create --level 1 --raid-devices 1 --force --bitmap internal --bitmap-chunk "${BMCHUNK:-1M}" "$W/local.img" >/dev/null
    start_server "$W/local.img"
    local_b=$(bursts "$URI_A")
    stop_server
    sb=$(MEASURE=bursts mirror_write "$RAIDKIT")
    wb=$(MEASURE=bursts mirror_write "$RAIDKIT" --write-mostly "$URI_R" --write-behind "${WB:-256}")
    python3 -c "print('$r burst - $local_b $sb', '-', f'{$sb/$local_b:.2f}', '-')"
    python3 -c "print('$r wm-burst - $local_b $wb', '-', f'{$wb/$local_b:.2f}', '-')"
  fi
  fresh
  start_nbdkit "$W/remote.img"
  "$RAIDKIT" create --level 1 --raid-devices 2 --bitmap internal --bitmap-chunk "${BMCHUNK:-1M}" --assume-clean $FORCE "$W/local.img" "$URI_R" >/dev/null
  start_server "$W/local.img" "$URI_R"
  raid_w=$(fio_mibs "$URI_A" write)
  raid_r=$(fio_mibs "$URI_A" read)
  reads=$(member_reads)
  python3 -c "print('$r write $remote_w $local_w $raid_w', f'{$raid_w/$remote_w:.2f}', f'{$raid_w/$local_w:.2f}', '-')"
  python3 -c "print('$r read - $local_r $raid_r', '-', f'{$raid_r/$local_r:.2f}', '$reads')"
  # Return: the remote killed, writes spread over the array, the remote restarted. First
  # the array goes clean (idle for a second, its bitmap bits cleared), as a long-running
  # mirror would be when its link drops: else the return also copies every chunk the
  # write test above left dirty (the whole array, on a quiet machine).
  for _ in $(seq 200); do
    "$RAIDKIT" status --json | python3 -c "import json,sys; sys.exit(0 if json.load(sys.stdin)[0]['state'] == 'clean' else 1)" && break
    sleep 0.05
  done
  stop_nbdkit -KILL
  n="${CHANGED_MIB:-1}"
  for i in $(seq 0 $((n - 1))); do
    fio --name=d --ioengine=nbd --uri="$URI_A" --rw=write --bs=1M --size=1M \
      --offset=$(( (i * SIZE / n) << 20 )) --end_fsync=1 >/dev/null 2>&1
  done
  t0=$(date +%s.%N)
  start_nbdkit "$W/remote.img"
  for _ in $(seq 1200); do grep -q "resync_finished" "$W/serve.log" && break; sleep 0.05; done
  t1=$(date +%s.%N)
  copied=$(grep -o '"bytes_copied":[0-9]*' "$W/serve.log" | tail -1 | cut -d: -f2)
  python3 -c "print('$r return', '-', '-', f'{$t1-$t0:.2f}s', '-', '-', 'copied=${copied}B changed=${n}MiB')"
  stop_server
  stop_nbdkit -KILL
  # Write-mostly + write-behind: the remote is written behind, never read.
  fresh
  start_nbdkit "$W/remote.img"
  "$RAIDKIT" create --level 1 --raid-devices 2 --bitmap internal --bitmap-chunk "${BMCHUNK:-1M}" --assume-clean $FORCE \
    --write-mostly "$URI_R" --write-behind "${WB:-256}" "$W/local.img" "$URI_R" >/dev/null
  start_server "$W/local.img" "$URI_R"
  wm_w=$(fio_mibs "$URI_A" write)
  wm_r=$(fio_mibs "$URI_A" read)
  reads=$(member_reads)
  python3 -c "print('$r wm-write $remote_w $local_w $wm_w', f'{$wm_w/$remote_w:.2f}', f'{$wm_w/$local_w:.2f}', '-')"
  python3 -c "print('$r wm-read - $local_r $wm_r', '-', f'{$wm_r/$local_r:.2f}', '$reads')"
  stop_server
  stop_nbdkit -KILL
done
