//! `raidkit mount` end to end: a RAID5 made by raidkit is served over FUSE, put under a
//! loop device, formatted and filled through the kernel's ext4, stopped with SIGTERM —
//! and then the real kernel MD driver (mdref VM) assembles the same members, finds them
//! clean with `mismatch_cnt=0`, fsck's the file system and verifies the files.
//!
//! Needs root, /dev/fuse, mkfs.ext4/fsck.ext4/mount; skips with a printed reason
//! otherwise. Without working loop devices the file system is made and filled directly
//! on the FUSE file (mkfs.ext4 + debugfs). Without mdref the kernel half is skipped.

use raidkit_testkit::mdref::{self, Run};
use raidkit_testkit::pattern::fill_mdref;
use raidkit_testkit::proc::{run_timeout, terminate};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");
const UUID: &str = "f05efa5e:00000000:00000000:0000e2e5";

/// Run and require exit status 0; returns stdout.
fn ok(cmd: &mut Command, secs: u64) -> String {
    let desc = format!("{cmd:?}");
    let o = run_timeout(cmd, secs);
    assert!(
        o.status.success(),
        "{desc} failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn have(tool: &str) -> bool {
    mdref::which(tool).is_some()
        || Path::new("/sbin").join(tool).is_file()
        || Path::new("/usr/sbin").join(tool).is_file()
}

fn skip_reason() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse does not exist".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (FUSE mount, losetup and mount need root)".into());
    }
    for t in ["mkfs.ext4", "fsck.ext4", "mount", "umount", "sha256sum"] {
        if !have(t) {
            return Some(format!("{t} is not installed"));
        }
    }
    None
}

/// Everything to undo if the test fails half-way, undone in the right order: the ext4
/// mount, the loop device, then the raidkit process (SIGTERM, then SIGKILL and a lazy
/// unmount of the FUSE mount point). Runs before the temporary directory is deleted.
#[derive(Default)]
struct Cleanup {
    fs_mount: Option<PathBuf>,
    loop_dev: Option<String>,
    raidkit: Option<Child>,
    fuse_mount: Option<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(m) = self.fs_mount.take() {
            let _ = run_quiet(Command::new("umount").arg(&m));
        }
        if let Some(l) = self.loop_dev.take() {
            let _ = run_quiet(Command::new("losetup").arg("-d").arg(&l));
        }
        if let Some(mut c) = self.raidkit.take() {
            for _ in 0..20 {
                terminate(&c);
                std::thread::sleep(Duration::from_millis(250));
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
            }
            if !matches!(c.try_wait(), Ok(Some(_))) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if let Some(m) = self.fuse_mount.take() {
            let _ = run_quiet(Command::new("umount").arg("-l").arg(&m));
        }
    }
}

fn run_quiet(cmd: &mut Command) -> std::io::Result<std::process::ExitStatus> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
}

fn is_mountpoint(p: &Path) -> bool {
    let canon = match p.canonicalize() {
        Ok(c) => c,
        Err(_) => return false,
    };
    std::fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split(' ').nth(1) == Some(&*canon.to_string_lossy()))
        })
        .unwrap_or(false)
}

fn sha256(path: &Path) -> String {
    let out = ok(Command::new("sha256sum").arg(path), 30);
    out.split_whitespace().next().expect("sum").to_string()
}

/// A `raidkit mount` started in the background.
struct Started {
    lines: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Started {
    /// The first stdout line (printed once the mount is up), within 30 s.
    fn first_line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("raidkit mount printed nothing within 30 s")
    }
}

/// Start `raidkit mount MEMBERS... MNT`; the child goes into `cleanup`.
fn start_mount(members: &[PathBuf], mnt: &Path, cleanup: &mut Cleanup) -> Started {
    let mut child = Command::new(RAIDKIT)
        .arg("mount")
        .args(members)
        .arg(mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn raidkit mount");
    cleanup.fuse_mount = Some(mnt.to_path_buf());
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    cleanup.raidkit = Some(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    Started {
        lines: rx,
        stderr: err_t,
    }
}

/// SIGTERM the mount until it exits (a loop device detaches asynchronously, so the
/// first SIGTERMs may find the mount point busy); its exit status.
fn stop_mount(cleanup: &mut Cleanup) -> std::process::ExitStatus {
    let mut child = cleanup.raidkit.take().expect("child");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        terminate(&child);
        std::thread::sleep(Duration::from_millis(300));
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if Instant::now() > deadline {
            cleanup.raidkit = Some(child);
            panic!("raidkit mount did not stop within 20 s of SIGTERM");
        }
    }
}

/// `raidkit examine --json`: each member's "state".
fn member_states(members: &[PathBuf]) -> Vec<String> {
    let ex = ok(
        Command::new(RAIDKIT)
            .args(["examine", "--json"])
            .args(members),
        60,
    );
    let ex: Value = serde_json::from_str(&ex).expect("examine --json");
    let list = ex.as_array().expect("examine list");
    assert_eq!(list.len(), members.len());
    list.iter()
        .map(|m| m["state"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The files put on the file system: (name, content).
fn payload() -> Vec<(&'static str, Vec<u8>)> {
    let mut a = vec![0u8; 4 << 20];
    fill_mdref(1, 0, &mut a);
    let mut b = vec![0u8; (1 << 20) + 123];
    fill_mdref(2, 0, &mut b);
    let c = b"written through raidkit mount, loop and ext4\n".to_vec();
    vec![("seed1-4M.bin", a), ("seed2-1M123.bin", b), ("note.txt", c)]
}

#[test]
fn mount_losetup_mkfs_then_kernel_md_agrees() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-e2e").expect("tempdir");
    let dir = tmp.path();
    let members: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("d{i}.img"))).collect();
    let mut cleanup = Cleanup::default();

    // 1. A RAID5 of four sparse 64 MiB files, made by raidkit.
    let created = ok(
        Command::new(RAIDKIT)
            .args(["create", "--level", "5", "--raid-devices", "4"])
            .args(["--chunk", "64K", "--size", "64M", "--uuid", UUID])
            .args(["--name", "fusee2e", "--homehost", "none", "--json"])
            .args(&members),
        120,
    );
    let created: Value = serde_json::from_str(&created).expect("create --json");
    let array_bytes = created["array_bytes"].as_u64().expect("array_bytes");

    // 2. raidkit mount, in the foreground; the first stdout line names the file.
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    let started = start_mount(&members, &mnt, &mut cleanup);
    let first = started.first_line();
    let err_t = started.stderr;
    let file = mnt.canonicalize().expect("canon").join("fusee2e");
    assert!(
        first.contains("mounted read-write as") && first.ends_with(&*file.to_string_lossy()),
        "unexpected first line: {first}"
    );
    let md = std::fs::metadata(&file).expect("stat the array file");
    assert!(md.is_file());
    assert_eq!(md.len(), array_bytes);

    // 3. The file as a disk: loop device if they work here, else the file itself.
    let files = payload();
    let srcdir = dir.join("src");
    std::fs::create_dir(&srcdir).expect("mkdir src");
    let mut sums = String::new();
    for (name, data) in &files {
        let p = srcdir.join(name);
        std::fs::write(&p, data).expect("write source file");
        sums.push_str(&format!("{}  {name}\n", sha256(&p)));
    }
    let loop_dev = run_timeout(
        Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&file),
        30,
    );
    if loop_dev.status.success() {
        let dev = String::from_utf8_lossy(&loop_dev.stdout).trim().to_string();
        cleanup.loop_dev = Some(dev.clone());
        ok(
            Command::new("mkfs.ext4")
                .args(["-q", "-F", "-L", "fusee2e"])
                .arg(&dev),
            120,
        );
        let fsdir = dir.join("fs");
        std::fs::create_dir(&fsdir).expect("mkdir fs");
        ok(Command::new("mount").arg(&dev).arg(&fsdir), 60);
        cleanup.fs_mount = Some(fsdir.clone());
        for (name, data) in &files {
            std::fs::write(fsdir.join(name), data).expect("write into ext4");
        }
        ok(Command::new("sync").arg("-f").arg(&fsdir), 60);
        for (name, data) in &files {
            assert!(&std::fs::read(fsdir.join(name)).expect("read back") == data);
        }
        ok(Command::new("umount").arg(&fsdir), 60);
        cleanup.fs_mount = None;
        ok(Command::new("fsck.ext4").arg("-fn").arg(&dev), 120);
        ok(Command::new("losetup").arg("-d").arg(&dev), 30);
        cleanup.loop_dev = None;
    } else {
        println!(
            "note: loop devices do not work here ({}); mkfs.ext4 and debugfs on the FUSE file instead",
            String::from_utf8_lossy(&loop_dev.stderr).trim()
        );
        ok(
            Command::new("mkfs.ext4")
                .args(["-q", "-F", "-L", "fusee2e"])
                .arg(&file),
            120,
        );
        for (name, _) in &files {
            let req = format!("write {} {name}", srcdir.join(name).display());
            ok(
                Command::new("debugfs").args(["-w", "-R", &req]).arg(&file),
                60,
            );
        }
        ok(Command::new("fsck.ext4").arg("-fn").arg(&file), 120);
    }

    // 4. SIGTERM: unmount, flush, mark clean, exit 0.
    let status = stop_mount(&mut cleanup);
    let err_text = err_t.join().expect("stderr thread");
    assert!(status.success(), "raidkit mount exit: {status}\n{err_text}");
    assert!(
        err_text.contains("SIGTERM: unmounting")
            && err_text.contains("members flushed, array marked clean"),
        "stderr: {err_text}"
    );
    assert!(!is_mountpoint(&mnt), "FUSE mount left behind");
    cleanup.fuse_mount = None;

    // 5. Every superblock says clean.
    assert_eq!(member_states(&members), vec!["clean"; 4]);

    // 6. The real kernel: assemble, check, fsck, mount, verify the checksums.
    let Some(vm) = mdref::locate_or_skip() else {
        return;
    };
    let script = format!(
        r#"exec 2>&1
set -e
mdadm --assemble /dev/md0 $MDREF_DISKS
echo "resync_start=$(cat /sys/block/md0/md/resync_start)"
echo "degraded=$(cat /sys/block/md0/md/degraded)"
echo check > /sys/block/md0/md/sync_action
mdref-wait md0
echo "mismatch_cnt=$(cat /sys/block/md0/md/mismatch_cnt)"
fsck.ext4 -fn /dev/md0 && echo FSCK_OK
mkdir -p /mnt/t
mount -o ro /dev/md0 /mnt/t
cat > /tmp/SHA256SUMS <<'EOS'
{sums}EOS
cd /mnt/t && sha256sum -c /tmp/SHA256SUMS && echo SUMS_OK
cd /
umount /mnt/t
"#
    );
    let out = vm
        .run(&Run {
            disks: members.clone(),
            snapshot: true,
            timeout_secs: 240,
            script,
            ..Default::default()
        })
        .expect("run mdref");
    let text = format!("{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.status, 0, "mdref run failed:\n{text}");
    for want in [
        "resync_start=none",
        "degraded=0",
        "mismatch_cnt=0",
        "FSCK_OK",
        "SUMS_OK",
    ] {
        assert!(
            out.stdout.lines().any(|l| l.trim() == want),
            "missing {want:?} in:\n{text}"
        );
    }
    for (name, _) in &files {
        assert!(
            out.stdout.contains(&format!("{name}: OK")),
            "no OK for {name}:\n{text}"
        );
    }
}

#[test]
fn sigkill_leaves_it_dirty_and_the_next_mount_resyncs_first() {
    if let Some(why) = skip_reason() {
        println!("skip: {why}");
        return;
    }
    let tmp = TempDir::new("rk-fuse-kill").expect("tempdir");
    let dir = tmp.path();
    let members: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("k{i}.img"))).collect();
    let mut cleanup = Cleanup::default();
    ok(
        Command::new(RAIDKIT)
            .args(["create", "--level", "5", "--raid-devices", "4"])
            .args(["--chunk", "64K", "--size", "16M", "--name", "killed"])
            .args(&members),
        120,
    );
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    let started = start_mount(&members, &mnt, &mut cleanup);
    let first = started.first_line();
    let file = mnt.canonicalize().expect("canon").join("killed");
    assert!(first.ends_with(&*file.to_string_lossy()), "{first}");

    // Written (write-through: in the members' page cache), then killed before the
    // 1 s idle delay: the superblocks still say active.
    let mut data = vec![0u8; (1 << 20) + 4096];
    fill_mdref(5, 777, &mut data);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .expect("open rw");
        f.write_all_at(&data, 777).expect("write");
    }
    let mut child = cleanup.raidkit.take().expect("child");
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let _ = started.stderr.join();
    assert_eq!(member_states(&members), vec!["active"; 4]);

    // The dead FUSE mount is explained, before anything is assembled.
    let o = run_timeout(
        Command::new(RAIDKIT).arg("mount").args(&members).arg(&mnt),
        30,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("server died") && err.contains("umount"),
        "{err}"
    );
    ok(Command::new("umount").arg("-l").arg(&mnt), 30);

    // The next mount resyncs before serving; the data is there; a clean stop.
    let started = start_mount(&members, &mnt, &mut cleanup);
    let first = started.first_line();
    assert!(first.contains("mounted read-write"), "{first}");
    let mut back = vec![0u8; data.len()];
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&file).expect("open");
        f.read_exact_at(&mut back, 777).expect("read");
    }
    if let Some(first) = back.iter().zip(&data).position(|(a, b)| a != b) {
        let last = back
            .iter()
            .zip(&data)
            .rposition(|(a, b)| a != b)
            .unwrap_or(first);
        let status = stop_mount(&mut cleanup);
        let err_text = started.stderr.join().unwrap_or_default();
        panic!(
            "data written before SIGKILL differs at file bytes {}..={} (of {} written at 777); \
             second mount {status}: {err_text}",
            777 + first,
            777 + last,
            data.len()
        );
    }
    let status = stop_mount(&mut cleanup);
    let err_text = started.stderr.join().expect("stderr");
    assert!(status.success(), "{status}: {err_text}");
    assert!(
        err_text.contains("was not stopped cleanly: resyncing before accepting writes")
            && err_text.contains("resync done"),
        "{err_text}"
    );
    cleanup.fuse_mount = None;
    assert_eq!(member_states(&members), vec!["clean"; 4]);
}
