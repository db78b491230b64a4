//! Shared helpers of the network-member tests (issue #16): real NBD servers as remote
//! members (nbdkit, qemu-nbd, nbd-server, another `raidkit serve`), started, killed,
//! black-holed (SIGSTOP) and restarted on the same Unix socket; the local array served by
//! `raidkit serve` and written through raidkit's own NBD client; its events and status.
//!
//! Every test file that uses this has `mod netmem;`; not every file uses every helper.
#![allow(dead_code)]

use raidkit_nbd::client::{Client, ClientOptions};
use raidkit_testkit::proc;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");
pub const MIB: u64 = 1 << 20;
/// Member files: 32 MiB; data offset 1 MiB (1.2 superblock, 1 MiB bitmap chunks).
pub const MEMBER_BYTES: u64 = 32 * MIB;
pub const DATA_OFFSET: u64 = MIB;
/// The member deadline the local server runs with.
pub const TIMEOUT_SECS: u64 = 2;
/// How long a write may take with a remote gone: one member deadline, plus scheduling
/// slack on a loaded machine.
pub const WRITE_BOUND: Duration = Duration::from_secs(TIMEOUT_SECS + 3);

pub fn rk(d: &Path, args: &[&str]) -> Output {
    proc::bin_in(RAIDKIT, d, Some(&d.join("run")), args)
}

pub fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&d.join("run")), args)
}

pub fn status(d: &Path) -> Option<Value> {
    let o = rk(d, &["status", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).ok()?;
    v.as_array()?.first().cloned()
}

/// The member in role `role` from `status --json`.
pub fn member(d: &Path, role: u64) -> Value {
    let st = status(d).expect("status");
    st["members"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["role"] == role).cloned())
        .unwrap_or_else(|| panic!("no role {role} in {st}"))
}

/// Send `sig` (a name: STOP, CONT, KILL, TERM, INT, HUP) to `target` (a pid, or `-PGID` for
/// a process group) with kill(2) itself: no `kill` process to fork on a loaded machine, and
/// a failure other than "no such process" fails the test. After STOP to one process, wait
/// until it is stopped: kill(2) returns before the signal has been acted on.
fn kill(sig: &str, target: &str) {
    let signo = match sig {
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        "KILL" => libc::SIGKILL,
        "TERM" => libc::SIGTERM,
        "INT" => libc::SIGINT,
        "HUP" => libc::SIGHUP,
        other => panic!("signal {other} not known to the test"),
    };
    let pid: libc::pid_t = target.parse().expect("pid");
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, signo) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::ESRCH),
            "kill -{sig} {target}: {e}"
        );
        return;
    }
    if signo == libc::SIGSTOP && pid > 0 {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !proc_stopped(pid) {
            assert!(
                Instant::now() < deadline,
                "{target} did not stop within 10 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// True if every thread of process `pid` is stopped (state T), or it is gone.
fn proc_stopped(pid: libc::pid_t) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        matches!(state, None | Some("T") | Some("t") | Some("Z") | Some("X"))
    })
}

/// A process killed (and reaped) when dropped.
pub struct Killing(pub Option<Child>);

impl Killing {
    pub fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }
    pub fn signal(&self, sig: &str) {
        kill(sig, &self.pid().to_string());
    }
    /// Send `sig` and wait for the exit (at most `secs`); the time it took.
    pub fn stop(&mut self, sig: &str, secs: u64) -> Duration {
        let t0 = Instant::now();
        self.signal(sig);
        let mut c = self.0.take().expect("running");
        loop {
            if let Ok(Some(_)) = c.try_wait() {
                return t0.elapsed();
            }
            if t0.elapsed() > Duration::from_secs(secs) {
                let _ = c.kill();
                let _ = c.wait();
                panic!("pid {} did not exit within {secs} s of SIG{sig}", c.id());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Killing {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            kill("CONT", &c.id().to_string());
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A real NBD server that can be a remote member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// nbdkit's file plugin behind its log filter (writes, flushes, trims are logged).
    Nbdkit,
    /// qemu-nbd of a raw file, persistent, several connections.
    QemuNbd,
    /// nbd-server with a config file in the test directory (it daemonizes: its process
    /// group is signalled).
    NbdServer,
    /// `raidkit serve` of a one-member RAID1 on the remote's own file.
    Raidkit,
}

impl Program {
    /// The program, or None (printing why the test skips) when it is not installed.
    pub fn available(self, test: &str) -> Option<PathBuf> {
        match self {
            Program::Nbdkit => proc::system_tool("nbdkit", test),
            Program::QemuNbd => proc::system_tool("qemu-nbd", test),
            Program::NbdServer => proc::system_tool("nbd-server", test),
            Program::Raidkit => Some(PathBuf::from(RAIDKIT)),
        }
    }
}

/// TLS a remote requires.
#[derive(Clone, Debug)]
pub enum RemoteTls {
    /// `username:hexkey` file.
    Psk(PathBuf),
    /// A directory with `ca-cert.pem`, `server-cert.pem`, `server-key.pem` (nbdkit's
    /// layout; raidkit serve gets the cert and key files).
    X509(PathBuf),
}

/// A remote member: a server of the file `backing` on the Unix socket `sock`.
pub struct Remote {
    pub server: Program,
    prog: PathBuf,
    dir: PathBuf,
    pub name: String,
    /// The file holding the remote's bytes (for `Raidkit`, its array's member file).
    pub backing: PathBuf,
    pub sock: PathBuf,
    /// Listen on this TCP port of 127.0.0.1 instead of the socket.
    pub tcp: Option<u16>,
    pub tls: Option<RemoteTls>,
    proc: Option<Killing>,
    /// nbd-server's process group (it daemonizes).
    group: Option<u32>,
    /// Starts so far (the log of start N is `NAME.N.log`, nbdkit only).
    pub starts: u32,
}

impl Remote {
    /// A remote named `name` in `dir` serving a new sparse file of `bytes` (not started).
    pub fn new(server: Program, prog: PathBuf, dir: &Path, name: &str, bytes: u64) -> Remote {
        let backing = dir.join(format!("{name}.img"));
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        let r = Remote {
            server,
            prog,
            dir: dir.to_path_buf(),
            name: name.to_string(),
            backing,
            sock: dir.join(format!("{name}.sock")),
            tcp: None,
            tls: None,
            proc: None,
            group: None,
            starts: 0,
        };
        if server == Program::Raidkit {
            // The remote's array: a one-member RAID1 on a file 1 MiB larger (its data
            // offset), so the export is as large as a plain file's.
            std::fs::File::create(&r.backing)
                .unwrap()
                .set_len(bytes + MIB)
                .unwrap();
            let dir = r.run_dir();
            std::fs::create_dir_all(&dir).unwrap();
            let img = r.backing.display().to_string();
            proc::bin_ok(
                RAIDKIT,
                &r.dir,
                Some(&dir),
                &[
                    "create",
                    "--level",
                    "1",
                    "--raid-devices",
                    "1",
                    "--name",
                    name,
                    "--homehost",
                    "none",
                    "--force",
                    &img,
                ],
            );
        }
        r
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.join(format!("{}-run", self.name))
    }

    /// The export name in the URI.
    fn export(&self) -> &str {
        match self.server {
            Program::Nbdkit => "",
            _ => &self.name,
        }
    }

    /// The member's URI (credentials not included).
    pub fn uri(&self) -> String {
        let s = if self.tls.is_some() { "s" } else { "" };
        match self.tcp {
            Some(port) => format!("nbd{s}://127.0.0.1:{port}/{}", self.export()),
            None => format!(
                "nbd{s}+unix:///{}?socket={}",
                self.export(),
                self.sock.display()
            ),
        }
    }

    /// The log of the `n`th start (nbdkit's log filter).
    pub fn log(&self, n: u32) -> PathBuf {
        self.dir.join(format!("{}.{n}.log", self.name))
    }

    /// Start (again) on the same socket; returns once it accepts connections.
    pub fn start(&mut self) {
        assert!(
            self.proc.is_none() && self.group.is_none(),
            "already running"
        );
        let _ = std::fs::remove_file(&self.sock);
        self.starts += 1;
        let mut c = Command::new(&self.prog);
        c.current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match self.server {
            Program::Nbdkit => {
                match self.tcp {
                    Some(port) => c.args(["-f", "-i", "127.0.0.1", "-p", &port.to_string()]),
                    None => c.args(["-f", "-U"]).arg(&self.sock),
                };
                match &self.tls {
                    Some(RemoteTls::Psk(f)) => {
                        c.arg("--tls=require")
                            .arg(format!("--tls-psk={}", f.display()));
                    }
                    Some(RemoteTls::X509(d)) => {
                        c.arg("--tls=require")
                            .arg(format!("--tls-certificates={}", d.display()));
                    }
                    None => {}
                }
                c.args(["--filter=log", "file"])
                    .arg(&self.backing)
                    .arg(format!("logfile={}", self.log(self.starts).display()));
            }
            Program::QemuNbd => {
                c.args(["-f", "raw", "-t", "-e", "8", "--discard=unmap", "-x"])
                    .arg(&self.name)
                    .arg("-k")
                    .arg(&self.sock)
                    .arg(&self.backing);
            }
            Program::NbdServer => {
                let conf = self.dir.join(format!("{}.conf", self.name));
                std::fs::write(
                    &conf,
                    format!(
                        "[generic]\nunixsock = {}\n[{}]\nexportname = {}\nflush = true\nfua = true\ntrim = true\n",
                        self.sock.display(),
                        self.name,
                        self.backing.display()
                    ),
                )
                .unwrap();
                let pid_file = self.dir.join(format!("{}.pid", self.name));
                let _ = std::fs::remove_file(&pid_file);
                let st = c.arg("-C").arg(&conf).arg("-p").arg(&pid_file).status();
                assert!(st.is_ok_and(|s| s.success()), "nbd-server did not start");
                proc::wait_for("nbd-server's pid file", 20, || {
                    std::fs::read_to_string(&pid_file)
                        .is_ok_and(|t| t.trim().parse::<u32>().is_ok())
                });
                let pid = std::fs::read_to_string(&pid_file).unwrap();
                self.group = pid.trim().parse().ok();
            }
            Program::Raidkit => {
                c.env("RAIDKIT_RUN_DIR", self.run_dir()).arg("serve");
                match self.tcp {
                    Some(port) => c.args(["--listen", &format!("127.0.0.1:{port}")]),
                    None => c.arg("--socket").arg(&self.sock),
                };
                c.args(["--export", &self.name]);
                match &self.tls {
                    Some(RemoteTls::Psk(f)) => {
                        c.arg("--tls-psk").arg(f).arg("--tls-required");
                    }
                    Some(RemoteTls::X509(d)) => {
                        c.arg("--tls-cert")
                            .arg(d.join("server-cert.pem"))
                            .arg("--tls-key")
                            .arg(d.join("server-key.pem"))
                            .arg("--tls-required");
                    }
                    None => {}
                }
                c.arg(&self.backing);
            }
        }
        if self.server != Program::NbdServer {
            self.proc = Some(Killing(Some(c.spawn().expect("start the remote"))));
        }
        // Until it accepts (the socket file exists from bind(), before listen()).
        proc::wait_for(&format!("{}'s socket", self.name), 60, || self.accepts());
    }

    /// Does it accept connections?
    fn accepts(&self) -> bool {
        match self.tcp {
            Some(port) => std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
            None => std::os::unix::net::UnixStream::connect(&self.sock).is_ok(),
        }
    }

    /// Send `sig` to the server (nbd-server: to its whole process group).
    pub fn signal(&self, sig: &str) {
        if let Some(g) = self.group {
            kill(sig, &format!("-{g}"));
        } else if let Some(p) = &self.proc {
            p.signal(sig);
        }
    }

    /// Kill it (SIGKILL): connections drop at once.
    pub fn kill(&mut self) {
        if let Some(g) = self.group.take() {
            kill("KILL", &format!("-{g}"));
            // Gone when the socket refuses (the file stays).
            proc::wait_for("nbd-server to die", 20, || !self.accepts());
        }
        if let Some(mut p) = self.proc.take() {
            p.stop("KILL", 10);
        }
    }

    /// Its whole export, read over NBD (it must be running).
    pub fn read_export(&self, tls: Option<raidkit_nbd::client::ClientTls>) -> Vec<u8> {
        let opts = ClientOptions {
            tls,
            ..ClientOptions::default()
        };
        let c = Client::connect(&self.uri(), &opts).expect("connect to the remote");
        let size = c.info().size;
        let mut out = vec![0u8; size as usize];
        for (i, part) in out.chunks_mut(4 * MIB as usize).enumerate() {
            c.read(i as u64 * 4 * MIB, part, Duration::from_secs(60))
                .expect("read the remote");
        }
        out
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(g) = self.group.take() {
            kill("CONT", &format!("-{g}"));
            kill("KILL", &format!("-{g}"));
        }
    }
}

/// `raidkit create` of `members` (bitmap with 1 MiB chunks, name `net`).
pub fn create(d: &Path, level: &str, members: &[&str], extra: &[&str]) {
    let n = members.len().to_string();
    let mut args = vec![
        "create",
        "--level",
        level,
        "--raid-devices",
        &n,
        "--bitmap",
        "internal",
        "--bitmap-chunk",
        "1M",
        "--name",
        "net",
        "--homehost",
        "none",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(members);
    ok(d, &args);
}

/// Wait until the served array is marked clean (its bitmap bits cleared: the idle timer
/// does it a second after the last write), so only later writes leave dirty bits.
pub fn wait_clean(d: &Path) {
    proc::wait_for("the array marked clean", 30, || {
        status(d).is_some_and(|s| s["state"].as_str().is_some_and(|t| t.starts_with("clean")))
    });
}

/// `raidkit serve` of `members` (and `extra` options), stderr (its event lines) to
/// `serve.log`.
pub fn serve_with(d: &Path, members: &[&str], extra: &[&str]) -> Killing {
    let log = std::fs::File::create(d.join("serve.log")).unwrap();
    let c = Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .args(["serve", "--socket", "a.sock", "--export", "net"])
        .args(["--member-timeout", &format!("{TIMEOUT_SECS}s")])
        .args(extra)
        .args(members)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start raidkit serve");
    let mut k = Killing(Some(c));
    let t0 = Instant::now();
    while status(d).is_none() {
        if let Some(c) = &mut k.0 {
            if let Ok(Some(st)) = c.try_wait() {
                let log = std::fs::read_to_string(d.join("serve.log")).unwrap_or_default();
                panic!("raidkit serve exited ({st}):\n{log}");
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no control socket");
        std::thread::sleep(Duration::from_millis(50));
    }
    k
}

pub fn serve(d: &Path, members: &[&str]) -> Killing {
    serve_with(d, members, &[])
}

/// The event lines of kind `kind` the server logged so far.
pub fn events(d: &Path, kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(d.join("serve.log")).unwrap_or_default();
    let tag = format!("]: {kind} ");
    text.lines()
        .filter_map(|l| l.split_once(&tag).map(|(_, j)| j))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

pub fn wait_event(d: &Path, kind: &str, secs: u64) -> Value {
    proc::wait_for(kind, secs, || !events(d, kind).is_empty());
    events(d, kind).remove(0)
}

/// Wait for the `n`th event (1-based) of `kind`.
pub fn wait_nth_event(d: &Path, kind: &str, n: usize, secs: u64) -> Value {
    proc::wait_for(&format!("{kind} #{n}"), secs, || events(d, kind).len() >= n);
    events(d, kind).remove(n - 1)
}

/// Bytes nbdkit's log filter saw written at or past `from` (the data area).
pub fn logged_write_bytes(log: &Path, from: u64) -> u64 {
    logged(log, "Write")
        .into_iter()
        .filter(|(off, _)| *off >= from)
        .map(|(_, n)| n)
        .sum()
}

/// (offset, count) of every `kind` request (Write, Trim, Zero) in nbdkit's log.
pub fn logged(log: &Path, kind: &str) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let field = |l: &str, k: &str| -> Option<u64> {
        let v = l.split_whitespace().find_map(|w| w.strip_prefix(k))?;
        u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
    };
    let tag = format!(" {kind} id=");
    text.lines()
        .filter(|l| l.contains(&tag) && l.contains("count="))
        .filter_map(|l| Some((field(l, "offset=")?, field(l, "count=")?)))
        .collect()
}

/// Lines of nbdkit's log for `kind` requests (e.g. "Flush").
pub fn logged_count(log: &Path, kind: &str) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tag = format!(" {kind} id=");
    text.lines().filter(|l| l.contains(&tag)).count()
}

pub fn client(d: &Path) -> Client {
    let uri = format!("nbd+unix:///net?socket={}", d.join("a.sock").display());
    Client::connect(&uri, &ClientOptions::default()).expect("connect to raidkit serve")
}

/// Write `data` at `offset` and flush, through the array; the time it took.
pub fn write_flush(c: &Client, offset: u64, data: &[u8]) -> Duration {
    let t0 = Instant::now();
    c.write(offset, data, false, Duration::from_secs(60))
        .expect("client write");
    c.flush(Duration::from_secs(60)).expect("client flush");
    t0.elapsed()
}

/// Read `len` bytes at `offset` through the array.
pub fn read(c: &Client, offset: u64, len: usize) -> Vec<u8> {
    let mut back = vec![0u8; len];
    c.read(offset, &mut back, Duration::from_secs(60))
        .expect("client read");
    back
}

/// A member's data area (from the data offset), from a file.
pub fn data_area(p: &Path) -> Vec<u8> {
    let all = std::fs::read(p).unwrap();
    all[DATA_OFFSET as usize..].to_vec()
}

/// `a` and `b` agree on their common length (member sizes may differ by a little); where
/// they do not is printed.
pub fn same_prefix(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    assert!(n > 0);
    let differs = |i: &usize| a[*i..(*i + 512).min(n)] != b[*i..(*i + 512).min(n)];
    let Some(first) = (0..n).step_by(512).find(differs) else {
        return true;
    };
    let last = (0..n).step_by(512).rev().find(differs).unwrap_or(first);
    eprintln!("the data differs in bytes {first}..{} (of {n})", last + 512);
    false
}

/// A TCP port of 127.0.0.1 free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A self-signed certificate for 127.0.0.1 and localhost in `dir`, in nbdkit's layout
/// (`ca-cert.pem` = `server-cert.pem`, `server-key.pem`); None without openssl.
pub fn x509_dir(dir: &Path) -> Option<PathBuf> {
    let openssl = proc::system_tool("openssl", "x509 members")?;
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (dir.join("server-cert.pem"), dir.join("server-key.pem"));
    let san = ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"];
    proc::self_signed_cert(&openssl, &cert, &key, &san);
    std::fs::copy(dir.join("server-cert.pem"), dir.join("ca-cert.pem")).unwrap();
    Some(dir.to_path_buf())
}

/// Create a sparse file of `bytes` in `d`.
pub fn sparse(d: &Path, name: &str, bytes: u64) {
    std::fs::File::create(d.join(name))
        .unwrap()
        .set_len(bytes)
        .unwrap();
}
