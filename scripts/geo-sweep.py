#!/usr/bin/env python3
"""Sweep odd array geometries through the raidkit CLI.

For each geometry: create, import random data, export and compare, check
(clean), corrupt one member's data region at a few offsets, check (every
changed byte must be inside a reported range), repair (the original bytes
must come back), export degraded with members missing (same bytes).

Usage: scripts/geo-sweep.py [--bin target/release/raidkit] [--dir /dev/shm/geo-sweep]
                            [--only SUBSTRING] [--quick]
Exit status 1 if any case failed; one line per case on stdout.
"""

import argparse
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

KIB = 1024
MIB = 1024 * 1024


def run(args, check=True):
    p = subprocess.run(args, capture_output=True)
    if check and p.returncode != 0:
        raise Failure(
            "command failed (%d): %s\n%s"
            % (p.returncode, " ".join(args), p.stderr.decode(errors="replace")[-2000:])
        )
    return p


class Failure(Exception):
    pass


def cases(quick):
    """(name, create-args, member sizes in bytes, redundancy, mirror copies)."""
    out = []
    chunks = [4 * KIB, 8 * KIB, 64 * KIB, 1 * MIB]
    metas = ["0.90", "1.0", "1.1", "1.2"]
    rnd = random.Random(7)

    def sizes(n, chunk, unequal):
        base = max(3 * MIB, 6 * chunk) + 37 * KIB  # not a multiple of the chunk
        if unequal:
            return [base + rnd.randrange(0, 8) * 68 * KIB for _ in range(n)]
        return [base] * n

    def add(level, n, layout, chunk, meta, extra=(), unequal=False):
        args = ["--level", str(level), "--raid-devices", str(n), "--metadata", meta]
        if level not in (1,):
            args += ["--chunk", "%dK" % (chunk // KIB)]
        if layout:
            args += ["--layout", layout]
        args += list(extra)
        name = "l%s n%d %s c%dK m%s%s%s" % (
            level,
            n,
            layout or "-",
            chunk // KIB,
            meta,
            " " + " ".join(extra) if extra else "",
            " uneq" if unequal else "",
        )
        out.append((name, level, n, layout, args, sizes(n, chunk, unequal)))

    r5 = [
        "left-asymmetric",
        "right-asymmetric",
        "left-symmetric",
        "right-symmetric",
        "parity-first",
        "parity-last",
    ]
    r6 = r5 + [
        "ddf-zero-restart",
        "ddf-N-restart",
        "ddf-N-continue",
        "left-asymmetric-6",
        "right-asymmetric-6",
        "left-symmetric-6",
        "right-symmetric-6",
        "parity-first-6",
    ]
    r10 = ["n2", "n3", "f2", "f3", "o2", "o3"]
    i = 0
    for n in [2, 3, 5]:
        add(0, n, None, chunks[i % 4], metas[i % 4], unequal=(i % 2 == 0))
        i += 1
    for n in [2, 3]:
        add(1, n, None, 64 * KIB, metas[i % 4], unequal=True)
        i += 1
    for n in [3, 5]:
        add(4, n, None, chunks[i % 4], metas[i % 4], unequal=(n == 5))
        i += 1
    for lay, n in itertools.product(r5, [3, 4, 5, 7]):
        if quick and n not in (3, 5):
            continue
        extra = ["--bitmap", "internal"] if i % 3 == 0 else []
        if i % 5 == 0 and metas[i % 4] != "0.90":
            extra.append("--bbl")
        add(5, n, lay, chunks[i % 4], metas[i % 4], extra, unequal=(i % 2 == 1))
        i += 1
    for lay in r6:
        for n in [4, 5, 6, 7, 8, 9]:
            if quick and n not in (4, 7):
                continue
            if lay.endswith("-6") and n < 4:
                continue
            extra = ["--bitmap", "internal"] if i % 3 == 0 else []
            if i % 5 == 0 and metas[i % 4] != "0.90":
                extra.append("--bbl")
            add(6, n, lay, chunks[i % 4], metas[i % 4], extra, unequal=(i % 2 == 1))
            i += 1
    for lay in r10:
        copies = int(lay[1])
        for n in [3, 4, 5, 7]:
            if n < copies:
                continue
            extra = ["--bitmap", "internal"] if i % 3 == 0 else []
            add(10, n, lay, chunks[i % 4], metas[i % 4], extra, unequal=(i % 2 == 1))
            i += 1
    return out


def redundancy(level, n, layout):
    """(members that may be missing, copies of each block)."""
    if level == 0:
        return 0, 1
    if level == 1:
        return n - 1, n
    if level in (4, 5):
        return 1, 1
    if level == 6:
        return 2, 1
    copies = int(layout[1])
    return copies - 1, copies


def one_case(binary, d, name, level, n, layout, args, sizes, rnd):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    members = [os.path.join(d, "m%d" % i) for i in range(n)]
    for m, s in zip(members, sizes):
        with open(m, "wb") as f:
            f.truncate(s)
    lost, copies = redundancy(level, n, layout)
    # RAID5/RAID4 and 2-way mirrors need the sidecar to know which copy is right
    need_sums = level in (4, 5) or copies == 2
    sums = os.path.join(d, "sums") if need_sums else None
    cargs = [binary, "create", "--force"] + args
    if sums:
        cargs += ["--checksums", sums]
    run(cargs + members)
    det = json.loads(run([binary, "detail", "--json"] + members).stdout)
    size = det["array_bytes"]
    exa = json.loads(run([binary, "examine", "--json"] + members).stdout)
    data = rnd.randbytes(size)
    inp = os.path.join(d, "in")
    with open(inp, "wb") as f:
        f.write(data)
    iargs = [binary, "import", "--input", inp]
    if sums:
        iargs += ["--checksums", sums]
    run(iargs + members)
    out = os.path.join(d, "out")

    def export(ms, what):
        if os.path.exists(out):
            os.remove(out)
        run([binary, "export", "--output", out] + ms)
        with open(out, "rb") as f:
            got = f.read()
        return got

    got = export(members, "clean")
    if got != data:
        raise Failure("export != import")

    def check(action="check"):
        a = [binary, action, "--json"]
        if sums:
            a += ["--checksums", sums]
        p = run(a + members, check=False)
        try:
            return json.loads(p.stdout)
        except ValueError:
            raise Failure("%s rc %d: %s" % (action, p.returncode, p.stderr.decode(errors="replace")[-800:]))

    c = check()
    if c["mismatch_bytes"] != 0:
        raise Failure("clean check reports %s" % c["mismatch_ranges"])

    # degraded exports
    if lost:
        for gone in itertools.combinations(range(n), lost):
            if rnd.random() > 3.0 / max(1, len(list(itertools.combinations(range(n), lost)))) and gone[0] != 0:
                continue
            ms = [m for i, m in enumerate(members) if i not in gone]
            if export(ms, "degraded") != data:
                raise Failure("degraded export without %s differs" % (gone,))

    if level == 0:
        return "ok (no redundancy)"
    return corrupt_repair(binary, d, members, level, n, data, sums, rnd)


def corrupt_repair(binary, d, members, level, n, data, sums, rnd):
    """Corrupt one member's data region; check must see it, repair must undo it."""
    size = len(data)
    out = os.path.join(d, "out")
    det = json.loads(run([binary, "detail", "--json"] + members).stdout)
    exa = json.loads(run([binary, "examine", "--json"] + members).stdout)

    def export(ms, what):
        if os.path.exists(out):
            os.remove(out)
        run([binary, "export", "--output", out] + ms)
        with open(out, "rb") as f:
            return f.read()

    def check(action="check"):
        a = [binary, action, "--json"]
        if sums:
            a += ["--checksums", sums]
        p = run(a + members, check=False)
        try:
            return json.loads(p.stdout)
        except ValueError:
            raise Failure("%s rc %d: %s" % (action, p.returncode, p.stderr.decode(errors="replace")[-800:]))

    # corrupt one member's data region
    victim = rnd.randrange(n)
    e = [x for x in exa if x["role"] == victim][0]
    dstart = e["data_offset"] * 512
    dlen = min(e["data_size"], e.get("size_sectors") or e["data_size"]) * 512
    # only where array data lives: used size
    used = det.get("used_dev_bytes") or (det.get("used_dev_sectors", 0) * 512)
    if used:
        dlen = min(dlen, used)
    with open(members[victim], "r+b") as f:
        original = {}
        offs = sorted(set(rnd.randrange(0, dlen - 16) & ~15 for _ in range(3)))
        for o in offs:
            f.seek(dstart + o)
            original[o] = f.read(16)
            f.seek(dstart + o)
            f.write(bytes(b ^ 0x5A for b in original[o]))
    got = export(members, "corrupt")
    changed = [i for i in range(0, size, 16) if got[i : i + 16] != data[i : i + 16]]
    c = check()
    ranges = [(r["offset"], r["offset"] + r["len"]) for r in c["mismatch_ranges"]]
    if c["mismatch_bytes"] == 0:
        raise Failure("check after corrupting member %d at %s found nothing" % (victim, offs))
    for ch in changed:
        if not any(a <= ch < b for a, b in ranges):
            raise Failure("changed array byte %d not in reported ranges %s" % (ch, ranges))
    # every verdict must blame the corrupted member (RAID6 from P+Q, mirrors by vote or
    # sidecar, RAID5 by sidecar), and there must be one per corrupted place at most
    blamed = [v for v in c["verdicts"]]
    for v in blamed:
        if v.get("role") != victim:
            raise Failure("verdict blames %s, not member %d: %s" % (v.get("role"), victim, json.dumps(v)[:400]))
    if not blamed:
        raise Failure("no verdicts for corruption at member %d %s" % (victim, offs))
    r = check("repair")
    got = export(members, "repaired")
    if got != data:
        bad = [i for i in range(0, size, 4096) if got[i : i + 4096] != data[i : i + 4096]]
        raise Failure(
            "repair did not restore the data (victim %d offs %s): 4K blocks %s differ; repair said %s"
            % (victim, offs, bad[:8], json.dumps(r["verdicts"])[:600])
        )
    # RAID10 leaves slots past the last whole chunk of a copy unused: only
    # levels that use all of the used size must get every byte back
    with open(members[victim], "rb") as f:
        for o in offs if level != 10 else []:
            f.seek(dstart + o)
            if f.read(16) != original[o]:
                raise Failure(
                    "member %d byte %d not restored by repair (used %d array %d changed %s ranges %s; after repair check %s)"
                    % (victim, o, used, size, changed[:4], ranges, check()["mismatch_ranges"])
                )
    c = check()
    if c["mismatch_bytes"] != 0:
        raise Failure("check after repair reports %s" % c["mismatch_ranges"])
    res = "ok (victim %d, %d changed, %d ranges)" % (victim, len(changed), len(ranges))
    if level == 6 or (level in (1, 10) and redundancy(level, n, det["layout"])[1] >= 3):
        res += degraded_scrub(binary, d, members, level, n, data, exa, used, rnd, check, export)
    return res


def degraded_scrub(binary, d, members, level, n, data, exa, used, rnd, check, export):
    """One member left out, another corrupted: check may blame only the corrupted one;
    repair must not destroy redundancy: with the corruption undone, the degraded array
    must read the original bytes and check clean. Last phase (the left-out member goes
    stale)."""
    gone = rnd.randrange(n)
    victim = (gone + 1 + rnd.randrange(n - 1)) % n
    rest = [m for i, m in enumerate(members) if i != gone]
    e = [x for x in exa if x["role"] == victim][0]
    at = e["data_offset"] * 512 + (rnd.randrange(0, used - 16) & ~15)

    def flip():
        with open(members[victim], "r+b") as f:
            f.seek(at)
            b = f.read(16)
            f.seek(at)
            f.write(bytes(x ^ 0x3C for x in b))

    def scrub(action):
        a = [binary, action, "--json"] + rest
        p = run(a, check=False)
        try:
            return json.loads(p.stdout)
        except ValueError:
            raise Failure("degraded %s rc %d: %s" % (action, p.returncode, p.stderr.decode(errors="replace")[-600:]))

    with open(members[victim], "rb") as f:
        f.seek(at)
        orig = f.read(16)
    flip()
    c = scrub("check")
    for v in c["verdicts"]:
        if v.get("role") not in (None, victim):
            raise Failure("degraded (member %d out) check blames member %s, corrupted %d: %s" % (gone, v.get("role"), victim, json.dumps(v)[:300]))
    if level != 6:
        # two copies left: undecided, and repair copies the first copy over the other
        # (md's rule, documented); nothing more to require
        return "; degraded check ok (out %d, bad %d)" % (gone, victim)
    scrub("repair")
    # a repair that wrote the corrupted member right is fine; else undo the corruption
    with open(members[victim], "rb") as f:
        f.seek(at)
        now = f.read(16)
    if now != orig:
        flip()
    ex = export(rest, "degraded-undone")
    if ex != data:
        raise Failure("degraded repair (member %d out, %d corrupted at %d) lost data" % (gone, victim, at))
    c = scrub("check")
    if c["mismatch_bytes"]:
        raise Failure("degraded repair (member %d out, %d corrupted) left redundancy wrong: %s" % (gone, victim, c["mismatch_ranges"][:4]))
    return "; degraded scrub ok (out %d, bad %d, %d verdicts)" % (gone, victim, len(c["verdicts"]))


GROWS = [
    # (create args, members at create, grow args, members after)
    ("-l 5 -c 4K -p parity-first -e 1.2", 3, "--raid-devices 4", 4),
    ("-l 6 -c 8K -p ddf-N-continue -e 1.0", 4, "--raid-devices 5", 5),
    ("-l 6 -c 64K -p right-asymmetric -e 0.90", 5, "--raid-devices 7", 7),
    ("-l 5 -c 64K -p left-symmetric -e 1.1", 3, "--level 6 --raid-devices 4", 4),
    ("-l 5 -c 8K -p left-symmetric -e 1.2", 4, "--level 6 --layout left-symmetric-6 --raid-devices 5", 5),
    ("-l 6 -c 8K -p parity-first-6 -e 1.2", 5, "--level 5", 5),
    ("-l 5 -c 64K -p left-symmetric -e 0.90", 5, "--chunk 8K", 5),
    # the used size (2084 KiB) is no multiple of 1M: refused (md refuses it too)
    ("-l 5 -c 4K -p left-symmetric -e 1.2", 5, "--chunk 1M REFUSE", 5),
    ("-l 5 -c 64K -p left-symmetric -e 1.2", 3, "--layout right-asymmetric", 3),
    ("-l 6 -c 64K -p left-symmetric -e 1.2", 6, "--layout parity-last", 6),
    ("-l 10 -c 64K -p n2 -e 1.2", 3, "--raid-devices 5", 5),
    ("-l 10 -c 8K -p n3 -e 1.2", 5, "--raid-devices 7", 7),
    ("-l 0 -c 8K -e 1.2", 3, "--raid-devices 5", 5),
    ("-l 1 -e 1.2", 2, "--raid-devices 3", 3),
    ("-l 1 -e 1.2", 2, "--level 5", 2),
    ("-l 4 -c 8K -e 1.2", 3, "--raid-devices 4", 4),
    ("-l 6 -c 8K -p left-symmetric -e 1.2", 6, "--raid-devices 5 --array-size SHRINK", 5),
]


def export_all(binary, d, members):
    out = os.path.join(d, "out")
    if os.path.exists(out):
        os.remove(out)
    run([binary, "export", "--output", out] + members)
    with open(out, "rb") as f:
        return f.read()


def one_grow(binary, d, cargs, n0, gargs, n1, rnd):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    members = [os.path.join(d, "m%d" % i) for i in range(max(n0, n1))]
    for i, m in enumerate(members):
        with open(m, "wb") as f:
            # unequal sizes, except for RAID0 (md takes over single-zone RAID0 only)
            f.truncate(3 * MIB + 37 * KIB + (0 if "-l 0" in cargs else i * 68 * KIB))
    old = members[:n0]
    run([binary, "create", "--force", "--raid-devices", str(n0)] + cargs.split() + old)
    size = json.loads(run([binary, "detail", "--json"] + old).stdout)["array_bytes"]
    data = rnd.randbytes(size)
    inp = os.path.join(d, "in")
    with open(inp, "wb") as f:
        f.write(data)
    run([binary, "import", "--input", inp] + old)
    g = gargs.split()
    keep = size
    if "SHRINK" in g:
        # the size the new shape gives, from the dry run
        # the size the new shape gives, from the refusal without --array-size
        bare = [a for a in g if a not in ("--array-size", "SHRINK")]
        p = run([binary, "grow", "--dry-run"] + bare + old, check=False)
        import re

        m = re.search(rb"the reshaped array holds (\d+) bytes", p.stderr)
        if not m:
            raise Failure("no shrink size in the refusal: %s" % p.stderr[-500:])
        keep = int(m.group(1))
        g[g.index("SHRINK")] = "%dK" % (keep // KIB)
    if n1 > n0:
        for m in members[n0:n1]:
            g += ["--add", m]
    if "REFUSE" in g:
        g.remove("REFUSE")
        p = run([binary, "grow"] + g + old, check=False)
        if p.returncode == 0 or b"without losing data" not in p.stderr:
            raise Failure("expected a refusal: %s" % p.stderr[-400:])
        if export_all(binary, d, old) != data:
            raise Failure("the refused grow changed the data")
        return "ok (refused: %s)" % p.stderr.decode(errors="replace").strip()[:90]
    bf = os.path.join(d, "backup")
    p = run([binary, "grow"] + g + old, check=False)
    if p.returncode != 0 and b"backup" in p.stderr:
        p = run([binary, "grow", "--backup-file", bf] + g + old)
    elif p.returncode != 0:
        raise Failure("grow failed: %s" % p.stderr.decode(errors="replace")[-600:])
    new = members[:n1] if n1 >= n0 else members[:n1]
    if n1 < n0:
        new = old  # the removed member stays listed (spare)
    out = os.path.join(d, "out")
    run([binary, "export", "--output", out] + new)
    with open(out, "rb") as f:
        got = f.read()
    if got[: min(keep, size)] != data[: min(keep, size)]:
        bad = [i for i in range(0, min(keep, size), 4096) if got[i : i + 4096] != data[i : i + 4096]]
        raise Failure("after grow the data differs: 4K blocks %s of %d" % (bad[:8], len(bad)))
    p = run([binary, "check", "--json"] + new, check=False)
    c = json.loads(p.stdout)
    if c["mismatch_bytes"]:
        raise Failure("check after grow: %s" % c["mismatch_ranges"][:5])
    det = json.loads(run([binary, "detail", "--json"] + new).stdout)
    if det["level"] != "raid0":
        lost, copies = redundancy(int(det["level"][4:]), det["raid_disks"], det["layout"])
        sums = None
        if det["level"] in ("raid4", "raid5") or copies == 2:
            sums = os.path.join(d, "sums")
            run([binary, "checksums", "init", "--checksums", sums] + new)
        keep = min(keep, size, det["array_bytes"])
        with open(out, "rb") as f:
            now = f.read()
        lv = int(det["level"][4:])
        corrupt_repair(binary, d, new, lv, det["raid_disks"], now, sums, rnd)
    return "ok %s %s %d devs %s -> %d bytes" % (det["level"], det["layout"], det["raid_disks"], det.get("chunk_bytes"), det["array_bytes"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/raidkit")
    ap.add_argument("--dir", default="/dev/shm/geo-sweep")
    ap.add_argument("--only", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--grow", action="store_true", help="only the reshape cases")
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    # Our own directory under --dir (which may be the user's, holding other files): each
    # case remakes its subdirectory "case", and all of it is removed at the end.
    os.makedirs(a.dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="geo-sweep-", dir=a.dir)
    work = os.path.join(base, "case")
    fails = 0
    for k, (cargs, n0, gargs, n1) in enumerate(GROWS if a.grow else []):
        name = "grow %s n%d: %s" % (cargs, n0, gargs)
        if a.only and a.only not in name:
            continue
        try:
            res = one_grow(binary, work, cargs, n0, gargs, n1, random.Random(k))
            print("PASS %-70s %s" % (name, res), flush=True)
        except Failure as e:
            fails += 1
            print("FAIL %-70s %s" % (name, str(e).replace("\n", " | ")[:1500]), flush=True)
    for k, (name, level, n, layout, args, sizes) in enumerate([] if a.grow else cases(a.quick)):
        if a.only and a.only not in name:
            continue
        rnd = random.Random(a.seed * 1000 + k)
        try:
            res = one_case(binary, work, name, level, n, layout, args, sizes, rnd)
            print("PASS %-50s %s" % (name, res), flush=True)
        except Failure as e:
            fails += 1
            print("FAIL %-50s %s" % (name, str(e).replace("\n", " | ")[:1500]), flush=True)
    shutil.rmtree(base, ignore_errors=True)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
