#!/usr/bin/env python3
"""Writes sample-blkparse.txt: a hand-made trace in blkparse's default output format
("%3d,%-3d %2d %8d %5d.%09lu %5u %2s %3s " + action-specific tail), because blktrace
cannot run in the sandbox this was made in (debugfs trace files are not permitted).
Workload: fio 4K random reads, writeback 128K writes with two back merges, a jbd2 commit
(journal writes, a preflush, a FUA commit block), readahead by cat, one fstrim discard."""
import random

random.seed(6)
lines, seq = [], {0: 0, 1: 0}
T = [0.0]


def ev(cpu, pid, act, rwbs, tail, dt=0.000011):
    T[0] += dt
    seq[cpu] += 1
    s, ns = int(T[0]), int(round((T[0] - int(T[0])) * 1e9))
    lines.append("%3d,%-3d %2d %8d %5d.%09d %5u %2s %3s %s" % (8, 0, cpu, seq[cpu], s, ns, pid, act, rwbs, tail))


def io(cpu, pid, comm, rwbs, sector, n, plug=False, merge=False):
    tail = "%d + %d [%s]" % (sector, n, comm) if n else "[%s]" % comm
    ev(cpu, pid, "Q", rwbs, tail)
    if merge:
        ev(cpu, pid, "M", rwbs, tail)
        return
    ev(cpu, pid, "G", rwbs, tail)
    if plug:
        ev(cpu, pid, "P", "N", "[%s]" % comm)
    ev(cpu, pid, "I", rwbs, tail)
    if plug:
        ev(cpu, pid, "U", "N", "[%s] 1" % comm)
    ev(cpu, pid, "D", rwbs, tail)
    ctail = "%d + %d [0]" % (sector, n) if n else "[0]"
    ev(cpu, 0, "C", rwbs, ctail, dt=0.000180)


# partition remap, as blkparse shows it for a partition's IO
ev(0, 2001, "A", "R", "2048 + 8 <- (8,1) 0")
for i in range(24):
    io(i % 2, 2001, "fio", "R", random.randrange(0, 2_000_000) // 8 * 8, 8)
wb = 400_000
for i in range(6):
    io(1, 77, "kworker/u4:1", "W", wb + i * 272, 256, plug=(i == 0))
    if i in (2, 4):
        io(1, 77, "kworker/u4:1", "W", wb + i * 272 + 256, 8, merge=True)
for j in range(3):
    io(0, 310, "jbd2/sda1-8", "WS", 800_000 + j * 8, 8)
io(0, 310, "jbd2/sda1-8", "FWS", 0, 0)
io(0, 310, "jbd2/sda1-8", "WFS", 800_024, 8)
for k in range(4):
    io(1, 2100, "cat", "RA", 1_200_000 + k * 256, 256)
io(0, 2200, "fstrim", "DS", 2048, 4096)
# a message line blkparse prints for blk_add_trace_msg
ev(1, 0, "m", "N", "cfq2100 slice expired")

summary = """
CPU0 (8,0):
 Reads Queued:          13,       52KiB\t Writes Queued:           6,     2068KiB
 Read Dispatches:       13,       52KiB\t Write Dispatches:        6,     2068KiB
 Reads Requeued:         0\t\t Writes Requeued:         0
 Reads Completed:       13,       52KiB\t Writes Completed:        6,     2068KiB
 Read Merges:            0,        0KiB\t Write Merges:            0,        0KiB
 Read depth:             1        \t Write depth:             1
 IO unplugs:             0        \t Timer unplugs:           0
CPU1 (8,0):
 Reads Queued:          15,      556KiB\t Writes Queued:           8,      772KiB
 Read Dispatches:       15,      556KiB\t Write Dispatches:        6,      764KiB
 Reads Requeued:         0\t\t Writes Requeued:         0
 Reads Completed:       15,      556KiB\t Writes Completed:        6,      764KiB
 Read Merges:            0,        0KiB\t Write Merges:            2,        8KiB
 Read depth:             1        \t Write depth:             1
 IO unplugs:             1        \t Timer unplugs:           0

Total (8,0):
 Reads Queued:          28,      608KiB\t Writes Queued:          14,     2840KiB
 Read Dispatches:       28,      608KiB\t Write Dispatches:       12,     2832KiB
 Reads Requeued:         0\t\t Writes Requeued:         0
 Reads Completed:       28,      608KiB\t Writes Completed:       12,     2832KiB
 Read Merges:            0,        0KiB\t Write Merges:            2,        8KiB
 IO unplugs:             1        \t Timer unplugs:           0

Throughput (R/W): 67555KiB/s / 315555KiB/s
Events (8,0): %d entries
Skips: 0 forward (0 -   0.0%%)
""" % len(lines)
open("sample-blkparse.txt", "w").write("\n".join(lines) + "\n" + summary)
