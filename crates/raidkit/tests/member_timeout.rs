//! Member deadlines through NBD: a RAID1 member that turns slow (`slow=20s@N`, far beyond
//! the member timeout) is failed at its first late IO; client writes keep succeeding on
//! the other copy, and a graceful stop (SIGTERM) finishes at once and leaves the array
//! clean, with the slow member recorded as failed (issue 14 item 8: a stop used to wait
//! more than 120 s and clients got no error). Needs qemu-io (qemu-utils); skipped
//! without.

use raidkit_testkit::proc::{self, words, Daemon};
use raidkit_testkit::tempdir::TempDir;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn raidkit_ok(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(RAIDKIT)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "raidkit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_member_that_turns_slow_is_failed_and_a_stop_does_not_wait_for_it() {
    let Some(qio) = proc::system_tool("qemu-io", "member_timeout") else {
        return;
    };
    let t = TempDir::new("rk-mtimeout").unwrap();
    let dir = t.path();
    raidkit_ok(
        dir,
        &words("create --level 1 --raid-devices 2 --size 16M --name vol a b"),
    );
    let sock = dir.join("vol.sock");
    // Member b answers normally for its first 64 IOs (assembly, start-up), then every IO
    // takes 20 s more: with a 1 s member timeout it misses its deadline.
    let mut cmd = Command::new(RAIDKIT);
    cmd.current_dir(dir)
        .env("RAIDKIT_MEMBER_TIMEOUT", "1s")
        .args([
            "serve",
            "--socket",
            sock.to_str().unwrap(),
            "--export",
            "vol",
        ])
        .args(["a", "fault:slow=20s@64:b"]);
    let mut s = Daemon::spawn(&mut cmd, |l| l.starts_with("raidkit: serving;"), 30);
    let uri = format!("nbd+unix:///vol?socket={}", sock.display());
    // 200 sequential 4 KiB writes, each a member IO on b: one of them crosses IO 64.
    let cmds: Vec<String> = (0..200)
        .map(|i| format!("write -P {} {} 4k", i % 250 + 1, i * 4096))
        .collect();
    let mut args: Vec<&str> = vec!["-f", "raw", &uri];
    for c in &cmds {
        args.extend(["-c", c.as_str()]);
    }
    let t0 = Instant::now();
    let out = proc::run_system_ok(&qio, &args);
    let took = t0.elapsed();
    assert!(!out.contains("fail"), "{out}");
    assert!(
        took < Duration::from_secs(15),
        "200 writes took {took:?}: a member 20 s late held them"
    );
    let read = proc::run_system_ok(&qio, &["-f", "raw", &uri, "-c", "read -P 200 796k 4k"]);
    assert!(!read.contains("fail"), "{read}");
    let t0 = Instant::now();
    let (code, stderr) = s.stop("TERM");
    let stopping = t0.elapsed();
    assert!(
        stopping < Duration::from_secs(10),
        "a graceful stop took {stopping:?}: {stderr}"
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("every array is flushed and clean"),
        "{stderr}"
    );
    // The superblock on a says: clean, b faulty; a holds every write.
    let ex = raidkit_ok(dir, &["examine", "a"]);
    assert!(ex.contains("clean"), "{ex}");
    assert!(
        ex.to_lowercase().contains("faulty") || ex.contains("A."),
        "b not recorded as failed on a: {ex}"
    );
}
