//! Process helpers shared by the integration tests: finding system tools, running
//! commands with a deadline, waiting for a condition, and child processes that are
//! stopped (SIGTERM, then SIGKILL) when a test ends or fails half-way.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Directories searched for distribution tools before `$PATH` (a developer's `$PATH` may
/// put another Python or another build of a tool first; the tests want Debian's).
const SYSTEM_DIRS: [&str; 4] = ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin"];

/// Find `name` in `$PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Find a distribution tool (system directories first, then `$PATH`); when it is missing
/// print `SKIP <test>: <name> not installed` with the install hint and return None.
pub fn system_tool(name: &str, test: &str) -> Option<PathBuf> {
    let found = SYSTEM_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .or_else(|| which(name));
    if found.is_none() {
        eprintln!("SKIP {test}: {name} not installed (run tests/nbd/install-deps.sh)");
    }
    found
}

/// Run a distribution tool with the system directories first on `$PATH` (nbdsh needs the
/// distribution's python3). On failure the command, status and both outputs are printed,
/// so the caller's assertion has the story in the test log.
pub fn run_system(prog: &Path, args: &[&str]) -> Output {
    let path = format!(
        "{}:{}",
        SYSTEM_DIRS.join(":"),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(prog)
        .args(args)
        .env("PATH", path)
        .env("LIBNBD_DEBUG", "0")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", prog.display()));
    if !out.status.success() {
        eprintln!(
            "{} {:?} failed: {}\nstdout: {}\nstderr: {}",
            prog.display(),
            args,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// [`run_system`] that must succeed; returns stdout.
pub fn run_system_ok(prog: &Path, args: &[&str]) -> String {
    let out = run_system(prog, args);
    assert!(
        out.status.success(),
        "{} {args:?} failed ({})",
        prog.display(),
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Make a self-signed certificate for `localhost` (good as its own CA) with `openssl`: the
/// certificate in `cert`, its key in `key`; `extra`: more `openssl req` arguments (a
/// subjectAltName, say). Fails the test if openssl fails.
pub fn self_signed_cert(openssl: &Path, cert: &Path, key: &Path, extra: &[&str]) {
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
    let mut args = words("req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost");
    args.extend_from_slice(extra);
    args.extend(["-keyout", &key, "-out", &cert]);
    run_system_ok(openssl, &args);
}

/// Run a command to completion within `secs`, killing it (and failing the test) on
/// timeout. Stdin is null; stdout and stderr are captured.
pub fn run_timeout(cmd: &mut Command, secs: u64) -> Output {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    let mut out_pipe = child.stdout.take().expect("stdout is piped");
    let mut err_pipe = child.stderr.take().expect("stderr is piped");
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for child") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{desc} timed out after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_t.join().expect("stdout reader"),
        stderr: err_t.join().expect("stderr reader"),
    }
}

/// Run a command and require exit status 0; returns stdout. The failure message has the
/// command, its status and both outputs.
pub fn output_ok(cmd: &mut Command) -> String {
    let desc = format!("{cmd:?}");
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {desc}: {e}"));
    assert!(
        o.status.success(),
        "{desc} failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A command line's arguments, split at white space: `words("create -l 1 -n 2 a b")`
/// (for arguments without spaces; a long line continues with a trailing `\`).
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Run the program `bin` (a test's `CARGO_BIN_EXE_raidkit`) in `dir` with `args`; with
/// `run_dir`, `RAIDKIT_RUN_DIR` points there (where serving processes put their control
/// sockets).
pub fn bin_in(bin: &str, dir: &Path, run_dir: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(bin);
    c.current_dir(dir).args(args);
    if let Some(r) = run_dir {
        c.env("RAIDKIT_RUN_DIR", r);
    }
    c.output()
        .unwrap_or_else(|e| panic!("cannot run {bin} {args:?}: {e}"))
}

/// Run the program `bin` with `args` in the current directory: whether it succeeded, its
/// stdout and its stderr.
pub fn bin_here(bin: &str, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin} {args:?}: {e}"));
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// [`bin_in`] that must succeed; returns stdout (the failure message has stderr).
pub fn bin_ok(bin: &str, dir: &Path, run_dir: Option<&Path>, args: &[&str]) -> String {
    let o = bin_in(bin, dir, run_dir, args);
    assert!(
        o.status.success(),
        "raidkit {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// [`bin_in`] that must fail; returns stderr.
pub fn bin_err(bin: &str, dir: &Path, run_dir: Option<&Path>, args: &[&str]) -> String {
    let o = bin_in(bin, dir, run_dir, args);
    assert!(
        !o.status.success(),
        "raidkit {args:?} unexpectedly succeeded"
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Poll `f` every 50 ms until it returns true; fail the test after `secs` seconds naming
/// `what` was awaited.
pub fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait until `p` exists (a socket, a mount's file), at most `secs` seconds.
pub fn wait_path(p: &Path, secs: u64) {
    wait_for(&format!("{} to appear", p.display()), secs, || p.exists());
}

/// Send SIGTERM to a child (a graceful stop request).
pub fn terminate(c: &Child) {
    // `kill` from procps rather than libc: the testkit has no libc dependency, and the
    // one process spawn per stop is irrelevant next to the server's own shutdown.
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A child process stopped when dropped: SIGTERM, up to 10 s for a graceful exit (the
/// server drains and marks the array clean), then SIGKILL.
pub struct Stopping(pub Child);

impl Stopping {
    /// Stop now (as on drop) and return the exit status, if the child could be reaped.
    pub fn stop(mut self) -> Option<std::process::ExitStatus> {
        stop_child(&mut self.0)
    }
}

impl Drop for Stopping {
    fn drop(&mut self) {
        let _ = stop_child(&mut self.0);
    }
}

fn stop_child(c: &mut Child) -> Option<std::process::ExitStatus> {
    if let Ok(Some(st)) = c.try_wait() {
        return Some(st);
    }
    terminate(c);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(st)) = c.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    c.wait().ok()
}

/// A child process killed (SIGKILL) when dropped: for tests that crash it on purpose or
/// only need it gone.
pub struct Killing(pub Child);

impl Drop for Killing {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A long-running child (a `raidkit serve` or `mount`) whose stdout lines are collected and
/// whose stderr is kept for the failure message. Killed on drop unless stopped.
pub struct Daemon {
    child: Option<Child>,
    lines: std::sync::mpsc::Receiver<String>,
    /// Stdout lines received so far (see [`Daemon::wait_line`]).
    pub stdout: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Daemon {
    /// Spawn `cmd` with piped stdout/stderr and wait (at most `secs`) for a stdout line
    /// for which `ready` is true. Fails the test with the output seen so far otherwise.
    pub fn spawn(cmd: &mut Command, ready: impl Fn(&str) -> bool, secs: u64) -> Daemon {
        use std::io::{BufRead, BufReader};
        let desc = format!("{cmd:?}");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
        let (tx, rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().expect("stdout is piped");
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let err = child.stderr.take().expect("stderr is piped");
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                s.push_str(&l);
                s.push('\n');
            }
            s
        });
        let mut d = Daemon {
            child: Some(child),
            lines: rx,
            stdout: Vec::new(),
            stderr: Some(stderr),
        };
        if !d.wait_line(&ready, secs) {
            let (code, err) = d.stop("KILL");
            panic!(
                "{desc} did not get ready in {secs} s (exit {code:?}); stdout {:?}; stderr:\n{err}",
                d.stdout
            );
        }
        d
    }

    /// Wait (at most `secs`) until a stdout line satisfies `pred`; true if one did.
    pub fn wait_line(&mut self, pred: impl Fn(&str) -> bool, secs: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if self.stdout.iter().any(|l| pred(l)) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.stdout.push(l),
                Err(_) => return false,
            }
        }
    }

    /// The rest of the first stdout line starting with `prefix` (fails the test if none).
    pub fn line_with(&self, prefix: &str) -> String {
        self.stdout
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in {:?}", self.stdout))
            .to_string()
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Send a signal by name (`TERM`, `INT`, `KILL`, `USR1`...).
    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([&format!("-{sig}"), &c.id().to_string()])
                .status();
        }
    }

    /// Send `sig` and wait (at most 20 s, then SIGKILL and fail); returns the exit code
    /// (None when killed by a signal) and everything the child wrote to stderr.
    pub fn stop(&mut self, sig: &str) -> (Option<i32>, String) {
        let Some(mut c) = self.child.take() else {
            return (None, String::new());
        };
        self.signal_child(&c, sig);
        let deadline = Instant::now() + Duration::from_secs(20);
        let st = loop {
            if let Ok(Some(st)) = c.try_wait() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                let err = self.stderr.take().and_then(|h| h.join().ok());
                panic!(
                    "process {} did not stop after SIG{sig}; its stderr:\n{}",
                    c.id(),
                    err.unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        (st.code(), err)
    }

    fn signal_child(&self, c: &Child, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &c.id().to_string()])
            .status();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `n` bytes of a xorshift32 sequence from `seed`: cheap, incompressible-enough test data
/// that differs per seed.
pub fn xorshift_bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_is_deterministic_and_seeded() {
        let a = xorshift_bytes(64, 7);
        assert_eq!(a, xorshift_bytes(64, 7));
        assert_ne!(a, xorshift_bytes(64, 8));
        // First byte of xorshift32 from state 7: 7 ^ 7<<13 = 0xE007; ^ >>17 = 0xE007;
        // ^ <<5 = 0xE007 ^ 0x1C00E0 = 0x1CE0E7 → low byte 0xE7.
        assert_eq!(a[0], 0xE7);
    }

    #[test]
    fn run_timeout_captures_and_wait_for_times_out() {
        let o = run_timeout(
            Command::new("sh").args(["-c", "echo out; echo err >&2"]),
            10,
        );
        assert!(o.status.success());
        assert_eq!(o.stdout, b"out\n");
        assert_eq!(o.stderr, b"err\n");
        let r = std::panic::catch_unwind(|| wait_for("nothing", 0, || false));
        assert!(r.is_err());
    }
}
