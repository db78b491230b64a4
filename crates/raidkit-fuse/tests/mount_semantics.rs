//! The FUSE file's exact behaviour, in-process: a RAID5 over four sparse 16 MiB files is
//! mounted, used through ordinary syscalls, stopped, and then read back through the
//! engine directly. Needs /dev/fuse and root (mount(2)); skips with a reason otherwise.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::dev::FileDev;
use raidkit_engine::sb::probe;
use raidkit_engine::Array;
use raidkit_fuse::{FuseError, MountConfig, Stats, StopHandle};
use raidkit_layout::Level;
use raidkit_testkit::pattern::fill_mdref;
use raidkit_testkit::tempdir::TempDir;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn skip_reason() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse does not exist".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: mounting FUSE directly needs CAP_SYS_ADMIN".into());
    }
    None
}

fn make_raid5(dir: &Path) -> (Vec<PathBuf>, u64) {
    let paths: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("d{i}.img"))).collect();
    let mut o = CreateOptions::new(
        Level::Raid5,
        paths.iter().cloned().map(MemberSpec::Path).collect(),
    );
    o.chunk_bytes = Some(64 * 1024);
    o.create_size = Some(16 << 20);
    o.name = "semantics".into();
    let arr = create(&o, &mut |_, _| {}).expect("create RAID5");
    let size = arr.size_bytes();
    arr.stop().expect("stop after create");
    (paths, size)
}

fn assemble(paths: &[PathBuf], writable: bool) -> Array {
    let o = AssembleOptions {
        writable,
        ..Default::default()
    };
    assemble_paths(paths, &o).expect("assemble")
}

/// A check of the whole array finds no parity mismatch.
fn assert_parity_clean(arr: &Array) {
    let rep = raidkit_engine::sync::run(
        arr,
        raidkit_engine::sync::SyncMode::Check,
        true,
        &mut |_, _| {},
    )
    .expect("check");
    assert!(
        rep.mismatches.is_empty(),
        "parity mismatches: {:?}",
        rep.mismatches
    );
}

/// True if the member's superblock says clean (resync_offset = MAX).
fn member_clean(path: &Path) -> bool {
    let dev = FileDev::open(path, false).expect("open member");
    let p = probe(&dev).expect("probe");
    p.found[0].0.resync_offset() == u64::MAX
}

/// A running mount; dropping it unmounts (lazily if need be) so a failing test never
/// leaves a mount behind in the temporary directory.
struct Served {
    stop: StopHandle,
    file: PathBuf,
    thread: Option<JoinHandle<Result<Stats, raidkit_fuse::FuseError>>>,
}

impl Served {
    fn start(array: Array, mountpoint: &Path, cfg: &MountConfig) -> Served {
        std::fs::create_dir_all(mountpoint).expect("mkdir mountpoint");
        let m = raidkit_fuse::mount(Arc::new(array), mountpoint, cfg).expect("mount");
        let stop = m.stop_handle();
        let file = m.file_path();
        let thread = std::thread::spawn(move || m.run());
        Served {
            stop,
            file,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Stats {
        self.stop.request_stop().expect("unmount");
        let t = self.thread.take().expect("thread");
        t.join().expect("serve thread").expect("run")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            if self.stop.request_stop().is_err() {
                let c =
                    std::ffi::CString::new(self.stop.mountpoint().as_os_str().as_encoded_bytes())
                        .expect("path");
                // SAFETY: valid NUL-terminated path; MNT_DETACH never blocks.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let _ = t.join();
        }
    }
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

#[test]
fn array_file_behaves_like_a_fixed_size_disk() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-sem").expect("tempdir");
    let (paths, size) = make_raid5(tmp.path());
    assert!(member_clean(&paths[0]));
    let mnt = tmp.path().join("mnt");
    let mut cfg = MountConfig::new("r5");
    cfg.idle_clean = Duration::from_millis(400);
    let served = Served::start(assemble(&paths, true), &mnt, &cfg);
    assert_eq!(served.file, mnt.canonicalize().expect("canon").join("r5"));

    // The directory holds exactly one regular file of the array's size.
    let names: Vec<String> = std::fs::read_dir(&mnt)
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["r5".to_string()]);
    let md = std::fs::metadata(&served.file).expect("stat");
    assert!(md.is_file());
    assert_eq!(md.len(), size);
    assert_eq!(md.permissions().mode() & 0o7777, 0o600);

    // Unaligned write crossing chunk and stripe boundaries, read back through the file.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&served.file)
        .expect("open rw");
    let off = 3 * 65536 - 1234;
    let mut data = vec![0u8; 3 * 1024 * 1024 + 17];
    fill_mdref(7, off, &mut data);
    f.write_all_at(&data, off).expect("write");
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, off).expect("read");
    assert!(back == data, "read back differs");
    f.sync_all().expect("fsync");

    // Fixed size: truncating to the same size is a no-op, to any other size EINVAL.
    f.set_len(size).expect("truncate to the same size");
    let e = f.set_len(size - 512).expect_err("shrink must fail");
    assert_eq!(errno(&e), libc::EINVAL);
    let e = f.set_len(size + 512).expect_err("grow must fail");
    assert_eq!(errno(&e), libc::EINVAL);
    assert_eq!(std::fs::metadata(&served.file).expect("stat").len(), size);

    // The end: a write crossing it is cut short, a write at it fails with ENOSPC,
    // a read at it returns nothing.
    let n = f
        .write_at(&[0xAB; 4096], size - 1000)
        .expect("write across the end");
    assert_eq!(n, 1000);
    let e = f.write_at(&[1; 512], size).expect_err("write at the end");
    assert_eq!(errno(&e), libc::ENOSPC);
    let mut tail = [0u8; 4096];
    assert_eq!(f.read_at(&mut tail, size - 1000).expect("read tail"), 1000);
    assert!(tail[..1000].iter().all(|&b| b == 0xAB));
    assert_eq!(f.read_at(&mut tail, size).expect("read at end"), 0);

    // fallocate: zero range writes zeros; punch hole (discard) is not supported.
    // SAFETY: valid fd; plain integer arguments.
    let rc = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            off as i64,
            8192,
        )
    };
    assert_eq!(rc, 0, "zero range: {}", std::io::Error::last_os_error());
    let mut z = vec![1u8; 8192];
    f.read_exact_at(&mut z, off).expect("read zeroed");
    assert!(z.iter().all(|&b| b == 0));
    data[..8192].fill(0);
    // SAFETY: as above.
    let rc = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            4096,
        )
    };
    assert_eq!(rc, -1);
    assert_eq!(errno(&std::io::Error::last_os_error()), libc::EOPNOTSUPP);

    // Nothing can be created, removed or renamed.
    let e = File::create(mnt.join("other")).expect_err("create");
    assert_eq!(errno(&e), libc::EPERM);
    let e = std::fs::remove_file(&served.file).expect_err("unlink");
    assert_eq!(errno(&e), libc::EPERM);
    let e = std::fs::rename(&served.file, mnt.join("x")).expect_err("rename");
    assert_eq!(errno(&e), libc::EPERM);
    let e = std::fs::metadata(mnt.join("nothing")).expect_err("lookup");
    assert_eq!(e.kind(), ErrorKind::NotFound);

    // Dirty while written, clean again after ~400 ms without writes (while mounted).
    f.write_all_at(&data[..4096], off).expect("write again");
    assert!(!member_clean(&paths[0]), "dirty right after a write");
    let t0 = Instant::now();
    while !member_clean(&paths[0]) {
        assert!(t0.elapsed() < Duration::from_secs(5), "never marked clean");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(200),
        "marked clean too early"
    );

    // Busy while open: stopping is refused and the mount keeps serving.
    match served.stop.request_stop() {
        Err(raidkit_fuse::FuseError::Busy { .. }) => {}
        other => panic!("stop while open: {other:?}"),
    }
    assert_eq!(f.read_at(&mut tail[..1], 0).expect("still serving"), 1);
    // A patient stop is refused too while the file stays open for its whole grace ...
    let t0 = Instant::now();
    match served.stop.request_stop_within(Duration::from_millis(300)) {
        Err(raidkit_fuse::FuseError::Busy { .. }) => {}
        other => panic!("patient stop while open: {other:?}"),
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(150),
        "gave up at once"
    );
    assert_eq!(f.read_at(&mut tail[..1], 0).expect("still serving"), 1);
    // ... and takes effect when the file is closed within it.
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(f);
    });
    served
        .stop
        .request_stop_within(Duration::from_secs(5))
        .expect("stop once the file is closed");
    closer.join().expect("closer");

    let stats = served.finish();
    assert!(stats.idle_clean_marks >= 1);
    assert_eq!(stats.io_errors, 0);
    assert!(stats.bytes_written >= data.len() as u64 + 4096 + 1000 + 8192);
    assert!(paths.iter().all(|p| member_clean(p)));

    // The engine, without FUSE, sees exactly what was written.
    let arr = assemble(&paths, false);
    assert!(!arr.needs_resync());
    let mut direct = vec![0u8; data.len()];
    arr.read(off, &mut direct).expect("engine read");
    assert!(direct == data, "engine read differs");
    let mut end = vec![0u8; 1000];
    arr.read(size - 1000, &mut end).expect("engine read end");
    assert!(end.iter().all(|&b| b == 0xAB));
    assert_parity_clean(&arr);
}

#[test]
fn read_only_mount_refuses_writes() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-ro").expect("tempdir");
    let (paths, size) = make_raid5(tmp.path());
    let before: Vec<u64> = paths
        .iter()
        .map(|p| raidkit_testkit::hash_file(p).expect("hash"))
        .collect();
    let mnt = tmp.path().join("mnt");
    let mut cfg = MountConfig::new("ro.img");
    cfg.read_only = true;
    let served = Served::start(assemble(&paths, false), &mnt, &cfg);
    let md = std::fs::metadata(&served.file).expect("stat");
    assert_eq!(md.len(), size);
    assert_eq!(md.permissions().mode() & 0o7777, 0o400);
    let e = OpenOptions::new()
        .write(true)
        .open(&served.file)
        .expect_err("open for writing");
    assert_eq!(errno(&e), libc::EROFS);
    let f = File::open(&served.file).expect("open ro");
    let mut buf = vec![1u8; 1 << 20];
    f.read_exact_at(&mut buf, 0).expect("read");
    assert!(buf.iter().all(|&b| b == 0), "a new array reads as zeros");
    drop(f);
    let e = std::fs::remove_file(&served.file).expect_err("unlink");
    assert_eq!(errno(&e), libc::EROFS);
    let stats = served.finish();
    assert_eq!(stats, Stats::default());
    let after: Vec<u64> = paths
        .iter()
        .map(|p| raidkit_testkit::hash_file(p).expect("hash"))
        .collect();
    assert_eq!(before, after, "a read-only mount changed a member");
}

#[test]
fn file_names() {
    assert_eq!(raidkit_fuse::default_file_name("host:raidkit"), "raidkit");
    assert_eq!(raidkit_fuse::default_file_name("data"), "data");
    assert_eq!(raidkit_fuse::default_file_name("h:a/b"), "a_b");
    assert_eq!(raidkit_fuse::default_file_name(""), "array");
    assert_eq!(raidkit_fuse::default_file_name("h:.."), "array");
    assert!(raidkit_fuse::check_file_name("disk.img").is_ok());
    for bad in ["", ".", "..", "a/b"] {
        assert!(raidkit_fuse::check_file_name(bad).is_err(), "{bad:?}");
    }
    assert!(raidkit_fuse::check_file_name(&"x".repeat(256)).is_err());
}

#[test]
fn direct_io_parallel_writers_keep_parity_consistent() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-dio").expect("tempdir");
    let (paths, size) = make_raid5(tmp.path());
    let mnt = tmp.path().join("mnt");
    let mut cfg = MountConfig::new("dio");
    cfg.direct_io = true;
    cfg.threads = 4;
    let served = Served::start(assemble(&paths, true), &mnt, &cfg);
    assert_eq!(std::fs::metadata(&served.file).expect("stat").len(), size);

    // Four writers, each filling its own quarter in odd-sized pieces that straddle
    // chunk and stripe boundaries, at the same time.
    let quarter = size / 4;
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let file = served.file.clone();
            std::thread::spawn(move || {
                let f = OpenOptions::new().write(true).open(&file).expect("open rw");
                let mut pos = w * quarter;
                let end = pos + quarter;
                let mut buf = vec![0u8; 100_003];
                while pos < end {
                    let n = (end - pos).min(buf.len() as u64) as usize;
                    fill_mdref(11, pos, &mut buf[..n]);
                    f.write_all_at(&buf[..n], pos).expect("write");
                    pos += n as u64;
                }
                f.sync_all().expect("fsync");
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    let f = File::open(&served.file).expect("open");
    let mut all = vec![0u8; (4 * quarter) as usize];
    f.read_exact_at(&mut all, 0).expect("read back");
    drop(f);
    assert!(
        raidkit_testkit::pattern::compare(raidkit_testkit::pattern::Kind::Mdref, 11, 0, &all)
            .is_none(),
        "read back through FUSE differs from the pattern"
    );
    let stats = served.finish();
    assert_eq!(stats.bytes_written, 4 * quarter);
    assert_eq!(stats.io_errors, 0);

    let arr = assemble(&paths, false);
    let mut direct = vec![0u8; all.len()];
    arr.read(0, &mut direct).expect("engine read");
    assert!(direct == all, "engine read differs");
    assert_parity_clean(&arr);
}

/// True if /proc/self/mountinfo lists a mount at `p` (a path without spaces).
fn mounted_at(p: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let want = p.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m == want))
}

fn c_path(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path")
}

/// Root stops its own mount even after a directory of the mount point's path (one
/// another user may write) was renamed and replaced by a symlink to another mount:
/// `umount2` on the path followed the symlink and unmounted that other file system,
/// leaving the array mounted.
#[test]
fn stop_unmounts_this_mount_even_after_the_path_is_swapped() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-swap").expect("tempdir");
    let base = tmp.path().canonicalize().expect("canon");
    let (paths, _) = make_raid5(&base);
    let victim = base.join("victim");
    std::fs::create_dir_all(victim.join("mnt")).expect("mkdir victim");
    let tmpfs = c_path(&victim.join("mnt"));
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            c"none".as_ptr(),
            tmpfs.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        println!(
            "skip: cannot mount a tmpfs: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    let owned = base.join("owned");
    let mut served = Served::start(
        assemble(&paths, true),
        &owned.join("mnt"),
        &MountConfig::new("r5"),
    );

    // The other user's move: their directory goes away, a symlink to the victim replaces it.
    std::fs::rename(&owned, base.join("moved")).expect("rename");
    std::os::unix::fs::symlink(&victim, &owned).expect("symlink");
    let stopped = served.stop.request_stop();

    let victim_kept = mounted_at(&victim.join("mnt"));
    let array_left = mounted_at(&base.join("moved/mnt"));
    if array_left {
        // SAFETY: valid NUL-terminated path; MNT_DETACH never blocks.
        unsafe { libc::umount2(c_path(&base.join("moved/mnt")).as_ptr(), libc::MNT_DETACH) };
    }
    let thread = served.thread.take().expect("thread");
    let run = thread.join().expect("serve thread");
    if victim_kept {
        // SAFETY: as above.
        unsafe { libc::umount2(tmpfs.as_ptr(), libc::MNT_DETACH) };
    }
    stopped.expect("stop");
    assert!(victim_kept, "the other file system was unmounted");
    assert!(!array_left, "the array stayed mounted");
    run.expect("run");
    assert!(paths.iter().all(|p| member_clean(p)));
}

/// `cp`, `dd` and a shell's `>` open the file with O_TRUNC: that truncates nothing (as on
/// a block device) instead of failing with EINVAL, so an image can be written over the
/// array; bytes past what was written stay as they were.
#[test]
fn opening_with_o_trunc_writes_over_the_array() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-trunc").expect("tempdir");
    let (paths, size) = make_raid5(tmp.path());
    let mnt = tmp.path().join("mnt");
    let served = Served::start(assemble(&paths, true), &mnt, &MountConfig::new("r5"));
    let mut old = vec![0u8; 8192];
    fill_mdref(3, 0, &mut old);
    let f = OpenOptions::new()
        .write(true)
        .open(&served.file)
        .expect("open");
    f.write_all_at(&old, 0).expect("write");
    drop(f);

    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&served.file)
        .expect("open with O_TRUNC");
    std::io::Write::write_all(&mut f, &[0x5A; 4096]).expect("write after O_TRUNC");
    drop(f);
    assert_eq!(std::fs::metadata(&served.file).expect("stat").len(), size);
    let mut back = vec![0u8; 8192];
    File::open(&served.file)
        .expect("open")
        .read_exact_at(&mut back, 0)
        .expect("read");
    assert!(back[..4096].iter().all(|&b| b == 0x5A));
    assert!(back[4096..] == old[4096..], "bytes past the write changed");
    // Truncating to another size is still refused.
    let e = OpenOptions::new()
        .write(true)
        .open(&served.file)
        .expect("open")
        .set_len(0)
        .expect_err("truncate to 0");
    assert_eq!(errno(&e), libc::EINVAL);
    served.finish();
}

/// An O_DIRECT write across the end of the array fails with ENOSPC: the kernel turned
/// the short count of the request into EIO, which says the array failed. A direct write
/// that ends at the end still succeeds, and a buffered one across it is still cut short.
#[test]
fn a_direct_write_across_the_end_says_no_space_not_io_error() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-dend").expect("tempdir");
    let (paths, size) = make_raid5(tmp.path());
    for direct_io in [false, true] {
        let mnt = tmp.path().join(format!("mnt{direct_io}"));
        let mut cfg = MountConfig::new("r5");
        cfg.direct_io = direct_io;
        let served = Served::start(assemble(&paths, true), &mnt, &cfg);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&served.file)
            .expect("open O_DIRECT");
        let data = vec![0x3Cu8; 8192];
        let e = f
            .write_at(&data, size - 4096)
            .expect_err("direct write across the end");
        assert_eq!(errno(&e), libc::ENOSPC, "direct_io {direct_io}: {e}");
        assert_eq!(
            f.write_at(&data[..4096], size - 4096).expect("to the end"),
            4096
        );
        drop(f);
        let f = OpenOptions::new()
            .write(true)
            .open(&served.file)
            .expect("open");
        if !direct_io {
            assert_eq!(f.write_at(&data, size - 1000).expect("buffered"), 1000);
        }
        drop(f);
        let stats = served.finish();
        assert_eq!(stats.io_errors, 0);
    }
}

/// A second mount on a directory that already holds a raidkit mount is refused, naming
/// the one there: stacked on top, it hid the first array's file while that array kept
/// running. The first mount keeps serving.
#[test]
fn a_second_mount_on_the_same_directory_is_refused() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-twice").expect("tempdir");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).expect("mkdir a");
    std::fs::create_dir_all(&b).expect("mkdir b");
    let (first, _) = make_raid5(&a);
    let (second, _) = make_raid5(&b);
    let mnt = tmp.path().join("mnt");
    let first_arr = assemble(&first, true);
    let uuid = first_arr.uuid_text();
    let served = Served::start(first_arr, &mnt, &MountConfig::new("first"));

    let e = raidkit_fuse::check_mountpoint(&mnt).expect_err("checked twice");
    let text = e.to_string();
    assert!(text.contains(&format!("raidkit:{uuid}")), "{text}");
    assert!(text.contains("already on it"), "{text}");
    let Err(e) = raidkit_fuse::mount(
        Arc::new(assemble(&second, true)),
        &mnt,
        &MountConfig::new("second"),
    ) else {
        panic!("a second mount on {} was allowed", mnt.display());
    };
    assert!(matches!(e, FuseError::BadMountpoint { .. }), "{e}");
    // The first one is still what the directory shows.
    assert!(served.file.ends_with("first"), "{}", served.file.display());
    assert!(
        std::fs::metadata(&served.file).is_ok(),
        "first mount's file gone"
    );
    served.finish();
    // Once it is unmounted the directory can be used again.
    raidkit_fuse::check_mountpoint(&mnt).expect("free again");
}

/// A mount whose server ends without being unmounted (the caller fails before `run`, or
/// drops it) is detached, not left behind as a dead mount point ("Transport endpoint is
/// not connected"). And a stop asked for once the mount is gone unmounts nothing else,
/// even when the mount point is itself the root of another file system.
#[test]
fn a_mount_never_run_is_detached_and_a_late_stop_unmounts_nothing_else() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-detach").expect("tempdir");
    let (paths, _) = make_raid5(tmp.path());
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let m = raidkit_fuse::mount(
        Arc::new(assemble(&paths, true)),
        &mnt,
        &MountConfig::new("r"),
    )
    .expect("mount");
    let canonical = m.mountpoint().to_path_buf();
    assert!(mounted_at(&canonical));
    drop(m);
    assert!(!mounted_at(&canonical), "a dropped mount stayed mounted");
    std::fs::metadata(&canonical).expect("the mount point answers again");

    // The mount point is a tmpfs's root; raidkit mounts over it, is unmounted from
    // outside, and is then asked to stop.
    let src = c_path(Path::new("tmpfs"));
    let target = c_path(&canonical);
    // SAFETY: valid NUL-terminated strings; a plain tmpfs mount with no data.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            src.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "tmpfs mount: {}", std::io::Error::last_os_error());
    let served = Served::start(assemble(&paths, true), &canonical, &MountConfig::new("r"));
    let stop = served.stop.clone();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::umount2(target.as_ptr(), 0) },
        0,
        "umount raidkit"
    );
    served.finish();
    stop.request_stop().expect("a late stop");
    let still_tmpfs = mounted_at(&canonical);
    // SAFETY: valid NUL-terminated path.
    unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    assert!(
        still_tmpfs,
        "the late stop unmounted the tmpfs under the mount"
    );
}
