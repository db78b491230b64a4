//! End-to-end engine tests over real files: create every level/layout, write with random
//! offsets and sizes against an in-memory model, re-assemble, check parity, degrade.

use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::BlockDev;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::hooked::{members, Hooked, Hooks};
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;

mod cases;
use cases::{make, read_all, ro, rw, Case, Rng};

fn removal_sets(level: Level, n: usize) -> Vec<Vec<usize>> {
    match level {
        Level::Raid1 => (0..n)
            .map(|keep| (0..n).filter(|&i| i != keep).collect())
            .collect(),
        Level::Raid4 | Level::Raid5 => (0..n).map(|i| vec![i]).collect(),
        Level::Raid6 => {
            let mut v = Vec::new();
            for a in 0..n {
                for b in a + 1..n {
                    v.push(vec![a, b]);
                }
            }
            v
        }
        _ => Vec::new(),
    }
}

fn run_case(c: Case) {
    let dir = TempDir::new("rk-engine").unwrap();
    let (ps, model) = make(&c, &dir);
    let got = read_all(&ps, &ro()).unwrap();
    assert!(
        got == model,
        "{:?} {}: contents differ after reassembly",
        c.level,
        c.layout
    );
    // Redundancy is consistent.
    let arr = assemble_paths(&ps, &ro()).unwrap();
    assert_consistent(&arr, &format!("{:?} {}", c.level, c.layout));
    drop(arr);
    // Shuffled argument order assembles the same.
    let mut rev = ps.clone();
    rev.reverse();
    assert!(read_all(&rev, &ro()).unwrap() == model);
    // Degraded reads.
    for rm in removal_sets(c.level, c.n) {
        let sub: Vec<PathBuf> = ps
            .iter()
            .enumerate()
            .filter(|(i, _)| !rm.contains(i))
            .map(|(_, p)| p.clone())
            .collect();
        let got = read_all(&sub, &ro()).unwrap();
        assert!(
            got == model,
            "{:?} {} without {:?}: contents differ",
            c.level,
            c.layout,
            rm
        );
    }
}

#[test]
fn raid5_all_layouts() {
    for l in [
        "left-asymmetric",
        "right-asymmetric",
        "left-symmetric",
        "right-symmetric",
        "parity-first",
        "parity-last",
    ] {
        run_case(Case::v12(Level::Raid5, l, 4, 16, 3));
    }
    run_case(Case::v12(Level::Raid5, "left-symmetric", 2, 8, 2));
}

#[test]
fn raid6_all_layouts() {
    for l in [
        "left-asymmetric",
        "right-asymmetric",
        "left-symmetric",
        "right-symmetric",
        "parity-first",
        "parity-last",
        "ddf-zero-restart",
        "ddf-N-restart",
        "ddf-N-continue",
        "left-asymmetric-6",
        "right-asymmetric-6",
        "left-symmetric-6",
        "right-symmetric-6",
        "parity-first-6",
    ] {
        run_case(Case::v12(Level::Raid6, l, 5, 8, 2));
    }
}

/// Chunks larger than the slice a full-stripe write generates parity for at a time
/// (`full_stripe_slice`: 128 KiB at 6 members): P/Q must be right in every slice,
/// including a DDF layout with an unused syndrome slot and RAID5's XOR.
#[test]
fn large_chunks_full_stripe_writes_in_slices() {
    for (level, layout, n, chunk_k) in [
        (Level::Raid6, "left-symmetric", 6, 512),
        (Level::Raid6, "ddf-N-restart", 5, 1024),
        (Level::Raid5, "left-symmetric", 4, 1024),
    ] {
        run_case(Case {
            level,
            layout,
            n,
            chunk_k,
            meta: "1.2",
            member_mib: 8,
        });
    }
}

#[test]
fn raid4_raid1_raid0_linear() {
    run_case(Case::v12(Level::Raid4, "default", 3, 32, 3));
    run_case(Case::v12(Level::Raid1, "default", 3, 0, 3));
    run_case(Case::v12(Level::Raid0, "default", 3, 64, 3));
    run_case(Case::v12(Level::Linear, "default", 3, 0, 2));
}

#[test]
fn raid10_layouts() {
    for (l, n) in [
        ("n2", 4),
        ("n2", 3),
        ("f2", 4),
        ("o2", 3),
        ("n3", 4),
        ("f3", 5),
        ("o3", 4),
    ] {
        run_case(Case::v12(Level::Raid10, l, n, 16, 3));
    }
}

#[test]
fn metadata_versions() {
    for m in ["0.90", "1.0", "1.1", "1.2"] {
        run_case(Case {
            level: Level::Raid5,
            layout: "left-symmetric",
            n: 3,
            chunk_k: 64,
            meta: m,
            member_mib: 3,
        });
        run_case(Case {
            level: Level::Raid1,
            layout: "default",
            n: 2,
            chunk_k: 0,
            meta: m,
            member_mib: 2,
        });
    }
}

#[test]
fn degraded_write_then_stale_member_refused() {
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 4, 16, 2);
    let (ps, mut model) = make(&c, &dir);
    let sub: Vec<PathBuf> = ps[1..].to_vec();
    let arr = assemble_paths(&sub, &rw()).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    arr.write(12345, &data).unwrap();
    model[12345..12345 + data.len()].copy_from_slice(&data);
    arr.stop().unwrap();
    assert!(read_all(&sub, &ro()).unwrap() == model);
    // The left-out member is stale now: assembling it with the others is refused.
    let err = read_all(&ps, &ro()).map(|v| v.len()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("m0.img") && msg.contains("out of date"),
        "{msg}"
    );
}

#[test]
fn wrong_array_and_duplicates_refused() {
    let d1 = TempDir::new("rk-engine").unwrap();
    let d2 = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid1, "default", 2, 0, 2);
    let (a, _) = make(&c, &d1);
    let (b, _) = make(&c, &d2);
    let err = read_all(&[a[0].clone(), b[1].clone()], &ro())
        .map(|v| v.len())
        .unwrap_err()
        .to_string();
    assert!(err.contains("belongs to array"), "{err}");
    let err = read_all(&[a[0].clone(), a[0].clone()], &ro())
        .map(|v| v.len())
        .unwrap_err()
        .to_string();
    assert!(err.contains("same device"), "{err}");
}

#[test]
fn raid0_missing_member_names_role() {
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid0, "default", 3, 64, 2);
    let (ps, _) = make(&c, &dir);
    let err = read_all(&ps[..2], &ro())
        .map(|v| v.len())
        .unwrap_err()
        .to_string();
    assert!(err.contains("role(s) 2 missing"), "{err}");
}

#[test]
fn create_refuses_nonblank_without_force() {
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 2);
    for p in &ps {
        std::fs::write(p, vec![0u8; 2 << 20]).unwrap();
    }
    std::fs::write(&ps[1], {
        let mut v = vec![0u8; 2 << 20];
        v[100] = 1;
        v
    })
    .unwrap();
    let o = create_options(Level::Raid1, &ps);
    let err = create(&o, &mut |_, _| {}).unwrap_err().to_string();
    assert!(
        err.contains("not blank (non-zero data at byte 100)"),
        "{err}"
    );
    let mut o2 = o.clone();
    o2.force = true;
    create(&o2, &mut |_, _| {}).unwrap().stop().unwrap();
    // Now it carries a superblock: refused again without --force.
    let err = create(&o, &mut |_, _| {}).unwrap_err().to_string();
    assert!(err.contains("carries a 1.2 MD superblock"), "{err}");
}

/// A member with a bad-block log: the listed sectors are never read; the data comes from
/// redundancy instead (here the bad sectors hold garbage, so reading them would be caught).
#[test]
fn bad_block_log_is_honoured_on_reads() {
    use raidkit_format::badblocks::{self, BadRange};
    use raidkit_format::v1::{feature, SuperblockV1};
    use std::os::unix::fs::FileExt;
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 3, 64, 4);
    let (ps, model) = make(&c, &dir);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ps[1])
        .unwrap();
    let mut sbuf = vec![0u8; 4096];
    f.read_exact_at(&mut sbuf, 8 * 512).unwrap();
    let mut sb = SuperblockV1::parse(&sbuf).unwrap();
    let bad = [
        BadRange {
            start: sb.data_offset + 5,
            len: 3,
        },
        BadRange {
            start: sb.data_offset + 300,
            len: 200,
        },
    ];
    sb.bblog_offset = 16;
    sb.bblog_size = 8;
    sb.bblog_shift = 0;
    sb.feature_map |= feature::BAD_BLOCKS;
    f.write_all_at(&sb.encode()[..sb.write_len()], 8 * 512)
        .unwrap();
    f.write_all_at(&badblocks::encode(&bad, 0, 4096).unwrap(), 24 * 512)
        .unwrap();
    for b in &bad {
        f.write_all_at(&vec![0xEE; (b.len * 512) as usize], b.start * 512)
            .unwrap();
    }
    drop(f);
    assert!(
        read_all(&ps, &ro()).unwrap() == model,
        "bad blocks were read instead of reconstructed"
    );
    // With another member missing there is no redundancy for those sectors: the read fails
    // (an error, never wrong data).
    let sub = vec![ps[1].clone(), ps[2].clone()];
    let e = read_all(&sub, &ro())
        .map(|v| v.len())
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot be read"), "{e}");
}

/// Member hooks that count bytes read, to assert the write strategy.
#[derive(Default)]
struct CountReads(std::sync::atomic::AtomicU64);
impl Hooks for CountReads {
    fn read(&self, inner: &dyn BlockDev, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        self.0
            .fetch_add(buf.len() as u64, std::sync::atomic::Ordering::Relaxed);
        inner.read_at(buf, off)
    }
}
type Counting = Hooked<CountReads>;

fn counted(ps: &[PathBuf]) -> (raidkit_engine::Array, Vec<std::sync::Arc<Counting>>) {
    let cs: Vec<std::sync::Arc<Counting>> = ps
        .iter()
        .map(|p| {
            let file = raidkit_engine::FileDev::open(p, true).unwrap();
            std::sync::Arc::new(Hooked::new(file, CountReads::default()))
        })
        .collect();
    let arr = raidkit_engine::assemble(members(&cs), &rw()).unwrap();
    (arr, cs)
}

fn reads(cs: &[std::sync::Arc<Counting>]) -> u64 {
    cs.iter()
        .map(|c| c.0.swap(0, std::sync::atomic::Ordering::Relaxed))
        .sum()
}

#[test]
fn write_strategy_full_stripe_rmw_rcw() {
    for (level, n, first_reads, second_reads) in [
        // RAID5, 5 members (4 data): a 4 KiB write reads old data + old P (8 KiB) = RMW;
        // so does a write to another block of the row (the cache knows only the first).
        (Level::Raid5, 5usize, 8192, 8192),
        // RAID6, 5 members (3 data): RMW would read 12 KiB, RCW reads the 2 other data
        // blocks (8 KiB), which fills the row in the stripe cache: the next write to
        // another block of the row reads nothing.
        (Level::Raid6, 5usize, 8192, 0),
    ] {
        let dir = TempDir::new("rk-engine").unwrap();
        let ps = member_files(dir.path(), n);
        let mut o = create_options(level, &ps);
        o.chunk_bytes = Some(64 * 1024);
        o.create_size = Some(4 << 20);
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let (arr, cs) = counted(&ps);
        let k = arr.geometry().data_disks() as u64;
        let stripe = 64 * 1024 * k;
        // Prime dirty state so the superblock write does not count.
        arr.write(0, &vec![1u8; stripe as usize]).unwrap();
        reads(&cs);
        // Full stripes: nothing is read.
        arr.write(stripe, &vec![2u8; (3 * stripe) as usize])
            .unwrap();
        assert_eq!(
            reads(&cs),
            0,
            "{level:?}: full-stripe write read from members"
        );
        // A 4 KiB write inside one chunk.
        arr.write(stripe * 5 + 8192, &[3u8; 4096]).unwrap();
        assert_eq!(reads(&cs), first_reads, "{level:?}: first write to the row");
        // Another data block of the same row.
        arr.write(stripe * 5 + 64 * 1024 + 8192, &[4u8; 4096])
            .unwrap();
        assert_eq!(
            reads(&cs),
            second_reads,
            "{level:?}: second write to the row"
        );
        arr.stop().unwrap();
        let got = read_all(&ps, &ro()).unwrap();
        assert!(got[(stripe * 5 + 8192) as usize..][..4096]
            .iter()
            .all(|&b| b == 3));
        assert!(got[(stripe * 5 + 64 * 1024 + 8192) as usize..][..4096]
            .iter()
            .all(|&b| b == 4));
        let arr = assemble_paths(&ps, &ro()).unwrap();
        assert_consistent(&arr, &format!("{level:?}"));
    }
}

/// Writes with the most members a level can lose, then a degraded read-back.
#[test]
fn degraded_writes_every_level() {
    for (level, layout, n, missing) in [
        (Level::Raid6, "left-symmetric", 5usize, vec![1usize, 3]),
        (Level::Raid6, "ddf-N-continue", 5, vec![0, 4]),
        (Level::Raid1, "default", 3, vec![0, 2]),
        (Level::Raid10, "n2", 4, vec![1, 2]),
        (Level::Raid10, "f2", 4, vec![0, 2]),
        (Level::Raid10, "o2", 3, vec![1]),
        (Level::Raid4, "default", 4, vec![3]),
    ] {
        let dir = TempDir::new("rk-engine").unwrap();
        let c = Case::v12(level, layout, n, 16, 2);
        let (ps, mut model) = make(&c, &dir);
        let sub: Vec<PathBuf> = ps
            .iter()
            .enumerate()
            .filter(|(i, _)| !missing.contains(i))
            .map(|(_, p)| p.clone())
            .collect();
        let arr = assemble_paths(&sub, &rw()).unwrap();
        let mut rng = Rng(7, n as u64);
        for _ in 0..30 {
            let len = 1 + rng.below(70_000) as usize;
            let off = rng.below((model.len() - len) as u64) as usize;
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            arr.write(off as u64, &data).unwrap();
            model[off..off + len].copy_from_slice(&data);
        }
        arr.stop().unwrap();
        assert!(
            read_all(&sub, &ro()).unwrap() == model,
            "{level:?} {layout} degraded write/read"
        );
    }
}

/// Member hooks that answer reads slowly.
struct SlowReads(std::time::Duration);
impl Hooks for SlowReads {
    fn read(&self, inner: &dyn BlockDev, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        std::thread::sleep(self.0);
        inner.read_at(buf, off)
    }
}

#[test]
fn mirror_reads_go_to_the_faster_member() {
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid1, "default", 2, 0, 2);
    let (ps, model) = make(&c, &dir);
    let devs: Vec<std::sync::Arc<dyn raidkit_engine::BlockDev>> = vec![
        std::sync::Arc::new(Hooked::new(
            raidkit_engine::FileDev::open(&ps[0], false).unwrap(),
            SlowReads(std::time::Duration::from_millis(3)),
        )),
        std::sync::Arc::new(raidkit_engine::FileDev::open(&ps[1], false).unwrap()),
    ];
    let arr = raidkit_engine::assemble(devs, &ro()).unwrap();
    let mut b = vec![0u8; 4096];
    for i in 0..200u64 {
        let off = (i * 7919 % 200) * 4096;
        arr.read(off, &mut b).unwrap();
        assert!(b == model[off as usize..off as usize + 4096]);
    }
    let st = arr.member_stats();
    assert_eq!(st[0].reads + st[1].reads, 200);
    assert!(
        st[1].reads >= 190,
        "fast member served only {} of 200 reads",
        st[1].reads
    );
}

/// A large read on idle mirrors is spread over the members holding copies, in proportion
/// to their speed (all equal on a fresh array), with exact data, for RAID1 and every
/// RAID10 layout; whole-array reads in 1 MiB pieces (the spread path) are exact too,
/// degraded included.
#[test]
fn large_mirrored_reads_use_every_member_and_return_exact_data() {
    // (level, layout, members, read at 0, exact bytes each role serves)
    let cases: [(Level, &str, usize, usize, &[u64]); 9] = [
        (
            Level::Raid1,
            "default",
            2,
            256 << 10,
            &[128 << 10, 128 << 10],
        ),
        // Three ways on 4 KiB cuts: 168, 176, 168 sectors.
        (
            Level::Raid1,
            "default",
            3,
            256 << 10,
            &[86016, 90112, 86016],
        ),
        (Level::Raid10, "n2", 2, 256 << 10, &[128 << 10, 128 << 10]),
        (Level::Raid10, "f2", 2, 256 << 10, &[128 << 10, 128 << 10]),
        (Level::Raid10, "o2", 2, 256 << 10, &[128 << 10, 128 << 10]),
        // 64 KiB chunks on different member pairs: each goes whole to the copy with
        // the least work planned.
        (Level::Raid10, "n2", 4, 256 << 10, &[64 << 10; 4]),
        (Level::Raid10, "f2", 4, 256 << 10, &[64 << 10; 4]),
        (Level::Raid10, "o2", 4, 256 << 10, &[64 << 10; 4]),
        // Three copies of everything on three members: thirds.
        (Level::Raid10, "n3", 3, 384 << 10, &[128 << 10; 3]),
    ];
    for (level, layout, n, len, want) in cases {
        let dir = TempDir::new("rk-engine").unwrap();
        let c = Case::v12(level, layout, n, 64, 3);
        let (ps, model) = make(&c, &dir);
        let arr = assemble_paths(&ps, &ro()).unwrap();
        assert!(arr.member_stats().iter().all(|m| m.reads == 0));
        let mut b = vec![0u8; len];
        arr.read(0, &mut b).unwrap();
        assert!(b == model[..len], "{level:?} {layout} ×{n}: data differs");
        let got: Vec<u64> = arr.member_stats().iter().map(|m| m.read_bytes).collect();
        assert_eq!(got, want, "{level:?} {layout} ×{n}: bytes read per member");
        // Pieces adjacent on a member are one IO (n2 ×2: chunks 0-1 on member 0, 2-3 on
        // member 1; o2 ×2: chunk 0 and the offset copy of chunk 1 on member 0); f2 keeps
        // its copies in the other half, so each member reads two pieces.
        let ios: Vec<u64> = arr.member_stats().iter().map(|m| m.reads).collect();
        let want_ios: &[u64] = match (layout, n) {
            ("f2", 2) => &[2, 2],
            ("o2", 2) => &[1, 2],
            _ => &[1; 4][..n],
        };
        assert_eq!(ios, want_ios, "{level:?} {layout} ×{n}: member IOs");
        drop(arr);
        assert!(
            read_all(&ps, &ro()).unwrap() == model,
            "{level:?} {layout} ×{n}: whole-array read"
        );
        if level == Level::Raid10 {
            // Without one member: its copies are read from the others, exactly.
            let sub: Vec<PathBuf> = ps[1..].to_vec();
            assert!(
                read_all(&sub, &ro()).unwrap() == model,
                "{level:?} {layout} ×{n} degraded"
            );
        }
    }
    // Large runs on different member pairs are each shared by their two copies.
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid10, "n2", 4, 256, 4);
    let (ps, model) = make(&c, &dir);
    let arr = assemble_paths(&ps, &ro()).unwrap();
    let mut b = vec![0u8; 512 << 10];
    arr.read(0, &mut b).unwrap();
    assert!(b == model[..512 << 10]);
    let got: Vec<u64> = arr.member_stats().iter().map(|m| m.read_bytes).collect();
    assert_eq!(got, vec![128 << 10; 4]);
}

/// A merged member IO (two chunks adjacent on one member) that hits a read error falls
/// back piece by piece: the good chunk from the same member, the bad one from its other
/// copy, which is then written back over exactly that chunk.
#[test]
fn merged_mirror_read_falls_back_per_piece_on_a_read_error() {
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid10, "n2", 2, 64, 2);
    let (ps, model) = make(&c, &dir);
    // Data offset 2048: chunk 1 is member sectors 2176..2303; one sector of it fails.
    let spec = PathBuf::from(format!("fault:reio@2179:{}", ps[0].display()));
    let arr = assemble_paths(&[spec, ps[1].clone()], &rw()).unwrap();
    let ev = arr.subscribe();
    let mut b = vec![0u8; 256 << 10];
    arr.read(0, &mut b).unwrap();
    assert!(b == model[..256 << 10]);
    let evs: Vec<_> = ev.try_iter().collect();
    assert_eq!(
        evs,
        vec![raidkit_engine::array::ArrayEvent::ReadErrorCorrected {
            role: 0,
            device: format!("{} (fault-injected)", ps[0].display()),
            sector: 2176,
            sectors: 128,
        }]
    );
    // Successful reads: member 0 chunk 0 alone (the merged read and chunk 1 failed);
    // member 1 chunk 1 and its own segment (chunks 2-3) in one IO.
    let st = arr.member_stats();
    assert_eq!((st[0].reads, st[0].read_bytes), (1, 64 << 10));
    assert_eq!((st[1].reads, st[1].read_bytes), (2, 192 << 10));
    arr.stop().unwrap();
}

/// A degraded create leaves out only what the level survives without: RAID10 may miss one
/// member of each mirror pair but never both copies of some data (refused before any
/// member is written); RAID5 one member.
#[test]
fn create_with_missing_members_is_refused_where_data_would_have_no_copy() {
    let dir = TempDir::new("rk-engine").unwrap();
    let spec = |names: &[&str]| -> Vec<MemberSpec> {
        names
            .iter()
            .map(|&n| match n {
                "-" => MemberSpec::Missing,
                n => MemberSpec::Path(dir.path().join(n)),
            })
            .collect()
    };
    let mut o = CreateOptions::new(Level::Raid10, spec(&["-", "-", "a", "b"]));
    o.chunk_bytes = Some(64 << 10);
    o.create_size = Some(4 << 20);
    let e = create(&o, &mut |_, _| {}).unwrap_err().to_string();
    assert_eq!(
        e,
        "2 of 4 members are `missing`; every copy of some data would be missing (roles 0, 1)"
    );
    assert!(
        !dir.path().join("a").exists(),
        "a member was made for a refused array"
    );
    o.members = spec(&["-", "c", "-", "d"]);
    let arr = create(&o, &mut |_, _| {}).unwrap();
    assert_eq!(arr.missing_roles(), vec![0, 2]);
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
    arr.write(4096, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    arr.read(4096, &mut back).unwrap();
    assert!(back == data);
    let mut o = CreateOptions::new(Level::Raid5, spec(&["-", "e", "-"]));
    o.create_size = Some(4 << 20);
    let e = create(&o, &mut |_, _| {}).unwrap_err().to_string();
    assert_eq!(
        e,
        "2 of 3 members are `missing`; raid5 can be created with at most 1 missing"
    );
}
