//! Locate and run the mdref harness: the real Linux md driver and mdadm in a qemu VM.
//!
//! mdref lives beside the repository at `<repo root>/../shared/mdref/mdref-run`; the
//! environment variable `RAIDKIT_MDREF` overrides that path. When mdref or its
//! dependencies are missing, [`locate`] returns the reason and [`locate_or_skip`] prints
//! `skip: mdref not available (reason)` so a test can return early.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Environment variable that overrides the path of `mdref-run`.
pub const ENV_OVERRIDE: &str = "RAIDKIT_MDREF";

/// A usable mdref harness.
#[derive(Debug, Clone)]
pub struct Mdref {
    path: PathBuf,
}

pub use crate::proc::which;

/// The path where mdref-run is expected (override or default), whether or not it exists.
pub fn default_path() -> PathBuf {
    match std::env::var_os(ENV_OVERRIDE) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => crate::repo_root()
            .join("..")
            .join("shared")
            .join("mdref")
            .join("mdref-run"),
    }
}

/// Find a usable mdref-run, or say why there is none.
pub fn locate() -> Result<Mdref, String> {
    let path = default_path();
    if !path.is_file() {
        return Err(format!(
            "{} not found; set {ENV_OVERRIDE} to the path of mdref-run",
            path.display()
        ));
    }
    for tool in ["qemu-system-x86_64", "mdadm"] {
        if which(tool).is_none() && !Path::new("/sbin").join(tool).is_file() {
            return Err(format!("{tool} is not installed (run mdref-run --setup)"));
        }
    }
    Ok(Mdref { path })
}

/// [`locate`], printing `skip: mdref not available (reason)` on failure.
pub fn locate_or_skip() -> Option<Mdref> {
    match locate() {
        Ok(m) => Some(m),
        Err(reason) => {
            println!("skip: mdref not available ({reason})");
            None
        }
    }
}

/// One VM run: disks, options and a guest shell script.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Images attached read-write in order (`/dev/vda`, `/dev/vdb`, ...).
    pub disks: Vec<PathBuf>,
    /// Guest writes go to a throwaway overlay (`--snapshot`).
    pub snapshot: bool,
    /// Host files copied into the guest's `/root` (`-f`).
    pub files: Vec<PathBuf>,
    /// Variables exported to the script (`-e NAME=VALUE`).
    pub env: Vec<(String, String)>,
    /// VM timeout in seconds (`-t`); 0 = mdref's default.
    pub timeout_secs: u32,
    /// Guest clock start (`--date`).
    pub date: Option<String>,
    /// Host directory mounted at `/share` in the guest (`-s`).
    pub share: Option<PathBuf>,
    /// Keep the guest console log here (`-l`).
    pub log: Option<PathBuf>,
    /// The guest script (fed on stdin; `#!` line optional, default `/bin/sh`).
    pub script: String,
}

/// What a run returned.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit status: the script's (0–255), 124 = VM timeout, 125 = harness failure;
    /// -1 if mdref-run was killed by a signal.
    pub status: i32,
    /// The script's stdout.
    pub stdout: String,
    /// The script's stderr followed by mdref-run's own errors.
    pub stderr: String,
}

impl Mdref {
    /// Path of `mdref-run`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The command-line arguments mdref-run gets for `run` (script on stdin).
    pub fn args(run: &Run) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["-q".into()];
        if run.snapshot {
            a.push("--snapshot".into());
        }
        if run.timeout_secs > 0 {
            a.push("-t".into());
            a.push(run.timeout_secs.to_string().into());
        }
        if let Some(d) = &run.date {
            a.push("--date".into());
            a.push(d.into());
        }
        if let Some(s) = &run.share {
            a.push("-s".into());
            a.push(s.into());
        }
        if let Some(l) = &run.log {
            a.push("-l".into());
            a.push(l.into());
        }
        for f in &run.files {
            a.push("-f".into());
            a.push(f.into());
        }
        for (k, v) in &run.env {
            a.push("-e".into());
            a.push(format!("{k}={v}").into());
        }
        for d in &run.disks {
            a.push("-d".into());
            a.push(d.into());
        }
        a.push("-".into());
        a
    }

    /// Boot the VM, run the script, return its output and status.
    pub fn run(&self, run: &Run) -> io::Result<Output> {
        let mut child = Command::new(&self.path)
            .args(Self::args(run))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        {
            let mut stdin = child.stdin.take().expect("piped stdin");
            stdin.write_all(run.script.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        Ok(Output {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// Path of the `rk-pattern` binary next to the running test executable's target dir,
/// if it has been built (`target/<profile>/rk-pattern`). Tests of other crates can
/// build it with `cargo build -p raidkit-testkit --bin rk-pattern` first.
pub fn find_rk_pattern() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RK_PATTERN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/test-xxxx -> target/<profile>/rk-pattern
    for dir in exe.ancestors().skip(1).take(3) {
        let p = dir.join("rk-pattern");
        if p.is_file() {
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_in_mdref_order() {
        let run = Run {
            disks: vec!["a.img".into(), "b.img".into()],
            snapshot: true,
            files: vec!["rk-pattern".into()],
            env: vec![("SEED".into(), "7".into())],
            timeout_secs: 60,
            date: Some("2024-01-01T00:00:00".into()),
            ..Run::default()
        };
        let args: Vec<String> = Mdref::args(&run)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "-q",
                "--snapshot",
                "-t",
                "60",
                "--date",
                "2024-01-01T00:00:00",
                "-f",
                "rk-pattern",
                "-e",
                "SEED=7",
                "-d",
                "a.img",
                "-d",
                "b.img",
                "-"
            ]
        );
    }
}
