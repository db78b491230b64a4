//! `raidkit monitor`: stream the events of running arrays; run a program, send mail or
//! POST a webhook on each (see [`super::deliver`] for how failures are retried).

use super::deliver::{self, Worker};
use super::wire;
use crate::control::client::{connect, exchange, request, scan, sockets};
use crate::control::protocol::Request;
use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::Duration;

/// `monitor`.
#[derive(Args, Debug)]
pub struct MonitorArgs {
    /// One JSON object per event.
    #[arg(long)]
    pub json: bool,
    /// Run PROGRAM EVENT ARRAY DETAIL-JSON for every event.
    #[arg(long, value_name = "PROGRAM")]
    pub program: Option<PathBuf>,
    /// Mail every event to ADDR (needs `sendmail`).
    #[arg(long, value_name = "ADDR")]
    pub mail: Option<String>,
    /// POST every event as JSON to an http:// or https:// URL.
    #[arg(long, value_name = "URL")]
    pub webhook: Option<String>,
    /// Send a test event through every alert path, then exit.
    #[arg(long)]
    pub test: bool,
    /// Exit after this many events (default: run forever).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// The alert paths the command line asks for.
fn paths(a: &MonitorArgs) -> Result<Vec<deliver::Path>> {
    let mut v = Vec::new();
    if let Some(p) = &a.program {
        v.push(deliver::Path::Program(p.clone()));
    }
    if let Some(m) = &a.mail {
        v.push(deliver::Path::Mail(m.clone()));
    }
    if let Some(u) = &a.webhook {
        deliver::check_url(u)?;
        v.push(deliver::Path::Webhook(u.clone()));
    }
    Ok(v)
}

/// Print an event on stdout: the JSON as received, or `TIME ARRAY: KIND DETAIL`.
fn print(a: &MonitorArgs, e: &Value) {
    if a.json {
        outln!("{e}");
    } else if let Ok(ev) = serde_json::from_value::<wire::Event>(e.clone()) {
        if crate::sd::stderr_is_journal() {
            // journald stamps every line itself.
            outln!("{}: {} {}", ev.array, ev.kind, ev.detail);
        } else {
            outln!(
                "{} {}: {} {}",
                raidkit_tools::human::timestamp(ev.time),
                ev.array,
                ev.kind,
                ev.detail
            );
        }
    }
}

/// `monitor --test`: one test event through every path (each tried once, so the answer
/// comes now), and a test event from every running array.
fn test(a: &MonitorArgs, paths: &[deliver::Path]) -> Result<()> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let e = json!({"time": now, "array": "test", "kind": "test",
        "detail": {"note": "test event from `raidkit monitor --test`"}});
    print(a, &e);
    let mut failed = Vec::new();
    for p in paths {
        match deliver::attempt(p, &e) {
            deliver::Outcome::Done => {}
            deliver::Outcome::Retry(why) | deliver::Outcome::Fail(why) => {
                eprintln!("raidkit monitor: {p}: {why}");
                failed.push(p.to_string());
            }
        }
    }
    for s in sockets()? {
        let _ = request(&s, &Request::TestEvent);
    }
    if !failed.is_empty() {
        bail!("the test event did not reach: {}", failed.join(", "));
    }
    eprintln!("raidkit monitor: test event delivered");
    Ok(())
}

/// Follow one control socket's event stream into `tx` (a thread per socket).
fn follow(sock: PathBuf, tx: Sender<Value>) {
    std::thread::spawn(move || {
        let Ok(c) = connect(&sock) else { return };
        let Ok((_, reader)) = exchange(c, &sock, &Request::Monitor) else {
            return;
        };
        for line in reader.lines().map_while(|l| l.ok()) {
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if serde_json::from_value::<wire::Event>(v.clone()).is_ok() && tx.send(v).is_err() {
                break;
            }
        }
    });
}

/// `raidkit monitor`.
pub fn run(a: MonitorArgs) -> Result<()> {
    let paths = paths(&a)?;
    if a.test {
        return test(&a, &paths);
    }
    let workers = paths
        .into_iter()
        .map(Worker::start)
        .collect::<Result<Vec<_>>>()?;
    let (tx, rx) = channel::<Value>();
    let mut watched: Vec<PathBuf> = Vec::new();
    let mut told: Vec<String> = Vec::new();
    let mut seen = 0u64;
    loop {
        let found = scan()?;
        for s in found.live {
            if !watched.contains(&s) {
                watched.push(s.clone());
                follow(s, tx.clone());
            }
        }
        // A server whose events this user may not have: say so once, not watch nothing
        // in silence.
        for d in found.denied {
            if !told.contains(&d) {
                eprintln!("raidkit monitor: {d}");
                told.push(d);
            }
        }
        match rx.recv_timeout(Duration::from_secs(2)) {
            Ok(e) => {
                print(&a, &e);
                for w in &workers {
                    w.send(&e);
                }
                seen += 1;
                if a.count.is_some_and(|c| seen >= c) {
                    break;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    for w in workers {
        w.finish();
    }
    Ok(())
}
