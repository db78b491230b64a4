//! The server process of the hostile tests: this test binary re-executed with
//! `RK_NBD_HOSTILE_CHILD` set runs only `child_server`, which serves until killed.

use raidkit_nbd::{Backend, Export, Listen, MemBackend, Server, ServerConfig, UnixAccess};
use raidkit_testkit::tempdir::TempDir;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

pub const CHILD_ENV: &str = "RK_NBD_HOSTILE_CHILD";
pub const DISK: usize = 16 << 20;

// ------------------------------------------------------------------ the child server

/// Settings passed to the child as `key=value;...`.
#[derive(Clone)]
pub struct Spec {
    pub tcp: bool,
    pub umask: Option<u32>,
    pub group: Option<u32>,
    vals: Vec<(&'static str, u64)>,
}

impl Spec {
    pub fn unix() -> Spec {
        Spec {
            tcp: false,
            umask: None,
            group: None,
            vals: Vec::new(),
        }
    }
    pub fn tcp() -> Spec {
        Spec {
            tcp: true,
            ..Spec::unix()
        }
    }
    pub fn set(mut self, k: &'static str, v: u64) -> Spec {
        self.vals.push((k, v));
        self
    }
    fn encode(&self, sock: &Path) -> String {
        let mut s = format!("sock={};tcp={}", sock.display(), self.tcp as u8);
        if let Some(m) = self.umask {
            s += &format!(";umask={m}");
        }
        if let Some(g) = self.group {
            s += &format!(";group={g}");
        }
        for (k, v) in &self.vals {
            s += &format!(";{k}={v}");
        }
        s
    }
}

/// The child: serve as `RK_NBD_HOSTILE_CHILD` says (nothing without it).
pub fn serve() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    // SAFETY: prctl with constant arguments; dies with the test process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let kv: Vec<(&str, &str)> = spec.split(';').filter_map(|p| p.split_once('=')).collect();
    let get = |k: &str| kv.iter().find(|(a, _)| *a == k).map(|(_, v)| *v);
    let num = |k: &str| get(k).map(|v| v.parse::<u64>().unwrap());
    let mem: Arc<dyn Backend> = Arc::new(MemBackend::new(DISK, false));
    let mut cfg = ServerConfig::new(vec![Export {
        name: "disk".into(),
        description: String::new(),
        backend: mem,
    }]);
    let l = &mut cfg.limits;
    if let Some(v) = num("conns") {
        l.max_connections = v as usize;
    }
    if let Some(v) = num("peer") {
        l.max_connections_per_peer = v as usize;
    }
    if let Some(v) = num("hs") {
        l.max_handshakes = v as usize;
    }
    if let Some(v) = num("hs_ms") {
        l.handshake_timeout = Duration::from_millis(v);
    }
    if let Some(v) = num("idle_ms") {
        l.idle_timeout = Some(Duration::from_millis(v));
    }
    if let Some(v) = num("extra_workers") {
        l.max_extra_workers = v as usize;
    }
    if let Some(v) = num("workers") {
        cfg.workers = v as usize;
    }
    if let Some(g) = num("group") {
        cfg.unix_access = UnixAccess::Group(g as u32);
    }
    if let Some(m) = num("umask") {
        // SAFETY: umask cannot fail.
        unsafe { libc::umask(m as libc::mode_t) };
    }
    let listen = if get("tcp") == Some("1") {
        Listen::Tcp("127.0.0.1:0".into())
    } else {
        Listen::Unix(PathBuf::from(get("sock").unwrap()))
    };
    let server = Server::bind(cfg, &listen).unwrap();
    println!("READY {}", server.local_addr());
    std::io::stdout().flush().unwrap();
    server.run().unwrap();
}

pub struct Child_ {
    pub child: Child,
    pub addr: String,
    pub tcp: bool,
    _dir: TempDir,
}

impl Drop for Child_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn spawn(tag: &str, spec: Spec) -> Child_ {
    let dir = TempDir::new(&format!("rk-hostile-{tag}")).unwrap();
    let sock = dir.path().join("s.sock");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_server", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, spec.encode(&sock))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "child server died");
        if let Some((_, a)) = line.trim().split_once("READY ") {
            break a.to_string();
        }
    };
    // Keep draining the child's stdout (libtest prints when it ends).
    thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Child_ {
        child,
        addr,
        tcp: spec.tcp,
        _dir: dir,
    }
}

pub fn status_kib(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

pub fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}
