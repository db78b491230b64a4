//! The alert paths of `raidkit monitor`: run a program, send mail, POST a webhook.
//!
//! Each path is independent: it has its own thread and its own queue, so a path that
//! fails (no `sendmail`, a webhook that is down) or hangs (a slow program) never holds up
//! the others or the event stream. A failed delivery that may succeed later (the program
//! or `sendmail` could not be started, `sendmail` failed, a connection error, an HTTP 5xx
//! or 429) is retried with back-off, [`ATTEMPTS`] times in all; then it is given up with a
//! message, and the path goes on with the next event. Each failure is reported on stderr.

use anyhow::{anyhow, Result};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Deliveries tried per event and path.
pub const ATTEMPTS: u32 = 5;
/// Wait before the second attempt; doubled for each further one (1, 2, 4, 8 s).
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Events waiting per path while it retries; more are dropped (and said so).
const QUEUE: usize = 1000;
/// Time a webhook has to answer.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// Where events go.
#[derive(Clone, Debug)]
pub enum Path {
    /// `PROGRAM EVENT ARRAY DETAIL-JSON`, with `RAIDKIT_EVENT` = the whole event.
    Program(PathBuf),
    /// Mail to this address through `sendmail -t`.
    Mail(String),
    /// POST the event as JSON to this http:// or https:// URL.
    Webhook(String),
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Program(p) => write!(f, "program {}", p.display()),
            Path::Mail(a) => write!(f, "mail to {a}"),
            Path::Webhook(u) => write!(f, "webhook {u}"),
        }
    }
}

/// How one attempt went.
pub enum Outcome {
    /// Delivered.
    Done,
    /// Failed in a way a later attempt may not (retried).
    Retry(String),
    /// Failed for good (not retried).
    Fail(String),
}

fn field<'a>(e: &'a Value, k: &str) -> &'a str {
    e[k].as_str().unwrap_or("?")
}

/// One attempt to deliver `e` through `path`.
pub fn attempt(path: &Path, e: &Value) -> Outcome {
    match path {
        Path::Program(p) => {
            let st = std::process::Command::new(p)
                .arg(field(e, "kind"))
                .arg(field(e, "array"))
                .arg(e["detail"].to_string())
                .env("RAIDKIT_EVENT", e.to_string())
                .status();
            match st {
                Err(err) => Outcome::Retry(format!("cannot run it: {err}")),
                Ok(s) if s.success() => Outcome::Done,
                // It ran: running it again could repeat what it did.
                Ok(s) => Outcome::Fail(format!("it exited with {s}")),
            }
        }
        Path::Mail(addr) => mail(addr, e),
        Path::Webhook(url) => webhook(url, e),
    }
}

fn mail(addr: &str, e: &Value) -> Outcome {
    let child = std::process::Command::new("sendmail")
        .arg("-t")
        .stdin(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(err) => {
            return Outcome::Retry(format!(
                "cannot run sendmail ({err}): install an MTA such as msmtp-mta or postfix"
            ))
        }
    };
    let text = format!(
        "To: {addr}\nSubject: raidkit {}: {}\n\n{}\n",
        field(e, "array"),
        field(e, "kind"),
        serde_json::to_string_pretty(e).unwrap_or_default()
    );
    let wrote = child
        .stdin
        .take()
        .map(|mut i| i.write_all(text.as_bytes()))
        .unwrap_or(Ok(()));
    match (child.wait(), wrote) {
        (Ok(s), Ok(())) if s.success() => Outcome::Done,
        (Ok(s), _) if !s.success() => Outcome::Retry(format!("sendmail exited with {s}")),
        (Err(err), _) | (_, Err(err)) => Outcome::Retry(format!("sendmail: {err}")),
        _ => Outcome::Retry("sendmail failed".into()),
    }
}

/// Check a webhook URL before any event: http:// or https://.
pub fn check_url(url: &str) -> Result<()> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(anyhow!(
            "--webhook {url:?}: give an http:// or https:// URL"
        ))
    }
}

fn webhook(url: &str, e: &Value) -> Outcome {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(WEBHOOK_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let res = agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(e.to_string());
    match res {
        Err(err) => Outcome::Retry(err.to_string()),
        Ok(r) => {
            let code = r.status().as_u16();
            match code {
                200..=299 => Outcome::Done,
                429 | 500..=599 => Outcome::Retry(format!("answered HTTP {code}")),
                _ => Outcome::Fail(format!("answered HTTP {code}")),
            }
        }
    }
}

/// Deliver `e` through `path`, retrying with back-off; report failures on stderr.
/// Returns whether it was delivered.
pub fn deliver(path: &Path, e: &Value) -> bool {
    let what = format!("{} event of {}", field(e, "kind"), field(e, "array"));
    let mut wait = FIRST_BACKOFF;
    for n in 1..=ATTEMPTS {
        match attempt(path, e) {
            Outcome::Done => return true,
            Outcome::Fail(why) => {
                eprintln!("raidkit monitor: {path}: {why}; the {what} is not delivered there");
                return false;
            }
            Outcome::Retry(why) if n < ATTEMPTS => {
                eprintln!(
                    "raidkit monitor: {path}: {why}; trying the {what} again in {} s (attempt {} of {ATTEMPTS})",
                    wait.as_secs(),
                    n + 1
                );
                std::thread::sleep(wait);
                wait *= 2;
            }
            Outcome::Retry(why) => {
                eprintln!(
                    "raidkit monitor: {path}: {why}; giving up on the {what} after {ATTEMPTS} attempts"
                );
            }
        }
    }
    false
}

/// One alert path's thread and queue.
pub struct Worker {
    path: Path,
    tx: Option<SyncSender<Value>>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Start delivering through `path`.
    pub fn start(path: Path) -> Result<Worker> {
        let (tx, rx): (SyncSender<Value>, Receiver<Value>) = sync_channel(QUEUE);
        let p = path.clone();
        let thread = std::thread::Builder::new()
            .name("raidkit-deliver".into())
            .spawn(move || {
                for e in rx {
                    deliver(&p, &e);
                }
            })?;
        Ok(Worker {
            path,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queue an event; never blocks (a full queue drops it, with a message).
    pub fn send(&self, e: &Value) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(e.clone()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => eprintln!(
                "raidkit monitor: {}: {QUEUE} events are waiting; the {} event of {} is dropped there",
                self.path,
                field(e, "kind"),
                field(e, "array")
            ),
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Deliver what is queued, then stop.
    pub fn finish(mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
