//! What an IO error does to a member, per level (issue 14 items 6 and 7), the way md's
//! error handlers decide: a member whose writes or flushes fail is failed while the array
//! can do without it; the last copy of some data is kept (RAID1/10, RAID0/linear) and only
//! the request that failed fails; a RAID4/5/6 member is failed even beyond the
//! redundancy (md's raid5_error), and nothing wrong is ever read back.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::sb::{probe, Role};
use raidkit_engine::{Array, FileDev};
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

/// An array of `n` 16 MiB member files, 64 KiB chunks; returns the members' paths and
/// their data offset (sectors).
fn make(dir: &TempDir, level: Level, layout: Option<&str>, n: usize) -> (Vec<PathBuf>, u64) {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    o.create_size = Some(16 << 20);
    o.name = "t".into();
    o.assume_clean = true;
    if level != Level::Raid1 {
        o.chunk_bytes = Some(64 << 10);
    }
    if let Some(l) = layout {
        o.layout = Some(names::parse_layout(level, l).unwrap());
    }
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let d = FileDev::open(&ps[0], false).unwrap();
    let off = probe(&d).unwrap().found[0].0.data_offset();
    (ps, off)
}

/// The members as assembly arguments, `rules` wrapping the ones named.
fn specs(ps: &[PathBuf], rules: &[(usize, String)]) -> Vec<PathBuf> {
    ps.iter()
        .enumerate()
        .map(|(i, p)| match rules.iter().find(|(j, _)| *j == i) {
            Some((_, r)) => PathBuf::from(format!("fault:{r}:{}", p.display())),
            None => p.clone(),
        })
        .collect()
}

/// The role the superblock on `p` gives the device with `devnum`.
fn recorded_role(p: &Path, devnum: usize) -> Role {
    let d = FileDev::open(p, false).unwrap();
    probe(&d).unwrap().found[0].0.role_of(devnum)
}

/// Every 64 KiB block of the array either reads back as `model` says (or as `alt`
/// says, for blocks it has: where a failed write may or may not have landed) or fails:
/// never anything else. Returns the blocks that failed.
fn read_back(arr: &Array, model: &[u8], alt: &[(u64, Vec<u8>)]) -> Vec<u64> {
    let mut bad = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    for (i, want) in model.chunks(64 << 10).enumerate() {
        let off = (i as u64) << 16;
        let got = &mut buf[..want.len()];
        match arr.read(off, got) {
            Ok(()) => assert!(
                *got == *want || alt.iter().any(|(o, a)| *o == off && *got == a[..]),
                "block at {off} reads wrong data"
            ),
            Err(_) => bad.push(off),
        }
    }
    bad
}

/// Fill the array with a pattern through `arr`; returns the model.
fn fill(arr: &Array) -> Vec<u8> {
    let model: Vec<u8> = (0..arr.size_bytes())
        .map(|i| (i / 4096 % 251) as u8)
        .collect();
    arr.write(0, &model).unwrap();
    arr.flush().unwrap();
    model
}

#[test]
fn a_member_whose_flushes_fail_is_failed_and_the_array_goes_on() {
    let t = TempDir::new("rk-memerr").unwrap();
    let (ps, _) = make(&t, Level::Raid1, None, 2);
    // Member 1 stops making anything durable from its first flush on.
    let arr = assemble_paths(&specs(&ps, &[(1, "feio".into())]), &rw()).unwrap();
    let ev = arr.subscribe();
    arr.write(4096, &[0x5a; 8192]).unwrap();
    arr.flush().unwrap();
    assert_eq!(arr.missing_roles(), vec![1]);
    let failed: Vec<String> = ev
        .try_iter()
        .filter_map(|e| match e {
            raidkit_engine::array::ArrayEvent::MemberFailed { role, reason, .. } => {
                Some(format!("{role}: {reason}"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].starts_with("1: ") && failed[0].contains("Input/output error"),
        "{failed:?}"
    );
    // Writes and flushes go on on the other copy; the superblock there says so.
    for i in 0..15u64 {
        arr.write(i << 20, &[i as u8; 4096]).unwrap();
        arr.flush().unwrap();
    }
    arr.stop().unwrap();
    assert_eq!(recorded_role(&ps[0], 1), Role::Faulty);
    let arr = assemble_paths(&ps[..1], &AssembleOptions::default()).unwrap();
    let mut b = vec![0u8; 8192];
    arr.read(4096, &mut b).unwrap();
    assert_eq!(b, vec![0x5a; 8192]);
}

#[test]
fn flush_failures_in_every_place_fail_the_member() {
    // The superblocks' flush at the first write is flush 1, a data flush 2; with a
    // bitmap, the bits are flushed (flush 2) before the data they cover is written.
    for (bitmap, fail_from, what) in [
        (false, 2, "flush failed"),
        (true, 2, "writing its metadata failed"),
    ] {
        let t = TempDir::new("rk-memerr").unwrap();
        let ps = member_files(t.path(), 2);
        let mut o = create_options(Level::Raid1, &ps);
        o.create_size = Some(16 << 20);
        o.bitmap = bitmap;
        o.assume_clean = true;
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let arr = assemble_paths(&specs(&ps, &[(1, format!("feio@{fail_from}"))]), &rw()).unwrap();
        let ev = arr.subscribe();
        arr.write(0, &[3; 4096]).unwrap();
        arr.flush().unwrap();
        assert_eq!(arr.missing_roles(), vec![1], "bitmap {bitmap}");
        let reasons: Vec<String> = ev
            .try_iter()
            .filter_map(|e| match e {
                raidkit_engine::array::ArrayEvent::MemberFailed { reason, .. } => Some(reason),
                _ => None,
            })
            .collect();
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(reasons[0].starts_with(what), "bitmap {bitmap}: {reasons:?}");
        arr.write(8192, &[4; 4096]).unwrap();
        arr.flush().unwrap();
        arr.stop().unwrap();
        assert_eq!(recorded_role(&ps[0], 1), Role::Faulty);
    }
}

#[test]
fn flushes_of_the_last_copy_fail_the_flush_not_the_member() {
    let t = TempDir::new("rk-memerr").unwrap();
    let (ps, _) = make(&t, Level::Raid1, None, 2);
    // Member 0 fails from its first flush, member 1 from its third.
    let arr = assemble_paths(
        &specs(&ps, &[(0, "feio".into()), (1, "feio@3".into())]),
        &rw(),
    )
    .unwrap();
    arr.write(0, &[1; 4096]).unwrap();
    assert_eq!(arr.missing_roles(), vec![0]);
    let mut n = 0;
    while arr.flush().is_ok() {
        n += 1;
        assert!(n < 10, "member 1's flushes never failed");
    }
    // The last copy is kept: reads go on.
    assert_eq!(arr.missing_roles(), vec![0]);
    let mut b = vec![0u8; 4096];
    arr.read(0, &mut b).unwrap();
    assert_eq!(b, vec![1; 4096]);
}

/// Every copy of array bytes 2 MiB..+4 KiB fails writes (`fault:weio@` on each member
/// holding one, at its own sector): the write fails, every copy but one is failed, the
/// last is kept; everything else reads and writes as before, and the 4 KiB the failed
/// write left behind read as an error, never as whatever is there.
fn same_write_fails_on_every_copy(level: Level, layout: Option<&str>, n: usize) {
    let t = TempDir::new("rk-memerr").unwrap();
    let (ps, off) = make(&t, level, layout, n);
    let arr = assemble_paths(&ps, &AssembleOptions::default()).unwrap();
    let copies = arr.geometry().locate(4096).unwrap().copies;
    drop(arr);
    let rules: Vec<(usize, String)> = copies
        .iter()
        .map(|&(role, dsec)| (role, format!("weio@{}-{}", off + dsec, off + dsec + 7)))
        .collect();
    let arr = assemble_paths(&specs(&ps, &rules), &rw()).unwrap();
    let mut model = vec![0u8; arr.size_bytes() as usize];
    model[..2 << 20].copy_from_slice(&fill_some(&arr, 0, 2 << 20));
    let e = arr.write(2 << 20, &[0xee; 4096]).unwrap_err().to_string();
    assert!(
        e.starts_with("write to array bytes 2097152..2101248 failed"),
        "{level}: {e}"
    );
    // Every copy but the last is failed.
    assert_eq!(arr.missing_roles().len(), copies.len() - 1, "{level}");
    // The rest of the array is written and read as usual.
    let rest = fill_some(&arr, 3 << 20, arr.size_bytes() - (3 << 20));
    model[3 << 20..].copy_from_slice(&rest);
    arr.flush().unwrap();
    assert_eq!(read_back(&arr, &model, &[]), vec![2 << 20], "{level}");
    assert_eq!(arr.lost_ranges(), vec![(2 << 20, 4096)], "{level}");
}

/// Write a pattern over `[off, off + len)`; returns it.
fn fill_some(arr: &Array, off: u64, len: u64) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(|i| ((off + i) / 4096 % 241) as u8).collect();
    arr.write(off, &data).unwrap();
    data
}

#[test]
fn raid1_keeps_its_last_copy_when_both_fail_the_same_write() {
    same_write_fails_on_every_copy(Level::Raid1, None, 2);
    same_write_fails_on_every_copy(Level::Raid1, None, 3);
}

#[test]
fn raid10_keeps_the_last_copy_of_a_pair() {
    same_write_fails_on_every_copy(Level::Raid10, Some("n2"), 4);
    same_write_fails_on_every_copy(Level::Raid10, Some("f2"), 4);
    same_write_fails_on_every_copy(Level::Raid10, Some("o2"), 3);
}

#[test]
fn raid0_and_linear_keep_a_member_whose_write_failed() {
    same_write_fails_on_every_copy(Level::Raid0, None, 3);
    same_write_fails_on_every_copy(Level::Linear, None, 2);
}

#[test]
fn raid5_fails_members_beyond_its_redundancy_and_never_reads_wrong_data() {
    let t = TempDir::new("rk-memerr").unwrap();
    let (ps, off) = make(&t, Level::Raid5, None, 3);
    // Members 0 and 1 fail writes of the first 4 KiB of their data area.
    let rule = format!("weio@{}-{}", off, off + 7);
    let arr = assemble_paths(&specs(&ps, &[(0, rule.clone()), (1, rule)]), &rw()).unwrap();
    let model = vec![0u8; arr.size_bytes() as usize];
    // A whole stripe (two data chunks): both members' writes fail (the stripe cache may
    // hold the write until the flush, which then reports it).
    let new = vec![0x11; 128 << 10];
    assert!(arr.write(0, &new).and_then(|()| arr.flush()).is_err());
    // md's raid5_error: both are failed, although the second one takes the array beyond
    // its redundancy; the data they alone held is gone.
    assert_eq!(arr.missing_roles(), vec![0, 1]);
    // Nothing wrong is read: what cannot be reconstructed fails (the failed write's
    // block may read as before or as written).
    let alt = [
        (0, new[..64 << 10].to_vec()),
        (64 << 10, new[64 << 10..].to_vec()),
    ];
    let bad = read_back(&arr, &model, &alt);
    assert!(bad.len() > model.len() / (64 << 10) / 2, "{bad:?}");
}

#[test]
fn raid6_fails_a_member_within_its_redundancy_and_serves_everything() {
    let t = TempDir::new("rk-memerr").unwrap();
    let (ps, off) = make(&t, Level::Raid6, None, 4);
    let rule = format!("weio@{}-{}", off, off + 7);
    let arr = assemble_paths(&specs(&ps, &[(0, rule.clone()), (1, rule)]), &rw()).unwrap();
    let model = fill(&arr);
    assert_eq!(arr.missing_roles(), vec![0, 1]);
    assert_eq!(read_back(&arr, &model, &[]), Vec::<u64>::new());
}

#[test]
fn the_administrator_cannot_fail_the_last_copy() {
    let t = TempDir::new("rk-memerr").unwrap();
    let (ps, _) = make(&t, Level::Raid10, Some("n2"), 4);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.fail_member_checked(0, "test").unwrap();
    arr.fail_member_checked(3, "test").unwrap();
    let e = arr.fail_member_checked(1, "test").unwrap_err().to_string();
    assert_eq!(
        e,
        format!("refusing to fail role 1 ({}): the array cannot serve all of its data without it; add a spare and replace the member instead", ps[1].display())
    );
    assert_eq!(arr.missing_roles(), vec![0, 3]);
}

/// The state reported (status, detail) says `active` exactly while the superblocks do
/// (issue 14 item 9): from the first write until the array is marked clean.
#[test]
fn the_state_is_active_while_the_superblocks_say_so() {
    let t = TempDir::new("rk-memerr").unwrap();
    let (ps, _) = make(&t, Level::Raid1, None, 2);
    let on_disk = |p: &Path| {
        let d = FileDev::open(p, false).unwrap();
        probe(&d).unwrap().found[0].0.resync_offset() != u64::MAX
    };
    let arr = std::sync::Arc::new(assemble_paths(&ps, &rw()).unwrap());
    let sup = raidkit_engine::supervisor::Supervisor::start("t", arr.clone());
    assert_eq!(arr.state_words(), ["clean"]);
    assert_eq!(sup.status().state, "clean");
    arr.write(0, &[1; 4096]).unwrap();
    assert!(on_disk(&ps[0]));
    assert_eq!(arr.state_words(), ["active"]);
    assert_eq!(sup.status().state, "active");
    arr.fail_member(1, "test").unwrap();
    assert_eq!(sup.status().state, "active, degraded");
    arr.mark_clean().unwrap();
    assert!(!on_disk(&ps[0]));
    assert_eq!(sup.status().state, "clean, degraded");
    sup.shutdown().unwrap();
}

/// `create` refuses two arguments that are one file (a symlink, a hard link) before it
/// writes anything, and a FIFO without hanging in open() (issue 14 item 10).
#[test]
fn create_refuses_one_file_twice_before_writing_and_fifos_at_once() {
    let t = TempDir::new("rk-memerr").unwrap();
    let a = t.path().join("a");
    std::fs::write(&a, vec![0u8; 16 << 20]).unwrap();
    std::os::unix::fs::symlink(&a, t.path().join("sym")).unwrap();
    std::fs::hard_link(&a, t.path().join("hard")).unwrap();
    for twin in ["sym", "hard"] {
        let ps = [a.clone(), t.path().join(twin)];
        let o = create_options(Level::Raid1, &ps);
        let e = create(&o, &mut |_, _| {}).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "{}: is the same device as {}",
                ps[1].display(),
                a.display()
            )),
            "{e}"
        );
        assert!(
            std::fs::read(&a).unwrap().iter().all(|&b| b == 0),
            "{twin}: written"
        );
    }
    let fifo = t.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let (a2, f2) = (a.clone(), fifo.clone());
    std::thread::spawn(move || {
        let o = CreateOptions::new(
            Level::Raid1,
            vec![MemberSpec::Path(a2.clone()), MemberSpec::Path(f2.clone())],
        );
        let c = create(&o, &mut |_, _| {})
            .map(drop)
            .map_err(|e| e.to_string());
        let asm = assemble_paths(&[a2, f2], &AssembleOptions::default())
            .map(drop)
            .map_err(|e| e.to_string());
        let _ = tx.send((c, asm));
    });
    let (c, asm) = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("a FIFO member hangs create or assembly");
    let want = format!(
        "{}: is a FIFO: members are regular files or block devices",
        fifo.display()
    );
    assert_eq!(c.unwrap_err(), want);
    assert_eq!(asm.unwrap_err(), want);
}
