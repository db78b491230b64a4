//! Shared helpers of the reshape CLI tests (`reshape_cli.rs`, `reshape_online.rs`): the
//! raidkit binary run in a temporary directory with its own run directory, arrays made
//! and filled, exported, examined, served, and their events and status.
//!
//! Every test file that uses this has `mod reshape_common;`; not every file uses every
//! helper.
#![allow(dead_code)]

use raidkit_testkit::proc::{self, wait_for};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

pub fn run_dir(d: &Path) -> std::path::PathBuf {
    d.join("run")
}

pub fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&run_dir(d)), args)
}

/// stderr of a command that must succeed.
pub fn ok_err(d: &Path, args: &[&str]) -> String {
    let o = proc::bin_in(RAIDKIT, d, Some(&run_dir(d)), args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn err(d: &Path, args: &[&str]) -> String {
    proc::bin_err(RAIDKIT, d, Some(&run_dir(d)), args)
}

pub fn files(d: &Path, names: &[&str], bytes: u64) {
    for n in names {
        std::fs::File::create(d.join(n))
            .unwrap()
            .set_len(bytes)
            .unwrap();
    }
}

/// A RAID `level` over `members` (16 MiB each), 64K chunk, 1.2, filled with `bytes` of
/// data (written to `data.in`).
pub fn array(d: &Path, level: &str, members: &[&str], bytes: usize) -> Vec<u8> {
    files(d, members, 16 << 20);
    let n = members.len().to_string();
    let mut args = vec![
        "create",
        "--level",
        level,
        "--raid-devices",
        &n,
        "--chunk",
        "64",
        "--name",
        "rs",
        "--homehost",
        "none",
    ];
    args.extend_from_slice(members);
    ok(d, &args);
    let data = proc::xorshift_bytes(bytes, 4242);
    std::fs::write(d.join("data.in"), &data).unwrap();
    let mut args = vec!["import", "--input", "data.in"];
    args.extend_from_slice(members);
    ok(d, &args);
    data
}

pub fn exported(d: &Path, members: &[&str]) -> Vec<u8> {
    let mut args = vec!["export", "--output", "out.img"];
    args.extend_from_slice(members);
    ok(d, &args);
    std::fs::read(d.join("out.img")).unwrap()
}

pub fn examine_json(d: &Path, member: &str) -> Value {
    serde_json::from_str::<Value>(&ok(d, &["examine", "--json", member])).unwrap()[0].clone()
}

pub fn position(d: &Path, member: &str) -> Option<u64> {
    let o = proc::bin_in(RAIDKIT, d, None, &["examine", "--json", member]);
    let v: Value = serde_json::from_slice(&o.stdout).ok()?;
    v[0]["reshape"]["position_sectors"].as_u64()
}

pub fn spawn(d: &Path, args: &[&str]) -> Child {
    Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", run_dir(d))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The event lines of `kind` that `serve` logged to `serve.log` (their JSON detail).
pub fn events(d: &Path, kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(d.join("serve.log")).unwrap_or_default();
    let tag = format!("]: {kind} ");
    text.lines()
        .filter_map(|l| l.split_once(&tag).map(|(_, j)| j))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

/// `raidkit serve` of `members` as `vol`, stderr (its event lines) to `serve.log`.
pub fn serve_logged(d: &Path, members: &[&str]) -> proc::Stopping {
    let log = std::fs::File::create(d.join("serve.log")).unwrap();
    proc::Stopping(
        Command::new(RAIDKIT)
            .current_dir(d)
            .env("RAIDKIT_RUN_DIR", run_dir(d))
            .args(["serve", "--socket", "s.sock", "--export", "vol"])
            .args(members)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

pub fn status_of(d: &Path) -> Value {
    let o = proc::bin_in(RAIDKIT, d, Some(&run_dir(d)), &["status", "--json"]);
    serde_json::from_slice::<Value>(&o.stdout)
        .map(|v| v[0].clone())
        .unwrap_or(Value::Null)
}

/// A RAID5 of a0..a2 (8 MiB of data written: returned) served, with a blank a3 beside it
/// to add, and the reshape speed limited to 2 MiB/s so a test can act half-way.
pub fn served_slowly(d: &Path) -> (Vec<u8>, proc::Stopping) {
    std::fs::create_dir(run_dir(d)).unwrap();
    let data = array(d, "5", &["a0", "a1", "a2"], 8 << 20);
    files(d, &["a3"], 16 << 20);
    let serve = serve_logged(d, &["a0", "a1", "a2"]);
    wait_for("the control socket", 30, || !status_of(d).is_null());
    ok_err(d, &["grow", "vol", "--speed-limit", "2M"]);
    (data, serve)
}
