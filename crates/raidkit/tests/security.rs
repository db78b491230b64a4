//! Other local users: who may use a server's control socket, and a run directory someone
//! else made. The other users are played with `setpriv` (util-linux), so these tests need
//! root (as CI runs them); without root they are skipped with a message.

use raidkit_testkit::proc::{wait_for, Daemon, Killing};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// Root and setpriv, or a reason to skip.
fn can_switch_users() -> bool {
    if !is_root() {
        println!("skip: these tests play other users with setpriv and need root");
        return false;
    }
    if raidkit_testkit::proc::which("setpriv").is_none() {
        println!("skip: setpriv (util-linux) is not installed");
        return false;
    }
    true
}

/// A command run as `uid` with primary group `gid` and supplementary `groups`.
fn as_user(uid: u32, gid: u32, groups: &[u32], run: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"));
    if groups.is_empty() {
        c.arg("--clear-groups");
    } else {
        let g: Vec<String> = groups.iter().map(u32::to_string).collect();
        c.arg(format!("--groups={}", g.join(",")));
    }
    c.arg("--").arg(RAIDKIT).env("RAIDKIT_RUN_DIR", run);
    c
}

fn out(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().expect("running raidkit")
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A world-writable temporary folder (other users make files there too).
fn shared_dir(tag: &str) -> TempDir {
    let t = TempDir::new(tag).unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    t
}

fn rk(run: &Path, dir: &Path, args: &[&str]) -> Output {
    raidkit_testkit::proc::bin_in(RAIDKIT, dir, Some(run), args)
}

fn create(run: &Path, d: &Path, name: &str) {
    let o = rk(
        run,
        d,
        &[
            "create",
            "-l",
            "1",
            "-n",
            "2",
            "-z",
            "8M",
            "--name",
            name,
            "--homehost",
            "none",
            "a",
            "b",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
}

fn serve_cmd(d: &Path, run: &Path, shell_prefix: &str, extra: &str) -> Command {
    let mut c = Command::new("sh");
    c.current_dir(d)
        .env("RAIDKIT_RUN_DIR", run)
        .arg("-c")
        .arg(format!(
            "{shell_prefix} exec {RAIDKIT} serve --socket nbd.sock {extra} a b"
        ));
    c
}

fn serving(c: &mut Command) -> Daemon {
    Daemon::spawn(c, |l| l.starts_with("raidkit: serving"), 60)
}

fn socket_in(run: &Path) -> PathBuf {
    std::fs::read_dir(run)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("a control socket")
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Under `umask 000` the control socket is still root's only; another user's `status`
/// says permission denied (naming the socket and its owner) and cannot fail a member;
/// with `--socket-group` the group may read but not change.
#[test]
fn control_socket_is_root_and_group_only() {
    if !can_switch_users() {
        return;
    }
    let t = TempDir::new("rk-sec").unwrap();
    let d = t.path();
    let run = d.join("run");
    create(&run, d, "sec");
    let mut s = serving(&mut serve_cmd(d, &run, "umask 000;", ""));
    let sock = socket_in(&run);
    assert_eq!(mode(&sock), 0o600, "{}", sock.display());
    assert_eq!(mode(&run), 0o755);
    let b = d.join("b").display().to_string();
    let o = out(as_user(NOBODY, NOBODY, &[], &run).args(["status"]));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        e.contains("permission denied")
            && e.contains(&sock.display().to_string())
            && e.contains("belongs to root"),
        "{}",
        text(&o)
    );
    let o = out(as_user(NOBODY, NOBODY, &[], &run).args(["manage", "sec", "--fail", &b]));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("permission denied"),
        "{}",
        text(&o)
    );
    let st: Value = serde_json::from_slice(&rk(&run, d, &["status", "--json"]).stdout).unwrap();
    assert_eq!(st[0]["degraded"], false, "{st}");
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");

    // A group that may read.
    let group = 4243u32;
    let mut s = serving(&mut serve_cmd(
        d,
        &run,
        "umask 000;",
        &format!("--socket-group {group}"),
    ));
    let sock = socket_in(&run);
    let md = std::fs::metadata(&sock).unwrap();
    assert_eq!((mode(&sock), md.gid()), (0o660, group));
    let o = out(as_user(NOBODY, NOBODY, &[group], &run).args(["status", "--json"]));
    assert!(o.status.success(), "{}", text(&o));
    let st: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(st[0]["name"], "sec", "{st}");
    let o = out(as_user(NOBODY, NOBODY, &[group], &run).args(["manage", "sec", "--fail", &b]));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("permission denied: members of group gid 4243 may only read"),
        "{}",
        text(&o)
    );
    let o = out(as_user(NOBODY, NOBODY, &[], &run).args(["status"]));
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("permission denied"),
        "{}",
        text(&o)
    );
    let st: Value = serde_json::from_slice(&rk(&run, d, &["status", "--json"]).stdout).unwrap();
    assert_eq!(st[0]["degraded"], false, "{st}");
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
}

/// A server with more privilege than its user shows (CAP_DAC_OVERRIDE) does not lend it:
/// a client of the same user cannot make it add a file that user cannot open, nor write a
/// trace where that user cannot.
#[test]
fn named_paths_are_checked_as_the_client() {
    if !can_switch_users() {
        return;
    }
    let t = shared_dir("rk-sec");
    let d = t.path();
    let run = d.join("run");
    create(&run, d, "cap");
    for m in ["a", "b"] {
        std::os::unix::fs::chown(d.join(m), Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let secret = d.join("secret");
    std::fs::write(&secret, vec![0x5a; 16 << 20]).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let private = d.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut c = Command::new("setpriv");
    c.current_dir(d).env("RAIDKIT_RUN_DIR", &run).args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
        "--inh-caps=+dac_override",
        "--ambient-caps=+dac_override",
        "--",
        RAIDKIT,
        "serve",
        "--socket",
        "nbd.sock",
        "a",
        "b",
    ]);
    let mut s = serving(&mut c);
    let o = out(as_user(NOBODY, NOBODY, &[], &run).current_dir(d).args([
        "manage",
        "cap",
        "--add",
        &secret.display().to_string(),
    ]));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!(
            "permission denied: nobody could not open {} for reading and writing",
            secret.display()
        )),
        "{}",
        text(&o)
    );
    assert!(std::fs::read(&secret).unwrap().iter().all(|&b| b == 0x5a));
    let trace = private.join("t.jsonl");
    let o = out(as_user(NOBODY, NOBODY, &[], &run).current_dir(d).args([
        "trace",
        "record",
        "cap",
        "--seconds",
        "1",
        "--output",
        &trace.display().to_string(),
    ]));
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("permission denied"),
        "{}",
        text(&o)
    );
    assert!(!trace.exists());
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
}

/// A run directory another user made first (mode 777, with a symlink where the scrub
/// state goes) is refused by the victim's server and commands, and nothing is written
/// through the link. The default `/tmp/raidkit-$UID` is checked the same way, and
/// `$XDG_RUNTIME_DIR` is preferred to it.
#[test]
fn a_run_directory_of_another_user_is_refused() {
    if !can_switch_users() {
        return;
    }
    let (victim, attacker) = (4245u32, 4246u32);
    let t = shared_dir("rk-sec");
    let d = t.path();
    let run = d.join("run");
    create(&d.join("own-run"), d, "vic");
    for m in ["a", "b"] {
        std::os::unix::fs::chown(d.join(m), Some(victim), Some(victim)).unwrap();
    }
    let precious = d.join("precious");
    std::fs::write(&precious, b"keep").unwrap();
    std::os::unix::fs::chown(&precious, Some(victim), Some(victim)).unwrap();
    let plant = format!(
        "umask 000; mkdir {r} && ln -s {p} {r}/scrub-x.json && ln -s {p} {r}/scrub-x.tmp",
        r = run.display(),
        p = precious.display()
    );
    let st = Command::new("setpriv")
        .args([
            &format!("--reuid={attacker}"),
            &format!("--regid={attacker}"),
            "--clear-groups",
            "--",
            "sh",
            "-c",
            &plant,
        ])
        .status()
        .unwrap();
    assert!(st.success());
    // Bounded: a server that accepted the directory would serve until stopped.
    let o = raidkit_testkit::proc::run_timeout(
        as_user(victim, victim, &[], &run)
            .current_dir(d)
            .args(["serve", "--socket", "nbd.sock", "a", "b"]),
        60,
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        e.contains(&format!(
            "run directory {} belongs to uid {attacker}, not to you (uid {victim})",
            run.display()
        )),
        "{}",
        text(&o)
    );
    let o = out(as_user(victim, victim, &[], &run).args(["status"]));
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("belongs to uid 4246"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep");

    // The default place, made by the attacker.
    let tmp_run = PathBuf::from(format!("/tmp/raidkit-{victim}"));
    let _ = std::fs::remove_dir_all(&tmp_run);
    std::fs::create_dir(&tmp_run).unwrap();
    std::os::unix::fs::chown(&tmp_run, Some(attacker), Some(attacker)).unwrap();
    std::fs::set_permissions(&tmp_run, std::fs::Permissions::from_mode(0o777)).unwrap();
    let default_place = |xdg: Option<&Path>| {
        let mut c = as_user(victim, victim, &[], &run);
        c.env_remove("RAIDKIT_RUN_DIR")
            .env_remove("XDG_RUNTIME_DIR");
        if let Some(x) = xdg {
            c.env("XDG_RUNTIME_DIR", x);
        }
        out(c.args(["status"]))
    };
    let o = default_place(None);
    assert!(
        !o.status.success()
            && String::from_utf8_lossy(&o.stderr).contains(&format!(
                "run directory /tmp/raidkit-{victim} belongs to uid {attacker}"
            )),
        "{}",
        text(&o)
    );
    // $XDG_RUNTIME_DIR (the victim's own) comes first: the planted one is not looked at.
    let xdg = d.join("xdg");
    std::fs::create_dir(&xdg).unwrap();
    std::os::unix::fs::chown(&xdg, Some(victim), Some(victim)).unwrap();
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = default_place(Some(&xdg));
    let _ = std::fs::remove_dir_all(&tmp_run);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !e.contains("run directory") && !e.contains("/tmp/raidkit-"),
        "{}",
        text(&o)
    );
}

/// A server killed with SIGKILL leaves its socket behind; the next command sees that
/// nobody listens there, removes it and does not list it.
#[test]
fn stale_control_sockets_are_removed() {
    let t = TempDir::new("rk-sec").unwrap();
    let d = t.path();
    let run = d.join("run");
    create(&run, d, "stale");
    let mut c = serve_cmd(d, &run, "", "");
    let s = Killing(
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the control socket", 60, || {
        std::fs::read_dir(&run).is_ok_and(|mut r| {
            r.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sock")))
        })
    });
    let sock = socket_in(&run);
    drop(s); // SIGKILL
    assert!(sock.exists());
    let o = rk(&run, d, &["status", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        serde_json::from_slice::<Value>(&o.stdout).unwrap(),
        serde_json::json!([])
    );
    assert!(
        !sock.exists(),
        "the stale socket {} is still there",
        sock.display()
    );
}
