//! More real NBD clients against `raidkit serve`: `nbdfuse` (the array as a FUSE file
//! through libnbd, written with dd and read back) and the kernel's `nbd-client`, which
//! needs /dev/nbd0 (skipped with a message where the nbd driver is absent).

use raidkit_testkit::proc::{wait_path, which, words, Stopping};
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn rk(dir: &Path, args: &[&str]) -> String {
    let o = Command::new(RAIDKIT)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "raidkit {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn serve(d: &Path, members: &[&str]) -> (Stopping, PathBuf) {
    let sock = d.join("s.sock");
    let mut args = vec!["serve", "--socket", "s.sock", "--export", "x"];
    args.extend_from_slice(members);
    let child = Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_path(&sock, 20);
    (Stopping(child), sock)
}

#[test]
fn nbdfuse_file_write_read() {
    let Some(nbdfuse) = which("nbdfuse") else {
        println!("SKIP: nbdfuse not installed (tests/nbd/install-deps.sh)");
        return;
    };
    if !Path::new("/dev/fuse").exists() {
        println!("SKIP: /dev/fuse not available");
        return;
    }
    let t = TempDir::new("rk-nbdfuse").unwrap();
    let d = t.path();
    rk(
        d,
        &words(
            "create --level 10 --layout f2 --raid-devices 4 --chunk 64 \
            --size 16M a b c d",
        ),
    );
    let data: Vec<u8> = (0..(48u32 << 16))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(d.join("data"), &data).unwrap();
    {
        let (_srv, sock) = serve(d, &["a", "b", "c", "d"]);
        let mnt = d.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let child = Command::new(&nbdfuse)
            .arg(mnt.join("disk"))
            .arg("--unix")
            .arg(&sock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let _fuse = Stopping(child);
        wait_path(&mnt.join("disk"), 20);
        let st = Command::new("dd")
            .args([
                "if=data",
                "of=mnt/disk",
                "bs=64k",
                "seek=5",
                "conv=notrunc,fsync",
                "status=none",
            ])
            .current_dir(d)
            .status()
            .unwrap();
        assert!(st.success());
        let back = std::fs::read(mnt.join("disk")).unwrap();
        // RAID10 f2 over 4 × 16 MiB: 15 MiB of data space each, 30 MiB array.
        assert_eq!(back.len(), 30 << 20, "nbdfuse file has the array's size");
        assert!(
            back[5 * 65536..5 * 65536 + data.len()] == data[..],
            "read back through nbdfuse"
        );
        match which("fusermount3") {
            Some(f) => Command::new(f).arg("-u").arg(&mnt).status(),
            None => Command::new("umount").arg(&mnt).status(),
        }
        .unwrap();
    }
    // After the server's graceful stop, the data is on the members and they are clean.
    let out = Command::new(RAIDKIT)
        .current_dir(d)
        .args(["export", "--output", "-", "b", "d", "a", "c"])
        .output()
        .unwrap();
    assert!(out.stdout[5 * 65536..5 * 65536 + data.len()] == data[..]);
    let ex: serde_json::Value =
        serde_json::from_str(&rk(d, &["examine", "--json", "a", "b", "c", "d"])).unwrap();
    for m in ex.as_array().unwrap() {
        assert_eq!(m["state"], "clean");
    }
}

#[test]
fn kernel_nbd_client() {
    let Some(client) = which("nbd-client") else {
        println!("SKIP: nbd-client not installed");
        return;
    };
    if !Path::new("/dev/nbd0").exists() {
        println!("SKIP: /dev/nbd0 does not exist (no kernel nbd driver here; `modprobe nbd` where available)");
        return;
    }
    let t = TempDir::new("rk-nbdc").unwrap();
    let d = t.path();
    rk(
        d,
        &words("create --level 5 --raid-devices 3 --chunk 64 --size 16M a b c"),
    );
    let (_srv, sock) = serve(d, &["a", "b", "c"]);
    let st = Command::new(&client)
        .args(["-unix"])
        .arg(&sock)
        .args(["-N", "x", "/dev/nbd0"])
        .status()
        .unwrap();
    assert!(st.success(), "nbd-client connect");
    let data = vec![0x5au8; 1 << 20];
    std::fs::write(d.join("data"), &data).unwrap();
    let ok = Command::new("dd")
        .args([
            "if=data",
            "of=/dev/nbd0",
            "bs=1M",
            "oflag=direct",
            "status=none",
        ])
        .current_dir(d)
        .status()
        .unwrap();
    let mut back = vec![0u8; 1 << 20];
    let rd = std::fs::File::open("/dev/nbd0").and_then(|f| {
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut back, 0)
    });
    let _ = Command::new(&client).args(["-d", "/dev/nbd0"]).status();
    assert!(ok.success() && rd.is_ok());
    assert!(back == data);
}
