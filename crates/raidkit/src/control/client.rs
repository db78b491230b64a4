//! The commands' side of the control socket: find the serving processes, send requests.
//!
//! A scan of the run directories ([`super::client_run_dirs`]) sorts the sockets found:
//! live ones; ones this user may not use (connect refused with EACCES, or the server said
//! "permission denied"), reported by path, owner and mode; and stale ones left by a
//! server that died (ECONNREFUSED: nobody listens), which are removed when they are this
//! user's and never listed.

use super::names::{pick, Ident};
use super::protocol::Request;
use super::{check_dir, client_run_dirs, run_dir, user_name};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Time a server has to answer a request.
const REPLY_TIME: Duration = Duration::from_secs(30);

/// What a scan of the run directories found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Sockets of live servers this user may connect to.
    pub live: Vec<PathBuf>,
    /// One sentence per socket this user may not use.
    pub denied: Vec<String>,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The sentence for a socket this user may not use.
pub fn denied_text(sock: &Path, why: &str) -> String {
    let who = std::fs::symlink_metadata(sock)
        .map(|m| {
            format!(
                "belongs to {} (mode {:04o})",
                user_name(m.uid()),
                m.mode() & 0o7777
            )
        })
        .unwrap_or_default();
    format!(
        "permission denied: control socket {} {who}: {why}; run the command as root or as that user, or start the server with --socket-group GROUP to let GROUP read its status",
        sock.display()
    )
}

/// Sort the sockets of one directory into `scan`.
fn scan_dir(dir: &Path, scan: &mut Scan) -> Result<()> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    check_dir(dir, &[euid(), 0])?;
    let mut found: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sock"))
        .collect();
    found.sort();
    for p in found {
        let Ok(md) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if !md.file_type().is_socket() {
            continue;
        }
        match UnixStream::connect(&p) {
            Ok(_) => scan.live.push(p),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => scan
                .denied
                .push(denied_text(&p, "you may not connect to it")),
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                // Nobody listens: its server died. Ours to clean up if it is ours.
                if md.uid() == euid() || euid() == 0 {
                    let _ = std::fs::remove_file(&p);
                }
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// Scan every run directory a command looks in. An untrusted own run directory is an
/// error; an untrusted root's one (looked at besides a user's own) is reported with the
/// sockets this user may not use, and skipped.
pub fn scan() -> Result<Scan> {
    let mut s = Scan::default();
    for (i, d) in client_run_dirs().iter().enumerate() {
        match scan_dir(d, &mut s) {
            Err(e) if i > 0 => s.denied.push(format!("{e:#}")),
            r => r?,
        }
    }
    Ok(s)
}

/// Every live control socket this user may connect to.
pub fn sockets() -> Result<Vec<PathBuf>> {
    Ok(scan()?.live)
}

/// Connect to a control socket.
pub fn connect(sock: &Path) -> Result<UnixStream> {
    UnixStream::connect(sock).with_context(|| format!("connecting to {}", sock.display()))
}

/// Send `req` on a connected stream and read the reply line.
pub fn exchange(
    s: UnixStream,
    sock: &Path,
    req: &Request,
) -> Result<(Value, BufReader<UnixStream>)> {
    let mut w = s.try_clone()?;
    writeln!(w, "{}", serde_json::to_string(req)?)?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)
        .with_context(|| format!("reading the reply of {}", sock.display()))?;
    let v: Value = serde_json::from_str(&line)
        .map_err(|e| anyhow!("bad reply from {}: {e}", sock.display()))?;
    if v["ok"] != json!(true) {
        bail!("{}", v["error"].as_str().unwrap_or("request failed"));
    }
    Ok((v, r))
}

/// Send one request to one socket and return the reply.
pub fn request(sock: &Path, req: &Request) -> Result<Value> {
    let s = connect(sock)?;
    s.set_read_timeout(Some(REPLY_TIME))?;
    Ok(exchange(s, sock, req)?.0)
}

/// Replies (control socket, reply) and sentences for the servers this user may not ask.
pub type Asked = (Vec<(PathBuf, Value)>, Vec<String>);

/// `req` asked of every server on this machine: the replies of those that answered,
/// with their control sockets, and a sentence per server this user may not ask (servers
/// gone meanwhile are skipped).
pub fn ask_all(req: &Request) -> Result<Asked> {
    let scan = scan()?;
    let mut replies = Vec::new();
    let mut denied = scan.denied;
    for s in scan.live {
        match request(&s, req) {
            Ok(v) => replies.push((s, v)),
            Err(e) if e.to_string().starts_with("permission denied") => {
                denied.push(denied_text(&s, &e.to_string()))
            }
            Err(_) => {}
        }
    }
    Ok((replies, denied))
}

/// Status of every array served on this machine that this user may see, as the servers
/// sent it, with the serving process's pid and control socket added; and a sentence per
/// server this user may not ask.
pub fn all_status() -> Result<(Vec<Value>, Vec<String>)> {
    let (replies, denied) = ask_all(&Request::Status)?;
    let mut out = Vec::new();
    for (s, v) in replies {
        for a in v["arrays"].as_array().cloned().unwrap_or_default() {
            let mut a = a;
            a["pid"] = v["pid"].clone();
            a["control_socket"] = json!(s.display().to_string());
            out.push(a);
        }
    }
    Ok((out, denied))
}

/// How commands may name an array of a status reply.
pub fn ident_of(a: &Value) -> Ident {
    let text = |k: &str| a[k].as_str().unwrap_or("").to_string();
    Ident {
        name: text("name"),
        uuid: text("uuid"),
        md_name: text("md_name"),
    }
}

/// The control socket of the process serving the array `spec` names: its export name,
/// UUID or superblock `host:name`. A word naming several running arrays is refused,
/// listing them and how to pick one.
pub fn socket_for(spec: &str) -> Result<PathBuf> {
    let (arrays, denied) = all_status()?;
    let ids: Vec<Ident> = arrays.iter().map(ident_of).collect();
    match pick(&ids, spec, "") {
        Ok(i) => match arrays[i]["control_socket"].as_str() {
            Some(p) => Ok(PathBuf::from(p)),
            None => bail!("the server of {spec:?} did not say its control socket"),
        },
        Err(e) if ids.iter().any(|x| x.matches(spec)) => bail!("{e}"),
        Err(_) if !denied.is_empty() => {
            bail!(
                "no running array named {spec:?} that you may use; {}",
                denied[0]
            )
        }
        Err(e) => bail!("{e} (control sockets live in {})", run_dir().display()),
    }
}
