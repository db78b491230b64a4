//! md's write-mostly and write-behind (issue 16 item 4): the flag is stored as md stores
//! it, reads never go to a write-mostly member while another copy serves, write-behind
//! acknowledges writes before the slow member has them with at most N outstanding, the
//! bitmap keeps their regions dirty until they land, and a write-mostly member that fails
//! with writes outstanding is caught up from exactly those regions.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::rebuild::RebuildOptions;
use raidkit_engine::sb::Metadata;
use raidkit_engine::{Array, BlockDev, FileDev, Remedy};
use raidkit_format::bitmap::{bit_is_set, BitmapSuper};
use raidkit_format::v090::{self, disk_state, SuperblockV090};
use raidkit_format::v1::SuperblockV1;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

/// Create `level` over `n` new 8 MiB members, `wm` write-mostly, consistent from the start.
fn make(dir: &TempDir, level: Level, n: usize, wm: &[usize], wb: u32) -> Vec<PathBuf> {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    if level == Level::Raid10 {
        o.chunk_bytes = Some(64 * 1024);
    }
    o.create_size = Some(8 << 20);
    o.assume_clean = true;
    o.bitmap = wb > 0;
    o.bitmap_chunk_bytes = (wb > 0).then_some(128 * 1024);
    o.write_mostly = wm.to_vec();
    o.write_behind = wb;
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    ps
}

fn sb1(p: &Path) -> SuperblockV1 {
    let mut b = vec![0u8; 4096];
    std::fs::File::open(p)
        .unwrap()
        .read_exact_at(&mut b, 8 * 512)
        .unwrap();
    SuperblockV1::parse(&b).unwrap()
}

/// Reads per role since assembly.
fn reads(arr: &Array) -> Vec<u64> {
    let mut v = vec![0; arr.geometry().raid_disks];
    for s in arr.member_stats() {
        v[s.role] = s.reads;
    }
    v
}

/// Read the whole array in pieces of every size class (small, split-sized), many times.
fn read_all(arr: &Array, model: &[u8]) {
    for len in [4096usize, 64 << 10, 1 << 20] {
        let mut b = vec![0u8; len];
        for off in (0..model.len()).step_by(len) {
            let n = len.min(model.len() - off);
            arr.read(off as u64, &mut b[..n]).unwrap();
            assert!(b[..n] == model[off..off + n], "data at {off}");
        }
    }
}

#[test]
fn flags_are_stored_as_md_stores_them() {
    // 1.2: devflags bit 0 in the write-mostly member's own superblock only.
    let dir = TempDir::new("rk-wm").unwrap();
    let ps = make(&dir, Level::Raid1, 3, &[2], 0);
    assert_eq!(
        ps.iter().map(|p| sb1(p).devflags).collect::<Vec<_>>(),
        [0, 0, 1]
    );
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let wm: Vec<bool> = arr.members().iter().map(|m| m.write_mostly).collect();
    assert_eq!(wm, [false, false, true]);
    // Cleared and set at run time, in the superblocks.
    arr.set_write_mostly(&ps[2].display().to_string(), false)
        .unwrap();
    arr.set_write_mostly(&ps[0].display().to_string(), true)
        .unwrap();
    arr.stop().unwrap();
    assert_eq!(
        ps.iter().map(|p| sb1(p).devflags).collect::<Vec<_>>(),
        [1, 0, 0]
    );
    // 0.90: state bit 9 of the member's descriptor, in every superblock.
    let dir = TempDir::new("rk-wm").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(8 << 20);
    o.assume_clean = true;
    o.metadata = Metadata::V090;
    o.write_mostly = vec![1];
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    for (i, p) in ps.iter().enumerate() {
        let len = std::fs::metadata(p).unwrap().len();
        let at = v090::super_offset(len / 512).unwrap() * 512;
        let mut b = vec![0u8; v090::SB_BYTES];
        std::fs::File::open(p)
            .unwrap()
            .read_exact_at(&mut b, at)
            .unwrap();
        let s = SuperblockV090::parse(&b).unwrap();
        assert_eq!(s.disks[0].state, disk_state::ACTIVE | disk_state::SYNC);
        assert_eq!(
            s.disks[1].state,
            disk_state::ACTIVE | disk_state::SYNC | disk_state::WRITEMOSTLY
        );
        assert_eq!(s.this_disk.state & disk_state::WRITEMOSTLY != 0, i == 1);
    }
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let wm: Vec<bool> = arr.members().iter().map(|m| m.write_mostly).collect();
    assert_eq!(wm, [false, true]);
}

#[test]
fn reads_never_hit_a_write_mostly_member_while_another_copy_serves() {
    for (level, n, wm) in [(Level::Raid1, 2, vec![1]), (Level::Raid10, 4, vec![1, 2])] {
        let dir = TempDir::new("rk-wm").unwrap();
        let ps = make(&dir, level, n, &wm, 0);
        let arr = assemble_paths(&ps, &rw()).unwrap();
        let mut model = vec![0u8; arr.size_bytes() as usize];
        fill_tagged(3, 0, &mut model);
        arr.write(0, &model).unwrap();
        let before = reads(&arr);
        read_all(&arr, &model);
        let after = reads(&arr);
        for r in 0..n {
            let got = after[r] - before[r];
            if wm.contains(&r) {
                assert_eq!(got, 0, "{level:?}: write-mostly role {r} was read");
            } else {
                assert!(got > 0, "{level:?}: role {r} served no read");
            }
        }
        // Role 0 gone, write-mostly role 1 holds the only copy of its data: it serves.
        arr.fail_member(0, "test").unwrap();
        let before = reads(&arr);
        read_all(&arr, &model);
        assert!(reads(&arr)[1] > before[1], "{level:?}: role 1 not read");
    }
}

/// The data-area sectors of a 1.2 member: `S-E` for a fault rule.
fn data_range(p: &Path) -> String {
    let s = sb1(p);
    format!("{}-{}", s.data_offset, s.data_offset + s.data_size - 1)
}

/// The bitmap bits of a 1.2 member, and its bitmap superblock.
fn bitmap_of(p: &Path) -> (BitmapSuper, Vec<u8>) {
    let s = sb1(p);
    let at = (s.super_offset as i64 + i64::from(s.bitmap_offset)) as u64 * 512;
    let mut b = vec![0u8; 4096];
    std::fs::File::open(p)
        .unwrap()
        .read_exact_at(&mut b, at)
        .unwrap();
    (BitmapSuper::parse(&b).unwrap(), b[256..].to_vec())
}

fn member_data(p: &Path, off: u64, len: usize) -> Vec<u8> {
    let s = sb1(p);
    let mut b = vec![0u8; len];
    std::fs::File::open(p)
        .unwrap()
        .read_exact_at(&mut b, s.data_offset * 512 + off)
        .unwrap();
    b
}

/// Wait (bounded) until `f` holds.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(30), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn write_behind_acknowledges_before_the_slow_member_and_bounds_the_backlog() {
    let dir = TempDir::new("rk-wm").unwrap();
    let ps = make(&dir, Level::Raid1, 2, &[1], 2);
    assert_eq!(bitmap_of(&ps[0]).0.write_behind, 2);
    // Member 1's data area takes 1.5 s per IO (its superblock and bitmap do not).
    let slow = Duration::from_millis(1500);
    let spec = PathBuf::from(format!(
        "fault:slow=1500ms@{}:{}",
        data_range(&ps[1]),
        ps[1].display()
    ));
    let arr = Arc::new(assemble_paths(&[ps[0].clone(), spec], &rw()).unwrap());
    assert_eq!(arr.write_behind_limit(), 2);
    // Watch the backlog while writing: never over 2.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (arr, stop) = (arr.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(arr.write_behind_backlog());
                std::thread::sleep(Duration::from_micros(200));
            }
            most
        })
    };
    let offs = [0u64, 1 << 20, 2 << 20];
    let t0 = Instant::now();
    arr.write(offs[0], &[1u8; 4096]).unwrap();
    arr.write(offs[1], &[2u8; 4096]).unwrap();
    // Two writes acknowledged well before member 1 could have taken even one.
    assert!(t0.elapsed() < slow, "acknowledged after {:?}", t0.elapsed());
    assert_eq!(arr.write_behind_backlog(), 2);
    let st = arr.members();
    assert_eq!(
        (st[0].write_behind_backlog, st[1].write_behind_backlog),
        (0, 2)
    );
    // Their bitmap bits are on disk (chunks 0 and 8 of 128 KiB).
    let (_, bits) = bitmap_of(&ps[0]);
    assert!(bit_is_set(&bits, 0) && bit_is_set(&bits, 8));
    // The third waits for a free slot: until the first batch is done.
    arr.write(offs[2], &[3u8; 4096]).unwrap();
    assert!(
        t0.elapsed() >= slow - Duration::from_millis(100),
        "third write did not wait: {:?}",
        t0.elapsed()
    );
    // Marking clean waits for the queue: when it returns member 1 has every write, and
    // only then are the bits clear.
    arr.mark_clean().unwrap();
    assert_eq!(arr.write_behind_backlog(), 0);
    for (i, &o) in offs.iter().enumerate() {
        assert_eq!(member_data(&ps[1], o, 4096), vec![i as u8 + 1; 4096]);
    }
    let (_, bits) = bitmap_of(&ps[0]);
    assert!(!bit_is_set(&bits, 0) && !bit_is_set(&bits, 8) && !bit_is_set(&bits, 16));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(watcher.join().unwrap(), 2);
    // Reads never went to member 1.
    let mut b = vec![0u8; 4096];
    arr.read(offs[1], &mut b).unwrap();
    assert_eq!(reads(&arr)[1], 0);
}

#[test]
fn a_read_only_the_write_mostly_member_can_serve_waits_for_its_queued_write() {
    let dir = TempDir::new("rk-wm").unwrap();
    let ps = make(&dir, Level::Raid1, 2, &[1], 4);
    let spec = PathBuf::from(format!(
        "fault:slow=800ms@{}:{}",
        data_range(&ps[1]),
        ps[1].display()
    ));
    let arr = assemble_paths(&[ps[0].clone(), spec], &rw()).unwrap();
    // The first write is in service on member 1; the second waits in the queue behind it.
    arr.write(0, &[5u8; 4096]).unwrap();
    wait_for("first batch in service", || arr.write_behind_backlog() == 1);
    arr.write(1 << 20, &[6u8; 4096]).unwrap();
    assert_eq!(arr.write_behind_backlog(), 2);
    // Member 0 goes: member 1 is the only copy, and must not serve the old data.
    arr.fail_member(0, "test").unwrap();
    let mut b = vec![0u8; 4096];
    arr.read(1 << 20, &mut b).unwrap();
    assert_eq!(b, vec![6u8; 4096]);
    arr.read(0, &mut b).unwrap();
    assert_eq!(b, vec![5u8; 4096]);
}

#[test]
fn a_write_mostly_member_failing_with_writes_behind_is_caught_up_from_the_bitmap() {
    let dir = TempDir::new("rk-wm").unwrap();
    let ps = make(&dir, Level::Raid1, 2, &[1], 16);
    // Member 1 fails writes in the first MiB of its data area.
    let d0 = sb1(&ps[1]).data_offset;
    let spec = PathBuf::from(format!(
        "fault:weio@{}-{}:{}",
        d0,
        d0 + 2047,
        ps[1].display()
    ));
    let arr = assemble_paths(&[ps[0].clone(), spec], &rw()).unwrap();
    let size = arr.size_bytes() as usize;
    let mut model = vec![0u8; size];
    for (off, byte) in [(100_000usize, 7u8), (size - 50_000, 9u8)] {
        arr.write(off as u64, &[byte; 4096]).unwrap();
        model[off..off + 4096].fill(byte);
    }
    // The failed write is noticed, and the member failed, at the client's next flush.
    wait_for("queue drained", || arr.write_behind_backlog() == 0);
    arr.flush().unwrap();
    assert!(arr.is_degraded(), "write-mostly member not failed");
    assert_eq!(arr.members()[1].state, "failed");
    // It stays dirty in the bitmap; its return resyncs only those regions.
    arr.remove_member(&arr.members()[1].device.clone()).unwrap();
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[1], true).unwrap());
    let rep = arr
        .re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
        .unwrap();
    assert!(!arr.is_degraded());
    assert!(
        rep.sectors > 0 && rep.sectors <= 2 * 256,
        "resynced {} sectors",
        rep.sectors
    );
    arr.stop().unwrap();
    let whole = member_data(&ps[1], 0, size);
    assert!(whole == model, "member 1 differs after the catch-up");
}

#[test]
fn write_behind_needs_a_bitmap_and_a_write_mostly_member() {
    let dir = TempDir::new("rk-wm").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(8 << 20);
    o.write_behind = 8;
    o.write_mostly = vec![1];
    let e = create(&o, &mut |_, _| {}).unwrap_err();
    assert_eq!(e.remedy(), Some(Remedy::WriteBehindNeedsBitmap));
    assert_eq!(
        e.to_string(),
        "write-behind needs a write-intent bitmap (the regions written behind stay dirty in it until the write-mostly member has them)"
    );
    o.bitmap = true;
    o.write_mostly.clear();
    let e = create(&o, &mut |_, _| {}).unwrap_err();
    assert_eq!(e.remedy(), Some(Remedy::WriteBehindNeedsWriteMostly));
    assert_eq!(
        e.to_string(),
        "write-behind applies only to write-mostly members, and there is none"
    );
    // Nothing was written.
    assert!(!ps[0].exists());
}
