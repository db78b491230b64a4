//! The reshape CLI contract (issue 15), online: `grow NAME ...` on a served array (speed
//! limit, pause, resume, revert; the export and a mounted file grow for new users), and the
//! reshape events and status on the way.

mod reshape_common;

use raidkit_testkit::proc::{self, wait_for};
use raidkit_testkit::tempdir::TempDir;
use reshape_common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// `grow NAME --add ... --raid-devices` on a served array: new NBD connections see the
/// grown size once the reshape finishes; the data is all there after.
#[test]
fn online_grow_export_grows() {
    use raidkit_nbd::client::{Client, ClientOptions};
    let t = TempDir::new("rk-reshape-nbd").unwrap();
    let d = t.path();
    std::fs::create_dir(run_dir(d)).unwrap();
    let data = array(d, "5", &["a0", "a1", "a2"], 8 << 20);
    files(d, &["a3"], 16 << 20);
    let serve = serve_logged(d, &["a0", "a1", "a2"]);
    let uri = format!("nbd+unix:///vol?socket={}", d.join("s.sock").display());
    let size = || Client::connect(&uri, &ClientOptions::default()).map(|c| c.info().size);
    wait_for("the NBD socket", 30, || size().is_ok());
    let before = size().unwrap();
    let status = || -> Value {
        let o = proc::bin_in(RAIDKIT, d, Some(&run_dir(d)), &["status", "--json"]);
        serde_json::from_slice::<Value>(&o.stdout)
            .map(|v| v[0].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(status()["array_bytes"], before);
    let e = ok_err(d, &["grow", "vol", "--add", "a3", "--raid-devices", "4"]);
    assert_eq!(
        e,
        "raidkit: vol: reshape started in the background (progress in `raidkit status`)\n"
    );
    wait_for("the reshape to finish", 120, || {
        let s = status();
        s["reshape"].is_null() && s["last_result"]["end"] == "finished"
    });
    let after = size().unwrap();
    assert_eq!(after, before / 2 * 3, "3 data members instead of 2");
    // Its own events: started 3 -> 4, finished with every byte of the new size moved.
    let started = events(d, "reshape_started");
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["action"], "reshape");
    assert_eq!(started[0]["from"]["raid_disks"], 3);
    assert_eq!(started[0]["to"]["raid_disks"], 4);
    let fin = events(d, "reshape_finished");
    assert_eq!(fin.len(), 1, "{fin:?}");
    assert_eq!(fin[0]["end"], "finished", "{fin:?}");
    assert_eq!(fin[0]["from"]["array_sectors"], before / 512, "{fin:?}");
    assert_eq!(fin[0]["to"]["array_sectors"], after / 512, "{fin:?}");
    assert_eq!(fin[0]["bytes_moved"], after, "{fin:?}");
    assert_eq!(fin[0]["array_bytes"], after, "{fin:?}");
    assert!(events(d, "rebuild_finished").is_empty());
    assert_eq!(status()["array_bytes"], after);
    assert_eq!(status()["raid_disks"], 4);
    let st = serve.stop();
    assert!(st.is_some_and(|s| s.success()), "serve: {st:?}");
    let out = exported(d, &["a0", "a1", "a2", "a3"]);
    assert_eq!(out.len() as u64, after);
    assert!(out[..data.len()] == data[..]);
}

/// `grow NAME --revert` half-way: `status` counts the way back from where the reshape was
/// turned (not from the far end of the array), on the reshape line and the job line alike,
/// with the speed of this job (within the speed limit) and an ETA that follows from it.
/// The reshape jobs say what they did in their own events: `reshape_started`,
/// `reshape_finished` (the forward job, stopped by the revert) and `reshape_reverted`, with
/// the shapes before and after and the bytes moved.
#[test]
fn online_revert_counts_back_and_reshape_events() {
    let t = TempDir::new("rk-reshape-rev").unwrap();
    let d = t.path();
    let (data, serve) = served_slowly(d);
    let before = status_of(d)["array_bytes"].clone();
    let limit: u64 = 2 << 20;
    ok_err(d, &["grow", "vol", "--add", "a3", "--raid-devices", "4"]);
    // Let it move 6 MiB or more (of 48), then turn it back.
    wait_for("the reshape to move 6 MiB", 60, || {
        status_of(d)["reshape"]["progress_sectors"]
            .as_u64()
            .is_some_and(|p| p >= 12288)
    });
    ok_err(d, &["grow", "vol", "--revert"]);
    let s = status_of(d);
    let r = &s["reshape"];
    assert_eq!(r["direction"], "backwards", "{s}");
    let (start, total, done, p) = (
        r["start_sectors"].as_u64().unwrap(),
        r["total_sectors"].as_u64().unwrap(),
        r["done_sectors"].as_u64().unwrap(),
        r["progress_sectors"].as_u64().unwrap(),
    );
    // The way back is from the turn to 0: as long as the way there was.
    assert_eq!(r["end_sectors"], 0, "{s}");
    assert_eq!(total, start, "{s}");
    assert!(
        (12288..=32768).contains(&start),
        "turned at {start} sectors of 65536: {s}"
    );
    assert_eq!(done + p, total, "{s}");
    // The job line: the same span, this job's own speed (once it has moved 3 MiB: the
    // limiter lets half a second's worth go at once), an ETA from it.
    wait_for("the revert job to move 3 MiB", 30, || {
        let s = status_of(d);
        s["reshape"].is_null() || s["sync"]["done_sectors"].as_u64().unwrap_or(0) >= 6144
    });
    let s = status_of(d);
    if !s["reshape"].is_null() {
        let j = &s["sync"];
        assert_eq!(j["total_sectors"], total, "{s}");
        let jd = j["done_sectors"].as_u64().unwrap();
        assert!(jd <= total, "{s}");
        let speed = j["speed_bytes_per_sec"].as_u64().unwrap();
        assert!(
            speed <= 2 * limit,
            "speed {speed} over twice the limit: {s}"
        );
        let eta = j["eta_seconds"].as_u64().unwrap();
        assert_eq!(eta, (total - jd) * 512 / speed, "{s}");
    }
    wait_for("the revert to finish", 120, || {
        let s = status_of(d);
        s["reshape"].is_null() && s["last_result"]["action"] == "reshape-revert"
    });
    assert_eq!(status_of(d)["raid_disks"], 3);
    // The events.
    let started = events(d, "reshape_started");
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(started[0]["action"], "reshape");
    assert_eq!(
        (
            started[0]["from"]["raid_disks"].clone(),
            started[0]["to"]["raid_disks"].clone()
        ),
        (3.into(), 4.into())
    );
    assert_eq!(started[1]["action"], "reshape-revert");
    assert_eq!(
        (
            started[1]["from"]["raid_disks"].clone(),
            started[1]["to"]["raid_disks"].clone()
        ),
        (4.into(), 3.into())
    );
    let fin = events(d, "reshape_finished");
    assert_eq!(fin.len(), 1, "{fin:?}");
    assert_eq!(
        (fin[0]["action"].clone(), fin[0]["end"].clone()),
        ("reshape".into(), "stopped".into())
    );
    let fwd = fin[0]["bytes_moved"].as_u64().unwrap();
    assert!(fwd >= 12288 * 512, "{fin:?}");
    let rev = events(d, "reshape_reverted");
    assert_eq!(rev.len(), 1, "{rev:?}");
    assert_eq!(rev[0]["end"], "finished", "{rev:?}");
    assert_eq!(rev[0]["to"]["raid_disks"], 3, "{rev:?}");
    assert_eq!(rev[0]["bytes_moved"], total * 512, "{rev:?}");
    assert_eq!(rev[0]["array_bytes"], before, "{rev:?}");
    assert!(
        events(d, "rebuild_finished").is_empty(),
        "a reshape reported as a rebuild"
    );
    let st = serve.stop();
    assert!(st.is_some_and(|s| s.success()), "serve: {st:?}");
    let out = exported(d, &["a0", "a1", "a2"]);
    assert!(out[..data.len()] == data[..], "data after the revert");
}

/// `grow NAME --revert` of a RAID5→6 conversion (it builds the new Q member as it goes):
/// refused, saying why, and the reshape goes on as if not asked; it finishes as RAID6.
#[test]
fn online_raid5_to_6_is_not_turned_back_and_goes_on() {
    let t = TempDir::new("rk-reshape-r6rev").unwrap();
    let d = t.path();
    let (data, serve) = served_slowly(d);
    ok_err(d, &["grow", "vol", "--add", "a3", "--level", "6"]);
    wait_for("the restripe to move 1 MiB", 60, || {
        status_of(d)["reshape"]["progress_sectors"]
            .as_u64()
            .is_some_and(|p| p >= 2048)
    });
    let e = err(d, &["grow", "vol", "--revert"]);
    assert!(e.contains("this reshape builds the member in role 3 (it holds nothing where the reshape has not been yet): it cannot be turned back; let it finish, then reshape back"), "{e}");
    let s = status_of(d);
    assert_eq!(s["reshape"]["direction"], "forwards", "{s}");
    assert_eq!(
        s["sync"]["action"], "reshape",
        "the reshape was left stopped: {s}"
    );
    ok_err(d, &["grow", "vol", "--speed-limit", "0"]);
    wait_for("the reshape to finish", 120, || {
        let s = status_of(d);
        s["reshape"].is_null() && s["last_result"]["end"] == "finished"
    });
    let s = status_of(d);
    assert_eq!(
        (s["level"].clone(), s["raid_disks"].clone()),
        ("raid6".into(), 4.into()),
        "{s}"
    );
    let st = serve.stop();
    assert!(st.is_some_and(|s| s.success()), "serve: {st:?}");
    let out = exported(d, &["a0", "a1", "a2", "a3"]);
    assert!(
        out[..data.len()] == data[..],
        "data after the refused revert"
    );
}

/// `grow NAME --add ... --raid-devices` on an array served by `raidkit mount`: the file
/// grows with the array once the reshape finishes (it kept the size it had when mounted,
/// so the space added could not be written: ENOSPC), and what is written past the old
/// end is on the members.
#[test]
fn online_grow_mounted_file_grows() {
    use std::os::unix::fs::FileExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    if !Path::new("/dev/fuse").exists() || !root {
        println!("skip: needs /dev/fuse and root");
        return;
    }
    let t = TempDir::new("rk-reshape-fuse").unwrap();
    let d = t.path();
    std::fs::create_dir(run_dir(d)).unwrap();
    std::fs::create_dir(d.join("mnt")).unwrap();
    let data = array(d, "5", &["a0", "a1", "a2"], 8 << 20);
    files(d, &["a3"], 16 << 20);
    let mount = proc::Stopping(
        Command::new(RAIDKIT)
            .current_dir(d)
            .env("RAIDKIT_RUN_DIR", run_dir(d))
            .args(["mount", "a0", "a1", "a2", "mnt"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let file = d.join("mnt/rs");
    wait_for("the mounted file and its control socket", 30, || {
        file.exists() && !status_of(d).is_null()
    });
    let before = std::fs::metadata(&file).unwrap().len();
    ok_err(d, &["grow", "rs", "--add", "a3", "--raid-devices", "4"]);
    wait_for("the reshape to finish", 120, || {
        let s = status_of(d);
        s["reshape"].is_null() && s["last_result"]["end"] == "finished"
    });
    let after = status_of(d)["array_bytes"].as_u64().unwrap();
    assert_eq!(after, before / 2 * 3, "3 data members instead of 2");
    // The kernel asks for the size again once its cached attributes expire (1 s).
    wait_for("the file to grow", 10, || {
        std::fs::metadata(&file).unwrap().len() == after
    });
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    f.write_all_at(b"past the old end", before + 4096).unwrap();
    drop(f);
    let st = mount.stop();
    assert!(st.is_some_and(|s| s.success()), "mount: {st:?}");
    let out = exported(d, &["a0", "a1", "a2", "a3"]);
    assert_eq!(out.len() as u64, after);
    assert!(out[..data.len()] == data[..]);
    let at = (before + 4096) as usize;
    assert_eq!(&out[at..at + 16], b"past the old end");
}
