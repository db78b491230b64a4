//! A member re-added with a bitmap-guided catch-up says what the array is from then on:
//! active while it is written (its own superblock said clean when it left), and it
//! carries the array's bitmap: its own copy of the bits (written before it left) must not be what the next
//! assembly reads, or writes made after the re-add into regions whose bits were already
//! set are not resynced after a crash (md reads the bitmap from the first member in
//! sync, and so does raidkit).

use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::create::create;
use raidkit_engine::rebuild::RebuildOptions;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{BlockDev, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, data_offset_bytes, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

mod cases;
use cases::{ro, rw};

/// Byte offset (in the array and in each mirror's data area) of the region written.
const R1: u64 = 1 << 20;

#[test]
fn crash_after_re_add_resyncs_regions_dirtied_before_it() {
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(4 << 20);
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(64 * 1024);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    // Role 0 leaves; R1 is written without it; it comes back (catch-up of R1 only).
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.fail_member(0, "test").unwrap();
    arr.remove_member(&ps[0].display().to_string()).unwrap();
    arr.write(R1, &[1; 4096]).unwrap();
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[0], true).unwrap());
    let rep = arr
        .re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
        .unwrap();
    assert_eq!(rep.sectors, 128, "one 64 KiB bit copied");
    assert!(!arr.is_degraded());
    // R1 again (its bit is set already), and the machine dies with the write torn: the
    // new bytes reached role 0, not role 1.
    arr.write(R1, &[2; 4096]).unwrap();
    drop(arr);
    // Every member says the array was active, the re-added one too (its own superblock
    // said clean when it left).
    for p in &ps {
        let d = FileDev::open(p, false).unwrap();
        let sb = &raidkit_engine::sb::probe(&d).unwrap().found[0].0;
        assert_eq!(sb.resync_offset(), 0, "{}", p.display());
    }
    let m1 = std::fs::OpenOptions::new()
        .write(true)
        .open(&ps[1])
        .unwrap();
    m1.write_all_at(&[1; 4096], data_offset_bytes(&ps[1]) + R1)
        .unwrap();
    drop(m1);
    // The resync after the crash must cover R1.
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert!(arr.needs_resync());
    sync::run(&arr, SyncMode::Resync, false, &mut |_, _| {}).unwrap();
    arr.stop().unwrap();
    let arr = assemble_paths(&ps, &ro()).unwrap();
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |_, _| {}).unwrap();
    assert!(
        rep.mismatches.is_empty(),
        "mirrors differ after the resync: {:?}",
        rep.mismatches
    );
}

/// The bitmap is removed while a member is away: the member comes back (rebuilt in full:
/// no bitmap vouches for what it missed) and its superblock no longer points at a
/// bitmap, like every other member's; the array assembles without one.
#[test]
fn re_add_after_the_bitmap_was_removed() {
    use raidkit_engine::grow::BitmapMode;
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(4 << 20);
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(64 * 1024);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.fail_member(0, "test").unwrap();
    arr.remove_member(&ps[0].display().to_string()).unwrap();
    arr.set_bitmap(BitmapMode::None).unwrap();
    arr.write(R1, &[3; 4096]).unwrap();
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[0], true).unwrap());
    let rep = arr
        .re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
        .unwrap();
    assert_eq!(rep.sectors, arr.geometry().used_dev_sectors(0));
    arr.stop().unwrap();
    for p in &ps {
        let d = FileDev::open(p, false).unwrap();
        let sb = &raidkit_engine::sb::probe(&d).unwrap().found[0].0;
        assert_eq!(
            sb.feature_map() & 1,
            0,
            "{} still points at a bitmap",
            p.display()
        );
    }
    let arr = assemble_paths(&ps, &ro()).unwrap();
    let mut b = vec![0u8; 4096];
    arr.read(R1, &mut b).unwrap();
    assert_eq!(b, vec![3; 4096]);
}

/// A re-add stopped half-way (the process dies before the catch-up ends): at the next
/// assembly the member is still being caught up, never read as if it held the writes
/// it missed (1.x: its recovery offset; 0.90 has none: every descriptor of it, its own too,
/// says active and not in sync until the catch-up ends).
#[test]
fn re_add_cut_short_is_not_trusted() {
    use std::sync::atomic::AtomicBool;
    for meta in ["1.2", "0.90"] {
        let dir = TempDir::new("rk-engine").unwrap();
        let ps = member_files(dir.path(), 2);
        let mut o = create_options(Level::Raid1, &ps);
        o.create_size = Some(4 << 20);
        o.metadata = raidkit_engine::sb::Metadata::parse(meta).unwrap();
        o.bitmap = true;
        o.bitmap_chunk_bytes = Some(64 * 1024);
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let arr = assemble_paths(&ps, &rw()).unwrap();
        arr.fail_member(1, "test").unwrap();
        arr.remove_member(&ps[1].display().to_string()).unwrap();
        for k in 0..8u64 {
            arr.write(k * (256 << 10), &[4; 4096]).unwrap();
        }
        // Stopped before its first step: nothing of what it missed is copied.
        let stop = Arc::new(AtomicBool::new(true));
        let opts = RebuildOptions {
            stop: Some(stop.clone()),
            ..Default::default()
        };
        let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[1], true).unwrap());
        let _ = arr.re_add(dev, &opts, &mut |_, _| {});
        drop(arr);
        let arr = match assemble_paths(&ps, &ro()) {
            Ok(arr) => arr,
            // 0.90 records it not in sync until the catch-up ends: refused by name.
            Err(raidkit_engine::EngineError::BadMember { device, why }) if meta == "0.90" => {
                assert!(
                    device.ends_with("m1.img") && why.contains("faulty"),
                    "{why}"
                );
                assemble_paths(&ps[..1], &ro()).unwrap()
            }
            Err(e) => panic!("{meta}: {e}"),
        };
        assert!(
            arr.is_degraded(),
            "{meta}: the half caught-up member counts as in sync"
        );
        for k in 0..8u64 {
            let mut b = vec![0u8; 4096];
            arr.read(k * (256 << 10), &mut b).unwrap();
            assert_eq!(b, vec![4; 4096], "{meta} at {k}");
        }
    }
}

/// 0.90, a re-add stopped before its catch-up copied anything, the re-added member
/// listed first: its own superblock (which the kernel judges it by, and which raidkit
/// reads first at equal events) says it is active but not in sync, so it is not trusted.
#[test]
fn re_add_cut_short_090_own_superblock_says_not_in_sync() {
    use raidkit_engine::sb::Super;
    use raidkit_format::v090::disk_state;
    use std::sync::atomic::AtomicBool;
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(4 << 20);
    o.metadata = raidkit_engine::sb::Metadata::parse("0.90").unwrap();
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(64 * 1024);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.fail_member(1, "test").unwrap();
    arr.remove_member(&ps[1].display().to_string()).unwrap();
    for k in 0..8u64 {
        arr.write(k * (256 << 10), &[4; 4096]).unwrap();
    }
    let opts = RebuildOptions {
        stop: Some(Arc::new(AtomicBool::new(true))),
        ..Default::default()
    };
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[1], true).unwrap());
    let _ = arr.re_add(dev, &opts, &mut |_, _| {});
    drop(arr);
    let d = FileDev::open(&ps[1], false).unwrap();
    let Super::V090(s) = &raidkit_engine::sb::probe(&d).unwrap().found[0].0 else {
        panic!("not 0.90");
    };
    assert_eq!(s.this_disk.raid_disk, 1);
    assert_eq!(
        s.this_disk.state & (disk_state::ACTIVE | disk_state::SYNC),
        disk_state::ACTIVE,
        "its own descriptor: {:?}",
        s.this_disk
    );
    assert_eq!(s.disks[1], s.this_disk);
    assert_ne!(s.state & raidkit_format::v090::sb_state::BITMAP_PRESENT, 0);
    drop(d);
    let order = [ps[1].clone(), ps[0].clone()];
    let arr = match assemble_paths(&order, &ro()) {
        Ok(arr) => arr,
        Err(raidkit_engine::EngineError::BadMember { device, .. }) => {
            assert!(device.ends_with("m1.img"), "{device}");
            assemble_paths(&ps[..1], &ro()).unwrap()
        }
        Err(e) => panic!("{e}"),
    };
    assert!(
        arr.is_degraded(),
        "the member not caught up counts as in sync"
    );
    for k in 0..8u64 {
        let mut b = vec![0u8; 4096];
        arr.read(k * (256 << 10), &mut b).unwrap();
        assert_eq!(b, vec![4; 4096], "at {k}");
    }
}

/// Client writes go on while members are re-added (each into a region never written
/// before, so its bit is new): every one reaches the re-added member — its bit was in
/// the catch-up's list, or the write found the member in its slot. Then the other
/// mirror fails and everything reads back from the re-added one.
#[test]
fn writes_during_re_add_reach_the_member() {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Mutex;
    const CHUNK: u64 = 64 << 10;
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(128 << 20);
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(CHUNK);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let arr = Arc::new(assemble_paths(&ps, &rw()).unwrap());
    let next = Arc::new(AtomicU64::new(0));
    let written: Arc<Mutex<Vec<(u64, u8)>>> = Arc::default();
    let chunks = arr.geometry().array_sectors() * 512 / CHUNK;
    for round in 0..12 {
        arr.fail_member(1, "test").unwrap();
        arr.remove_member(&ps[1].display().to_string()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (arr, next, written, stop) =
                (arr.clone(), next.clone(), written.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if k >= chunks {
                        break;
                    }
                    let byte = (k % 251) as u8 + 1;
                    arr.write(k * CHUNK, &[byte; 4096]).unwrap();
                    written.lock().unwrap().push((k * CHUNK, byte));
                }
            })
        };
        // Let the writer get going, so its writes run across the whole re-add.
        while next.load(std::sync::atomic::Ordering::Relaxed) < round * 60 + 5 {
            std::thread::yield_now();
        }
        let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[1], true).unwrap());
        arr.re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
            .unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        assert!(!arr.is_degraded(), "round {round}");
    }
    arr.fail_member(0, "test").unwrap();
    for &(off, byte) in written.lock().unwrap().iter() {
        let mut b = vec![0u8; 4096];
        arr.read(off, &mut b).unwrap();
        assert!(
            b == vec![byte; 4096],
            "the write at {off} is missing on the re-added member"
        );
    }
}

/// A returning member whose superblock leaves less room for the bitmap than the array's
/// bitmap takes (here its bad-block log starts one sector after the bitmap) is refused
/// by name before anything is written: the bitmap would overwrite what follows it.
#[test]
fn re_add_without_room_for_the_bitmap_is_refused() {
    use raidkit_engine::sb::Super;
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(128 << 20);
    o.bitmap = true;
    // 16384 bits: 2 KiB of bits after the 256-byte bitmap superblock.
    o.bitmap_chunk_bytes = Some(4096);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.fail_member(1, "test").unwrap();
    arr.remove_member(&ps[1].display().to_string()).unwrap();
    arr.write(R1, &[5; 4096]).unwrap();
    let d = FileDev::open(&ps[1], true).unwrap();
    let Super::V1(mut s) = raidkit_engine::sb::probe(&d).unwrap().found[0].0.clone() else {
        panic!("not 1.x");
    };
    s.bblog_offset = s.bitmap_offset + 1;
    s.bblog_size = 1;
    d.write_at(&s.encode(), s.super_offset * 512).unwrap();
    let log_at = (s.super_offset as i64 + i64::from(s.bblog_offset)) as u64 * 512;
    d.write_at(&[0xff; 512], log_at).unwrap();
    d.flush().unwrap();
    let dev: Arc<dyn BlockDev> = Arc::new(d);
    match arr.re_add(dev, &RebuildOptions::default(), &mut |_, _| {}) {
        Err(raidkit_engine::EngineError::BadMember { device, why }) => {
            assert!(device.ends_with("m1.img"), "{device}");
            assert!(why.contains("room"), "{why}");
        }
        other => panic!("taken back: {:?}", other.map(|r| r.sectors)),
    }
    assert!(arr.is_degraded());
    let mut after = vec![0u8; 512];
    FileDev::open(&ps[1], false)
        .unwrap()
        .read_at(&mut after, log_at)
        .unwrap();
    assert_eq!(
        after,
        vec![0xff; 512],
        "the sector after its bitmap was written"
    );
}

/// Writes to the device fail (it came back broken).
struct WritesFail;

impl raidkit_testkit::hooked::Hooks for WritesFail {
    fn write(&self, _: &dyn BlockDev, _: &[u8], _: u64) -> std::io::Result<()> {
        Err(std::io::Error::from_raw_os_error(5))
    }
}

/// A re-add whose first write to the returning member fails (its bitmap) leaves the
/// array as it was: no superblock written afterwards records the member in its role,
/// and the member can be re-added again once it works.
#[test]
fn failed_re_add_leaves_nothing_behind() {
    use raidkit_engine::sb::Role;
    use raidkit_testkit::hooked::Hooked;
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(4 << 20);
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(64 * 1024);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.fail_member(1, "test").unwrap();
    arr.remove_member(&ps[1].display().to_string()).unwrap();
    arr.write(R1, &[6; 4096]).unwrap();
    let broken: Arc<dyn BlockDev> = Arc::new(Hooked::new(
        FileDev::open(&ps[1], true).unwrap(),
        WritesFail,
    ));
    assert!(arr
        .re_add(broken, &RebuildOptions::default(), &mut |_, _| {})
        .is_err());
    assert!(arr.is_degraded());
    // Superblocks written after it (a clean mark) do not record it in its role.
    arr.mark_clean().unwrap();
    let d = FileDev::open(&ps[1], false).unwrap();
    let devnum = raidkit_engine::sb::probe(&d).unwrap().found[0]
        .0
        .dev_number();
    drop(d);
    let d = FileDev::open(&ps[0], false).unwrap();
    let sb0 = &raidkit_engine::sb::probe(&d).unwrap().found[0].0;
    assert!(
        !matches!(sb0.role_of(devnum), Role::Active(_)),
        "the surviving member records the failed re-add's member active"
    );
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[1], true).unwrap());
    arr.re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
        .unwrap();
    assert!(!arr.is_degraded());
    arr.stop().unwrap();
    let arr = assemble_paths(&ps[1..], &ro()).unwrap();
    let mut b = vec![0u8; 4096];
    arr.read(R1, &mut b).unwrap();
    assert_eq!(b, vec![6; 4096]);
}

/// A member is not re-added while a reshape is recorded (the superblocks hold two
/// shapes then): refused, saying to wait for the reshape.
#[test]
fn re_add_during_a_reshape_is_refused() {
    use raidkit_engine::jobs::reshape::{reshape, ReshapeOptions, ReshapeRequest};
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 4);
    let mut o = create_options(Level::Raid5, &ps);
    o.create_size = Some(8 << 20);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let arr = Arc::new(assemble_paths(&ps, &rw()).unwrap());
    arr.fail_member(3, "test").unwrap();
    arr.remove_member(&ps[3].display().to_string()).unwrap();
    let req = ReshapeRequest {
        chunk_sectors: Some(256),
        force: true,
        ..Default::default()
    };
    let opts = ReshapeOptions {
        buffer_sectors: Some(1024),
        stop_at: Some(4608),
        ..Default::default()
    };
    let (arr, _) = reshape(&arr, &req, &opts, &mut |_| {}).unwrap();
    assert!(arr.reshape_status().is_some(), "no reshape recorded");
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[3], true).unwrap());
    match arr.re_add(dev, &RebuildOptions::default(), &mut |_, _| {}) {
        Err(raidkit_engine::EngineError::Invalid(why)) => {
            assert!(why.contains("reshape"), "{why}")
        }
        other => panic!("re-added during a reshape: {:?}", other.map(|r| r.roles)),
    }
    assert!(arr.is_degraded());
}

/// The role table's length (`max_dev`) is the array's: a returning member whose own
/// superblock has a shorter table gets the array's whole table.
#[test]
fn re_add_takes_the_arrays_role_table_length() {
    use raidkit_engine::sb::Super;
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(4 << 20);
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(64 * 1024);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.fail_member(1, "test").unwrap();
    arr.remove_member(&ps[1].display().to_string()).unwrap();
    let d = FileDev::open(&ps[1], true).unwrap();
    let Super::V1(mut s) = raidkit_engine::sb::probe(&d).unwrap().found[0].0.clone() else {
        panic!("not 1.x");
    };
    s.max_dev = 2;
    s.dev_roles.truncate(2);
    d.write_at(&s.encode(), s.super_offset * 512).unwrap();
    d.flush().unwrap();
    let dev: Arc<dyn BlockDev> = Arc::new(d);
    arr.re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
        .unwrap();
    arr.stop().unwrap();
    let sb = |p: &std::path::Path| {
        let d = FileDev::open(p, false).unwrap();
        match raidkit_engine::sb::probe(&d).unwrap().found[0].0.clone() {
            Super::V1(s) => s,
            Super::V090(_) => panic!("not 1.x"),
        }
    };
    let (s0, s1) = (sb(&ps[0]), sb(&ps[1]));
    assert!(s0.max_dev > 2, "{}", s0.max_dev);
    assert_eq!(s1.max_dev, s0.max_dev);
    assert_eq!(s1.dev_roles, s0.dev_roles);
}

/// An array forced to run clean while its members say active (dirty and degraded,
/// assembled with force): the re-added member says what the others say (active), not
/// the clean state held in memory.
#[test]
fn re_add_into_a_forced_clean_array_says_what_the_members_say() {
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 3);
    let mut o = create_options(Level::Raid5, &ps);
    o.create_size = Some(4 << 20);
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(64 * 1024);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.fail_member(2, "test").unwrap();
    arr.remove_member(&ps[2].display().to_string()).unwrap();
    arr.write(R1, &[7; 4096]).unwrap();
    // The machine dies: the members say active, and the array is degraded.
    drop(arr);
    let forced = raidkit_engine::AssembleOptions {
        writable: true,
        force: true,
        ..Default::default()
    };
    let arr = assemble_paths(&ps[..2], &forced).unwrap();
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[2], true).unwrap());
    arr.re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
        .unwrap();
    drop(arr);
    let offset = |p: &std::path::Path| {
        let d = FileDev::open(p, false).unwrap();
        raidkit_engine::sb::probe(&d).unwrap().found[0]
            .0
            .resync_offset()
    };
    assert_ne!(offset(&ps[0]), u64::MAX, "the members say clean");
    assert_eq!(offset(&ps[2]), offset(&ps[0]));
}

/// A RAID10 (n2 over 3: each chunk's two copies rotate over the members) whose role 0
/// comes back while role 1 is gone: role 0 holds the only copy of the chunks it shares
/// with role 1, and one of two copies of those it shares with role 2. The catch-up (one
/// dirty bitmap chunk covering both kinds) copies from role 2 what role 0 missed, and
/// takes role 0's own data as it is where no other copy is valid — role 1 left before it
/// did, so nothing could be written there since: nothing is marked lost. Had role 1 left
/// after it, role 1 may have taken writes role 0 never saw: the re-add is refused
/// (nothing written; role 1 is to come back first), never served from role 0's old copy.
#[test]
fn raid10_returning_member_keeps_only_its_sole_copies() {
    const CHUNK: u64 = 64 << 10;
    for role1_left_first in [true, false] {
        let dir = TempDir::new("rk-engine").unwrap();
        let ps = member_files(dir.path(), 3);
        let mut o = create_options(Level::Raid10, &ps);
        o.create_size = Some(4 << 20);
        o.chunk_bytes = Some(CHUNK);
        o.layout = Some(0x102); // n2
        o.bitmap = true;
        o.bitmap_chunk_bytes = Some(1 << 20);
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let arr = assemble_paths(&ps, &rw()).unwrap();
        let g = arr.geometry().clone();
        let roles_of = |off: u64| -> Vec<usize> {
            let mut r: Vec<usize> = g
                .locate(off / 512)
                .unwrap()
                .copies
                .iter()
                .map(|c| c.0)
                .collect();
            r.sort_unstable();
            r
        };
        // Chunk 0 is on roles 0+1, chunk 1 on roles 0+2 (n2's rotation).
        assert_eq!(roles_of(0), vec![0, 1]);
        assert_eq!(roles_of(CHUNK), vec![0, 2]);
        let mut model: Vec<u8> = (0..(1u64 << 20)).map(|i| (i * 7 % 251) as u8).collect();
        arr.write(0, &model).unwrap();
        let leave = |r: usize| {
            arr.fail_member(r, "test").unwrap();
            arr.remove_member(&ps[r].display().to_string()).unwrap();
        };
        if role1_left_first {
            leave(1);
            leave(0);
        } else {
            leave(0);
            // Role 1 takes a write into chunk 0 that role 0 never sees, then goes too.
            arr.write(0, &[8; 4096]).unwrap();
            model[..4096].fill(8);
            leave(1);
        }
        // Role 0 misses a write into chunk 1 (taken by role 2): in the same dirty bit.
        arr.write(CHUNK, &[9; 4096]).unwrap();
        model[CHUNK as usize..CHUNK as usize + 4096].fill(9);
        let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[0], true).unwrap());
        let back = arr.re_add(dev, &RebuildOptions::default(), &mut |_, _| {});
        if !role1_left_first {
            // Role 1 left after it and holds writes it never got: refused, nothing
            // written (bring role 1 back first), never served from its old copy.
            let e = back.unwrap_err().to_string();
            assert!(e.contains("role 1") && e.contains("left after it"), "{e}");
            let mut got = vec![0u8; 4096];
            assert!(arr.read(0, &mut got).is_err(), "stale data served");
            continue;
        }
        let rep = back.unwrap();
        // Role 0's copy of chunk 1 was caught up from role 2.
        let c1 = g.locate(CHUNK / 512).unwrap().copies;
        let (_, d0) = c1.iter().find(|c| c.0 == 0).copied().unwrap();
        let on0 = std::fs::File::open(&ps[0]).unwrap();
        let mut b = vec![0u8; 4096];
        on0.read_exact_at(&mut b, data_offset_bytes(&ps[0]) + d0 * 512)
            .unwrap();
        assert_eq!(
            b,
            vec![9; 4096],
            "role 0 not caught up where role 2 holds a copy"
        );
        let mut got = vec![0u8; model.len()];
        assert_eq!(rep.lost, vec![], "role 0's sole copies were marked lost");
        assert_eq!(arr.lost_ranges(), vec![]);
        assert!(arr.bad_blocks().is_empty(), "{:?}", arr.bad_blocks());
        arr.read(0, &mut got).unwrap();
        assert!(got == model, "the array reads back differently");
    }
}
