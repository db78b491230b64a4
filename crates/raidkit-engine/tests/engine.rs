//! End-to-end engine tests over real files: create every level/layout, write with random
//! offsets and sizes against an in-memory model, re-assemble, check parity, degrade.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::sb::Metadata;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{BlockDev, EngineError};
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::hooked::{members, Hooked, Hooks};
use raidkit_testkit::pattern::pattern_word;
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;

struct Rng(u64, u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.1 += 1;
        pattern_word(self.0, self.1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn ro() -> AssembleOptions {
    AssembleOptions::default()
}
fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

struct Case {
    level: Level,
    layout: &'static str,
    n: usize,
    chunk_k: u64,
    meta: &'static str,
    member_mib: u64,
}

impl Case {
    /// A case on 1.2 metadata (the default).
    fn v12(level: Level, layout: &'static str, n: usize, chunk_k: u64, member_mib: u64) -> Case {
        Case {
            level,
            layout,
            n,
            chunk_k,
            meta: "1.2",
            member_mib,
        }
    }
}

fn make(c: &Case, dir: &TempDir) -> (Vec<PathBuf>, Vec<u8>) {
    let ps = member_files(dir.path(), c.n);
    let mut o = create_options(c.level, &ps);
    o.layout = Some(names::parse_layout(c.level, c.layout).unwrap());
    if c.level != Level::Raid1 && c.level != Level::Linear {
        o.chunk_bytes = Some(c.chunk_k * 1024);
    }
    o.metadata = Metadata::parse(c.meta).unwrap();
    o.create_size = Some(c.member_mib << 20);
    o.name = "t".into();
    let arr = create(&o, &mut |_, _| {}).unwrap();
    let size = arr.size_bytes() as usize;
    // Random writes against a model.
    let mut model = vec![0u8; size];
    let mut rng = Rng(c.n as u64 * 1000 + c.chunk_k, 0);
    let stripe = (c.chunk_k * 1024) as usize * c.n;
    for round in 0..60 {
        let len = match round % 4 {
            0 => 1 + rng.below(5000) as usize,
            1 => 512 * (1 + rng.below(64) as usize),
            2 => stripe * (1 + rng.below(3) as usize),
            _ => 1 + rng.below(300_000) as usize,
        }
        .min(size);
        let off = if round % 5 == 0 {
            (rng.below((size - len) as u64 / 512) * 512) as usize
        } else {
            rng.below((size - len + 1) as u64) as usize
        };
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        arr.write(off as u64, &data).unwrap();
        model[off..off + len].copy_from_slice(&data);
        if round % 7 == 0 {
            let roff = rng.below(size as u64 - 4096) as usize;
            let mut b = vec![0u8; 4096];
            arr.read(roff as u64, &mut b).unwrap();
            assert_eq!(b, model[roff..roff + 4096], "read-back at {roff}");
        }
    }
    arr.stop().unwrap();
    (ps, model)
}

fn read_all(ps: &[PathBuf], opts: &AssembleOptions) -> Result<Vec<u8>, EngineError> {
    let arr = assemble_paths(ps, opts)?;
    let mut out = vec![0u8; arr.size_bytes() as usize];
    for (i, ch) in out.chunks_mut(1 << 20).enumerate() {
        arr.read((i as u64) << 20, ch)?;
    }
    Ok(out)
}

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

fn spare_file(dir: &TempDir, name: &str, mib: u64) -> std::sync::Arc<dyn raidkit_engine::BlockDev> {
    let p = dir.path().join(name);
    std::fs::File::create(&p)
        .unwrap()
        .set_len(mib << 20)
        .unwrap();
    std::sync::Arc::new(raidkit_engine::FileDev::open(&p, true).unwrap())
}

#[test]
fn hot_spare_rebuild_every_redundant_level() {
    use raidkit_engine::rebuild::{rebuild, RebuildOptions};
    for (level, layout, n, missing) in [
        (Level::Raid5, "left-symmetric", 4usize, vec![1usize]),
        (Level::Raid6, "left-asymmetric", 5, vec![0, 3]),
        (Level::Raid6, "ddf-N-restart", 5, vec![2, 4]),
        (Level::Raid1, "default", 3, vec![0, 2]),
        (Level::Raid10, "n2", 4, vec![1, 2]),
        (Level::Raid10, "o2", 3, vec![0]),
    ] {
        let dir = TempDir::new("rk-engine").unwrap();
        let c = Case::v12(level, layout, n, 16, 2);
        let (ps, model) = make(&c, &dir);
        let sub: Vec<PathBuf> = ps
            .iter()
            .enumerate()
            .filter(|(i, _)| !missing.contains(i))
            .map(|(_, p)| p.clone())
            .collect();
        let arr = assemble_paths(&sub, &rw()).unwrap();
        let ev = arr.subscribe();
        let mut spares = Vec::new();
        for i in 0..missing.len() {
            let name = format!("spare{i}.img");
            arr.add_spare(spare_file(&dir, &name, 2), false).unwrap();
            spares.push(dir.path().join(name));
        }
        let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
        assert_eq!(rep.roles.len(), missing.len(), "{level:?} {layout}");
        assert!(rep.lost.is_empty());
        assert!(!arr.is_degraded());
        arr.stop().unwrap();
        let evs: Vec<_> = ev.try_iter().collect();
        assert!(
            evs.iter()
                .any(|e| matches!(e, raidkit_engine::array::ArrayEvent::RebuildFinished { .. })),
            "{evs:?}"
        );
        // The survivors plus the rebuilt spares form the complete array, in any order.
        let mut all = sub.clone();
        all.extend(spares.iter().cloned());
        all.reverse();
        let a2 = assemble_paths(&all, &ro()).unwrap();
        assert!(
            a2.missing_roles().is_empty() && !a2.is_degraded(),
            "{level:?} {layout}"
        );
        assert_consistent(&a2, &format!("{level:?} {layout}"));
        drop(a2);
        assert!(
            read_all(&all, &ro()).unwrap() == model,
            "{level:?} {layout}"
        );
        // Each rebuilt member alone with the minimum of others still gives the data.
        if level == Level::Raid1 {
            assert!(read_all(&spares[..1], &ro()).unwrap() == model);
        }
    }
}

#[test]
fn rebuild_resumes_from_checkpoint() {
    use raidkit_engine::rebuild::{rebuild, RebuildOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 3, 16, 4);
    let (ps, model) = make(&c, &dir);
    let sub = vec![ps[0].clone(), ps[2].clone()];
    let arr = assemble_paths(&sub, &rw()).unwrap();
    arr.add_spare(spare_file(&dir, "s.img", 4), false).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let opts = RebuildOptions {
        stop: Some(stop.clone()),
        checkpoint_every: Some(std::time::Duration::ZERO),
        ..Default::default()
    };
    let mut seen = 0;
    rebuild(&arr, &opts, &mut |d, t| {
        seen = d;
        if d * 3 >= t {
            st.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    assert!(arr.is_degraded(), "stopped part-way");
    arr.stop().unwrap();
    // The spare's superblock records where to resume.
    let mut all = sub.clone();
    all.push(dir.path().join("s.img"));
    let a2 = assemble_paths(&all, &rw()).unwrap();
    let info = a2.members();
    assert!(info.iter().any(|m| m.state == "recovering"), "{info:?}");
    assert!(
        read_all(&all, &ro()).unwrap() == model,
        "reads during a half-done rebuild"
    );
    let ev = a2.subscribe();
    rebuild(&a2, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
    let from = ev.try_iter().find_map(|e| match e {
        raidkit_engine::array::ArrayEvent::RebuildStarted { from, .. } => Some(from),
        _ => None,
    });
    assert!(
        from.unwrap_or(0) > 0 && from.unwrap_or(0) <= seen,
        "resumed from {from:?}, stopped at {seen}"
    );
    a2.stop().unwrap();
    let a3 = assemble_paths(&all, &ro()).unwrap();
    assert!(!a3.is_degraded());
    assert_consistent(&a3, "after the rebuild");
    drop(a3);
    assert!(
        read_all(&all[1..], &ro()).unwrap() == model,
        "rebuilt member serves data"
    );
}

#[test]
fn read_errors_are_repaired_from_redundancy() {
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2);
    let (ps, model) = make(&c, &dir);
    // Member 1 holds data in stripe 0 (data offset 2048): its sectors 2050..2055 fail reads.
    let spec = PathBuf::from(format!("fault:reio@2050-2055:{}", ps[1].display()));
    let arr = assemble_paths(&[ps[0].clone(), spec, ps[2].clone()], &rw()).unwrap();
    let ev = arr.subscribe();
    let mut out = vec![0u8; model.len()];
    arr.read(0, &mut out).unwrap();
    assert!(out == model);
    let evs: Vec<_> = ev.try_iter().collect();
    assert!(
        evs.iter().any(|e| matches!(
            e,
            raidkit_engine::array::ArrayEvent::ReadErrorCorrected { role: 1, .. }
        )),
        "{evs:?}"
    );
    arr.stop().unwrap();
}

fn corrupt(p: &std::path::Path, byte: u64, len: usize) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, byte).unwrap();
    for x in b.iter_mut() {
        *x ^= 0x3c;
    }
    f.write_all_at(&b, byte).unwrap();
}

#[test]
fn scrub_verdicts_raid6_locates_the_bad_member() {
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid6, "left-asymmetric", 5, 16, 2);
    let (ps, model) = make(&c, &dir);
    let arr = assemble_paths(&ps, &ro()).unwrap();
    let g = arr.geometry().clone();
    drop(arr);
    let cs = g.chunk_sectors; // 32 sectors
                              // Stripe 2: corrupt 100 bytes in page 1 of data block k=1, and page 0 of P, on the disk.
    let lay = g.stripe(2).unwrap();
    let data_role = lay.data[1];
    let data_off = (2048 + 2 * cs) * 512 + 4096 + 10;
    corrupt(&ps[data_role], data_off, 100);
    let p_off = (2048 + 2 * cs) * 512 + 7;
    corrupt(&ps[lay.p], p_off, 3);
    let arr = assemble_paths(&ps, &ro()).unwrap();
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |_, _| {}).unwrap();
    assert_eq!(rep.verdicts.len(), 2, "{:?}", rep.verdicts);
    let v0 = &rep.verdicts[0];
    assert_eq!((v0.role, v0.what.as_str()), (Some(lay.p), "P"));
    let v1 = &rep.verdicts[1];
    assert_eq!(v1.role, Some(data_role));
    let k = g.data_disks() as u64;
    let expect_off = (2 * k + 1) * cs * 512 + 4096;
    assert!(
        v1.what.starts_with(&format!(
            "data (array bytes {}..{})",
            expect_off,
            expect_off + 4096
        )),
        "{}",
        v1.what
    );
    assert!(!v1.repaired);
    drop(arr);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let rep = sync::run(&arr, SyncMode::Repair, true, &mut |_, _| {}).unwrap();
    assert_eq!(rep.verdicts.len(), 2);
    assert!(rep.verdicts.iter().all(|v| v.repaired));
    arr.stop().unwrap();
    let arr = assemble_paths(&ps, &ro()).unwrap();
    assert!(sync::run(&arr, SyncMode::Check, true, &mut |_, _| {})
        .unwrap()
        .verdicts
        .is_empty());
    drop(arr);
    assert!(
        read_all(&ps, &ro()).unwrap() == model,
        "repair restored the original data"
    );
}

#[test]
fn scrub_raid5_reports_exact_ranges_and_mirrors_vote() {
    // RAID5: a flipped byte makes one 4 KiB row inconsistent: every data block of the row is
    // reported (RAID5 cannot tell which block is wrong).
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 4, 64, 2);
    let (ps, _) = make(&c, &dir);
    corrupt(&ps[0], 2048 * 512 + 5 * 4096 + 1, 1); // stripe 0, member 0 = D0, page 5
    let arr = assemble_paths(&ps, &ro()).unwrap();
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |_, _| {}).unwrap();
    let cb = 64 * 1024;
    assert_eq!(
        rep.mismatches,
        vec![
            (5 * 4096, 4096),
            (cb + 5 * 4096, 4096),
            (2 * cb + 5 * 4096, 4096)
        ]
    );
    assert_eq!(rep.verdicts.len(), 1);
    assert_eq!(rep.verdicts[0].role, None);
    drop(arr);
    // Three-way mirror: the odd copy out is named and repaired.
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid1, "default", 3, 0, 2);
    let (ps, model) = make(&c, &dir);
    corrupt(&ps[2], 2048 * 512 + 300_000, 10);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let rep = sync::run(&arr, SyncMode::Repair, true, &mut |_, _| {}).unwrap();
    assert_eq!(rep.verdicts.len(), 1, "{:?}", rep.verdicts);
    assert_eq!(rep.verdicts[0].role, Some(2));
    assert!(
        rep.verdicts[0].what.contains("outvoted 2 to 1"),
        "{}",
        rep.verdicts[0].what
    );
    arr.stop().unwrap();
    for keep in 0..3 {
        assert!(
            read_all(&ps[keep..keep + 1], &ro()).unwrap() == model,
            "copy {keep}"
        );
    }
}

/// An unclean stop with a write-intent bitmap: only the regions written since the last
/// clean mark are resynced.
#[test]
fn bitmap_limits_resync_after_unclean_stop() {
    for (level, layout, n) in [
        (Level::Raid5, "left-symmetric", 4usize),
        (Level::Raid1, "default", 2),
        (Level::Raid10, "n2", 4),
    ] {
        let dir = TempDir::new("rk-engine").unwrap();
        let ps = member_files(dir.path(), n);
        let mut o = create_options(level, &ps);
        o.layout = Some(names::parse_layout(level, layout).unwrap());
        if level != Level::Raid1 {
            o.chunk_bytes = Some(64 * 1024);
        }
        o.create_size = Some(8 << 20);
        o.bitmap = true;
        o.bitmap_chunk_bytes = Some(128 * 1024);
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let arr = assemble_paths(&ps, &rw()).unwrap();
        arr.write(0, &[1u8; 4096]).unwrap();
        arr.write(3 << 20, &[2u8; 4096]).unwrap();
        arr.flush().unwrap();
        drop(arr); // crash: superblocks say dirty, bits are set
        let arr = assemble_paths(&ps, &rw()).unwrap();
        assert!(arr.needs_resync(), "{level:?}: unclean stop not detected");
        let rep = sync::run(&arr, SyncMode::Resync, false, &mut |_, _| {}).unwrap();
        // Two writes → two dirty bitmap chunks of 256 sectors each.
        assert_eq!(
            rep.sectors_done,
            2 * 256,
            "{level:?}: resync visited {} sectors",
            rep.sectors_done
        );
        arr.stop().unwrap();
        let arr = assemble_paths(&ps, &ro()).unwrap();
        assert!(!arr.needs_resync());
        assert!(sync::run(&arr, SyncMode::Check, true, &mut |_, _| {})
            .unwrap()
            .mismatches
            .is_empty());
    }
}

/// fail → remove → writes while degraded → re-add: with a bitmap only the regions written
/// meanwhile are resynced; without one, everything is.
#[test]
fn re_add_resyncs_only_what_was_missed() {
    use raidkit_engine::rebuild::RebuildOptions;
    for (level, bitmap) in [
        (Level::Raid1, true),
        (Level::Raid5, true),
        (Level::Raid10, true),
        (Level::Raid5, false),
    ] {
        let dir = TempDir::new("rk-engine").unwrap();
        let n = if level == Level::Raid1 { 2 } else { 4 };
        let ps = member_files(dir.path(), n);
        let mut o = create_options(level, &ps);
        if level != Level::Raid1 {
            o.chunk_bytes = Some(64 * 1024);
        }
        o.create_size = Some(8 << 20);
        o.bitmap = bitmap;
        o.bitmap_chunk_bytes = bitmap.then_some(128 * 1024);
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let arr = assemble_paths(&ps, &rw()).unwrap();
        let size = arr.size_bytes() as usize;
        let mut model = vec![0u8; size];
        arr.fail_member(1, "test").unwrap();
        arr.remove_member(&ps[1].display().to_string()).unwrap();
        for (off, byte) in [(100_000usize, 7u8), (size - 50_000, 9u8)] {
            arr.write(off as u64, &[byte; 4096]).unwrap();
            model[off..off + 4096].fill(byte);
        }
        let dev: std::sync::Arc<dyn raidkit_engine::BlockDev> =
            std::sync::Arc::new(raidkit_engine::FileDev::open(&ps[1], true).unwrap());
        let rep = arr
            .re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
            .unwrap();
        assert!(!arr.is_degraded(), "{level:?}");
        let full = if level.has_parity() {
            arr.geometry().stripes() * arr.geometry().chunk_sectors
        } else {
            arr.geometry().used_dev_sectors(1)
        };
        if bitmap {
            assert!(
                rep.sectors <= 2 * 256 + 2 * 128,
                "{level:?}: bitmap re-add resynced {} sectors",
                rep.sectors
            );
            assert!(rep.sectors > 0);
        } else {
            assert_eq!(
                rep.sectors, full,
                "{level:?}: without a bitmap everything is rebuilt"
            );
        }
        arr.stop().unwrap();
        assert!(read_all(&ps, &ro()).unwrap() == model, "{level:?}");
        let a = assemble_paths(&ps, &ro()).unwrap();
        assert!(
            sync::run(&a, SyncMode::Check, true, &mut |_, _| {})
                .unwrap()
                .mismatches
                .is_empty(),
            "{level:?}"
        );
    }
}

/// A hot spare takes over a failed member on its own; events tell the story.
#[test]
fn supervisor_hot_spare_takes_over() {
    use raidkit_engine::supervisor::Supervisor;
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 4, 16, 2);
    let (ps, model) = make(&c, &dir);
    let arr = std::sync::Arc::new(assemble_paths(&ps, &rw()).unwrap());
    let sup = Supervisor::start("t", arr.clone());
    let ev = sup.subscribe();
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    sup.add(&spare, false).unwrap();
    sup.fail(&ps[2].display().to_string()).unwrap();
    // The event thread starts recovery; wait for it.
    let t0 = std::time::Instant::now();
    while arr.is_degraded() && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    sup.wait_idle();
    assert!(!arr.is_degraded(), "{:?}", sup.status());
    let expected = [
        "spare_added",
        "member_failed",
        "degraded",
        "rebuild_started",
        "rebuild_finished",
        "spare_activated",
    ];
    // Array events reach the supervisor through its event thread, which may still be
    // delivering them when the job is done: wait for them (bounded).
    let mut kinds: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !expected.iter().all(|k| kinds.iter().any(|x| x == k)) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match ev.recv_timeout(left) {
            Ok(e) => kinds.push(e.kind().to_string()),
            Err(_) => break,
        }
    }
    for k in expected {
        assert!(kinds.iter().any(|x| x == k), "missing event {k}: {kinds:?}");
    }
    sup.remove(&ps[2].display().to_string()).unwrap();
    let st = sup.status();
    assert_eq!(st.state, "clean");
    assert_eq!(st.members.len(), 4);
    sup.shutdown().unwrap();
    drop(sup);
    drop(arr);
    let now: Vec<PathBuf> = vec![ps[0].clone(), ps[1].clone(), spare.clone(), ps[3].clone()];
    assert!(read_all(&now, &ro()).unwrap() == model);
    // The failed member, given back, is stale and refused.
    let mut with_old = now.clone();
    with_old.push(ps[2].clone());
    let e = read_all(&with_old, &ro())
        .map(|v| v.len())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("m2.img") && (e.contains("out of date") || e.contains("faulty")),
        "{e}"
    );
}

/// A rebuild that meets an unreadable sector on a survivor keeps going, reports exactly the
/// array bytes it could not reconstruct, and reads there fail instead of returning garbage.
#[test]
fn rebuild_survives_unreadable_sectors_and_reports_the_loss() {
    use raidkit_engine::rebuild::{rebuild, RebuildOptions};
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2);
    let (ps, model) = make(&c, &dir);
    // Member 0 cannot read device sectors 2048+40 .. 2048+47 (stripe 1; chunk 32 sectors).
    let bad = PathBuf::from(format!("fault:reio@2088-2095:{}", ps[0].display()));
    let arr = assemble_paths(&[bad, ps[2].clone()], &rw()).unwrap();
    arr.add_spare(spare_file(&dir, "s.img", 2), false).unwrap();
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
    assert!(!arr.is_degraded(), "the rebuild completed");
    // Stripe 1 of left-symmetric N=3: P on member 1 (rebuilt), data k=0 on member 2 and
    // k=1 on member 0. Member 0's unreadable sectors are data sectors 40..47 = k=1, page 1
    // of the chunk: with the old member 1 gone nothing can supply them. Array bytes:
    // (stripe 1 × 2 data + k 1) × 16 KiB + 4 KiB = 53248, one 4 KiB page.
    let g = arr.geometry().clone();
    let lay = g.stripe(1).unwrap();
    assert_eq!((lay.p, lay.data.clone()), (1, vec![2, 0]));
    assert_eq!(rep.lost, vec![(53248, 4096)]);
    let mut b = vec![0u8; 512];
    let e = arr.read(53248 + 100, &mut b).unwrap_err().to_string();
    assert!(e.contains("data lost"), "{e}");
    // Page 0 of the same chunk was rebuilt: readable and right.
    let mut p0 = vec![0u8; 4096];
    arr.read(49152, &mut p0).unwrap();
    assert!(p0 == model[49152..53248]);
    // Everything else reads back exactly.
    let lost = rep.lost.clone();
    for (i, ch) in model.chunks(4096).enumerate() {
        let o = (i * 4096) as u64;
        if lost.iter().any(|&(lo, ll)| o < lo + ll && lo < o + 4096) {
            continue;
        }
        let mut b = vec![0u8; ch.len()];
        arr.read(o, &mut b).unwrap();
        assert!(b == ch, "offset {o}");
    }
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
