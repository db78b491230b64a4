//! kill -9 during an online reshape, under a client writing through NBD (issue 15): a
//! RAID5 grows 3 -> 4 members (and a RAID6 4 -> 5) while `serve` is killed with SIGKILL at random moments and
//! served again (which continues the reshape). The client writes tagged blocks, flushes
//! every few writes and records what each acknowledged flush made durable; after every
//! restart, and at the end (the reshape finished, the export grown), every sector reads
//! back as its last flushed write — or as one of the writes in flight since, which the
//! crash may or may not have kept. `check` then finds no mismatch.
//!
//! The members are modelled devices (`fault:bw=...`) so the reshape takes seconds whatever
//! the machine and the first kill lands mid-reshape. `RAIDKIT_LONG=1` kills twelve times
//! instead of three.

use raidkit_nbd::client::{Client, ClientOptions};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::proc::{self, wait_for};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");
const SECTOR: u64 = 512;

fn run_dir(d: &Path) -> PathBuf {
    d.join("run")
}

fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&run_dir(d)), args)
}

fn status(d: &Path) -> Value {
    let o = proc::bin_in(RAIDKIT, d, Some(&run_dir(d)), &["status", "--json"]);
    serde_json::from_slice::<Value>(&o.stdout)
        .map(|v| v[0].clone())
        .unwrap_or(Value::Null)
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// What each sector must hold: the generation of its last flushed write (0: zeros, the
/// array as created), and the generations written since that no flush has covered yet,
/// each with the server life it was sent in (a write in flight when the server was killed
/// may or may not have landed; no later flush vouches for it).
struct Model {
    acked: Vec<u64>,
    pending: Vec<Vec<(u64, u64)>>,
    life: u64,
    /// The member files, searched for a lost sector's data when one is found wrong.
    members: Vec<PathBuf>,
}

impl Model {
    fn new(sectors: u64, members: Vec<PathBuf>) -> Model {
        Model {
            acked: vec![0; sectors as usize],
            pending: vec![Vec::new(); sectors as usize],
            life: 0,
            members,
        }
    }

    /// A write of generation `g` is about to be sent.
    fn sent(&mut self, s: u64, n: u64, g: u64) {
        for p in &mut self.pending[s as usize..(s + n) as usize] {
            p.push((self.life, g));
        }
    }

    /// A flush was acknowledged: every write sent before it in this server life (each
    /// acknowledged, in order, by the one writer) is durable; the last one to each sector
    /// is its content.
    fn flushed(&mut self) {
        let life = self.life;
        for (a, p) in self.acked.iter_mut().zip(self.pending.iter_mut()) {
            if let Some(&(_, g)) = p.iter().rev().find(|(l, _)| *l == life) {
                *a = g;
                p.clear();
            }
        }
    }

    /// The server was killed: a new life begins.
    fn killed(&mut self) {
        self.life += 1;
    }

    fn max_gen(&self) -> u64 {
        self.acked
            .iter()
            .chain(self.pending.iter().flatten().map(|(_, g)| g))
            .copied()
            .max()
            .unwrap_or(0)
            + 100
    }

    /// Check sectors `[s, s + buf.len() / 512)` as read.
    fn verify(&self, what: &str, s: u64, buf: &[u8]) {
        let mut want = [0u8; SECTOR as usize];
        for (i, got) in buf.chunks(SECTOR as usize).enumerate() {
            let sec = s + i as u64;
            let ok = std::iter::once(self.acked[sec as usize])
                .chain(self.pending[sec as usize].iter().map(|&(_, g)| g))
                .any(|g| {
                    if g == 0 {
                        want.fill(0);
                    } else {
                        fill_tagged(g, sec * SECTOR, &mut want);
                    }
                    got == want
                });
            if !ok {
                let g = self.acked[sec as usize];
                let mut w = [0u8; 16];
                fill_tagged(g, sec * SECTOR, &mut w);
                for p in &self.members {
                    let f = std::fs::read(p).unwrap();
                    for (i, c) in f.chunks(512).enumerate() {
                        if c[..16] == w {
                            eprintln!(
                                "LOCATE sector {sec} gen {g}: {} device sector {i}",
                                p.display()
                            );
                        }
                    }
                }
                let tag = u64::from_le_bytes(got[..8].try_into().unwrap());
                let found = (1..=self.max_gen()).find(|&g| {
                    fill_tagged(g, tag * SECTOR, &mut want);
                    got == want
                });
                eprintln!(
                    "{what}: sector {sec}: holds the tag of sector {tag}, generation {found:?}, zero {}",
                    got.iter().all(|&b| b == 0)
                );
            }
            assert!(
                ok,
                "{what}: sector {sec} holds neither its last flushed write (generation {}) nor one in flight {:?}",
                self.acked[sec as usize], self.pending[sec as usize]
            );
        }
    }
}

/// A member as served: a modelled device over the file (bandwidth-limited).
fn spec(d: &Path, name: &str) -> String {
    format!("fault:bw=6M:{}", d.join(name).display())
}

fn serve(d: &Path, members: &[String], log: &str) -> Child {
    let log = std::fs::File::create(d.join(log)).unwrap();
    Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", run_dir(d))
        .args(["serve", "--socket", "s.sock", "--export", "vol"])
        .args(members)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn connect(uri: &str) -> Client {
    let mut c = None;
    wait_for("the NBD export", 60, || {
        c = Client::connect(uri, &ClientOptions::default()).ok();
        c.is_some()
    });
    c.unwrap()
}

/// Write, flush every few writes, until told to stop (true) or the server goes away
/// (false).
fn writer(
    c: Client,
    model: Arc<Mutex<Model>>,
    stop: Arc<AtomicBool>,
    gen: Arc<Mutex<u64>>,
    limit: u64,
) -> bool {
    let dl = Duration::from_secs(30);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ *gen.lock().unwrap();
    let mut since_flush = 0;
    while !stop.load(Ordering::Relaxed) {
        let n = (xorshift(&mut rng) % 16 + 1) * 8;
        let s = xorshift(&mut rng) % (limit - n) / 8 * 8;
        let g = {
            let mut g = gen.lock().unwrap();
            *g += 1;
            *g
        };
        let mut buf = vec![0u8; (n * SECTOR) as usize];
        fill_tagged(g, s * SECTOR, &mut buf);
        model.lock().unwrap().sent(s, n, g);
        if c.write(s * SECTOR, &buf, false, dl).is_err() {
            return false;
        }
        since_flush += 1;
        if since_flush == 4 {
            since_flush = 0;
            // The model learns of the flush only once it is acknowledged.
            if c.flush(dl).is_err() {
                return false;
            }
            model.lock().unwrap().flushed();
        }
    }
    true
}

/// Read the first `sectors` of the export and check them against the model.
fn verify_all(what: &str, uri: &str, model: &Model, sectors: u64) {
    let c = connect(uri);
    let step = 2048u64;
    let mut s = 0;
    while s < sectors {
        let n = step.min(sectors - s);
        let mut buf = vec![0u8; (n * SECTOR) as usize];
        c.read(s * SECTOR, &mut buf, Duration::from_secs(60))
            .unwrap();
        model.verify(what, s, &buf);
        s += n;
    }
}

/// Debugging: `RK_KILLS=N` sets the kill count; `RK_DEBUG_VERIFY=1` checks the live and
/// the offline array at the first kill that finds the reshape finished (and stops there);
/// a sector found wrong is searched for in the member files.
#[test]
fn kill_9_during_an_online_reshape_loses_no_flushed_write() {
    kill_loop(5, 3);
}

/// The same for a RAID6 growing 4 -> 5 (two parity blocks per stripe to move and keep).
#[test]
fn kill_9_during_an_online_raid6_reshape_loses_no_flushed_write() {
    kill_loop(6, 4);
}

/// Grow a RAID`level` of `n` members by one, online under the writer, killing `serve`
/// as the module documentation says. Two data members become three either way.
fn kill_loop(level: u32, n: usize) {
    let kills = if let Some(k) = std::env::var("RK_KILLS").ok().and_then(|k| k.parse().ok()) {
        k
    } else if std::env::var_os("RAIDKIT_LONG").is_some() {
        12
    } else {
        3
    };
    let t = TempDir::new("rk-reshape-kill").unwrap();
    let d = t.path();
    std::fs::create_dir(run_dir(d)).unwrap();
    let names: Vec<String> = (0..=n).map(|i| format!("a{i}")).collect();
    for m in &names {
        std::fs::File::create(d.join(m))
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
    }
    let (level_s, n_s) = (level.to_string(), n.to_string());
    let mut create = vec![
        "create",
        "--level",
        &level_s,
        "--raid-devices",
        &n_s,
        "--chunk",
        "64",
        "--name",
        "k",
        "--homehost",
        "none",
    ];
    create.extend(names[..n].iter().map(String::as_str));
    ok(d, &create);
    let old: Vec<String> = names[..n].iter().map(|m| spec(d, m)).collect();
    let all: Vec<String> = names.iter().map(|m| spec(d, m)).collect();
    let grown = (n + 1).to_string();
    let uri = format!("nbd+unix:///vol?socket={}", d.join("s.sock").display());
    let mut server = proc::Killing(serve(d, &old, "serve-0.log"));
    let c = connect(&uri);
    let old_sectors = c.info().size / SECTOR;
    drop(c);
    wait_for("the control socket", 30, || !status(d).is_null());
    let e = proc::bin_in(
        RAIDKIT,
        d,
        Some(&run_dir(d)),
        &[
            "grow",
            "vol",
            "--add",
            &all[n],
            "--raid-devices",
            &grown,
            "--force",
        ],
    );
    assert!(
        e.status.success(),
        "grow: {}",
        String::from_utf8_lossy(&e.stderr)
    );
    let model = Arc::new(Mutex::new(Model::new(
        old_sectors,
        names.iter().map(|m| d.join(m)).collect(),
    )));
    let gen = Arc::new(Mutex::new(0u64));
    let mut rng = 0x5eed_u64;
    let mut mid_reshape = 0;
    for k in 0..kills {
        let stop = Arc::new(AtomicBool::new(false));
        let w = {
            let (c, m, s, g) = (connect(&uri), model.clone(), stop.clone(), gen.clone());
            std::thread::spawn(move || writer(c, m, s, g, old_sectors))
        };
        std::thread::sleep(Duration::from_millis(300 + xorshift(&mut rng) % 1500));
        let st = status(d);
        eprintln!(
            "kill {}: reshape {} last {} disks {} gen {}\n{}",
            k + 1,
            st["reshape"],
            st["last_result"],
            st["raid_disks"],
            gen.lock().unwrap(),
            std::fs::read_to_string(d.join(format!("serve-{k}.log"))).unwrap()
        );
        if !st["reshape"].is_null() {
            mid_reshape += 1;
        } else if std::env::var_os("RK_DEBUG_VERIFY").is_some() {
            stop.store(true, Ordering::Relaxed);
            w.join().unwrap();
            let m = model.lock().unwrap();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                verify_all(&format!("before kill {}", k + 1), &uri, &m, old_sectors)
            }));
            proc::terminate(&server.0);
            server.0.wait().unwrap();
            let mut export = vec!["export", "--output", "out.img"];
            export.extend(names.iter().map(String::as_str));
            ok(d, &export);
            let img = std::fs::read(d.join("out.img")).unwrap();
            let r2 = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                m.verify("offline export", 0, &img[..(old_sectors * SECTOR) as usize])
            }));
            panic!(
                "verified before kill: live {:?} offline {:?}",
                r.is_ok(),
                r2.is_ok()
            );
        }
        server.0.kill().unwrap();
        server.0.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
        model.lock().unwrap().killed();
        if std::env::var_os("RK_DEBUG_VERIFY").is_some() {
            for m in [&names[0], &names[n]] {
                let x: Value = serde_json::from_str(&ok(d, &["examine", "--json", m])).unwrap();
                eprintln!(
                    "examine {m}: data_offset {} reshape {} events {}",
                    x[0]["data_offset"], x[0]["reshape"], x[0]["events"]
                );
            }
        }
        // Served again: it continues the reshape; what was flushed is there.
        server = proc::Killing(serve(d, &all, &format!("serve-{}.log", k + 1)));
        let m = model.lock().unwrap();
        wait_for("the control socket", 30, || !status(d).is_null());
        eprintln!(
            "after kill {}: {}\n{}",
            k + 1,
            status(d)["reshape"],
            std::fs::read_to_string(d.join(format!("serve-{}.log", k + 1))).unwrap()
        );
        verify_all(&format!("after kill {}", k + 1), &uri, &m, old_sectors);
    }
    // The first kill comes right after the start; later ones may find it finished (the
    // machine's speed decides), which tests a plain array's restart instead.
    eprintln!("kills that landed mid-reshape: {mid_reshape} of {kills}");
    assert!(mid_reshape >= 1, "no kill landed mid-reshape");
    // One more life to the end: the reshape finishes under the writer, the export grows.
    let stop = Arc::new(AtomicBool::new(false));
    let w = {
        let (c, m, s, g) = (connect(&uri), model.clone(), stop.clone(), gen.clone());
        std::thread::spawn(move || writer(c, m, s, g, old_sectors))
    };
    wait_for("the reshape to finish", 180, || {
        let s = status(d);
        !s.is_null() && s["reshape"].is_null() && s["raid_disks"] == n + 1
    });
    stop.store(true, Ordering::Relaxed);
    assert!(
        w.join().unwrap(),
        "a write or flush failed on the live server"
    );
    let c = connect(&uri);
    let new_sectors = c.info().size / SECTOR;
    assert_eq!(new_sectors, old_sectors / 2 * 3, "the export grew");
    c.flush(Duration::from_secs(30)).unwrap();
    let mut tail = vec![0u8; ((new_sectors - old_sectors) * SECTOR) as usize];
    c.read(old_sectors * SECTOR, &mut tail, Duration::from_secs(60))
        .unwrap();
    assert!(tail.iter().all(|&b| b == 0), "the grown part is not zeros");
    drop(c);
    verify_all(
        "after the reshape finished",
        &uri,
        &model.lock().unwrap(),
        old_sectors,
    );
    proc::terminate(&server.0);
    let st = server.0.wait().unwrap();
    assert!(st.success(), "serve: {st:?}");
    let mut check = vec!["check"];
    check.extend(names.iter().map(String::as_str));
    let out = ok(d, &check);
    assert!(out.contains(": 0 mismatched range(s)"), "{out}");
}
