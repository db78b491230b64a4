//! The server, in the protocol's own layers:
//!
//! * [`listener`]: the listening socket (a Unix socket with an explicit mode, or TCP)
//!   and the peer's identity; [`admission`]: connection and handshake slots;
//! * [`stream`]: one connection's bytes, plain or TLS, with the handshake deadline;
//! * [`handshake`]: fixed newstyle option haggling, the TLS upgrade;
//! * [`transmission`]: requests read, dispatched to the connection's workers, answered,
//!   with the bytes and requests in flight bounded.
//!
//! This module ties them together: `bind`, the accept loop and graceful shutdown.

mod admission;
mod config;
pub mod fuzzing;
mod handshake;
pub(crate) mod listener;
mod stream;
mod transmission;

pub use config::{Export, ServerConfig, ServerLimits, UnixAccess, DEFAULT_MAX_PAYLOAD};

use crate::util::{lock, poll_in};
use crate::{NbdError, TlsConfig};
use admission::Admission;
use config::ExportEntry;
use listener::Listener;
use std::collections::HashMap;
use std::net::Shutdown;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a shutdown waits for clients before closing their sockets.
const GRACE: Duration = Duration::from_secs(3);

/// Where to listen.
#[derive(Clone, Debug)]
pub enum Listen {
    /// A Unix socket path (a stale socket file is replaced; a live one is an error). The
    /// file's mode is [`ServerConfig::unix_access`]'s.
    Unix(PathBuf),
    /// `HOST:PORT` (IPv6 as `[::1]:10809`); port 0 picks a free port.
    Tcp(String),
}

/// A connection as the accept loop tracks it (to close it at shutdown).
struct ConnEntry {
    sock: stream::Sock,
    transmitting: Arc<AtomicBool>,
}

/// A connection's entry in [`Shared::conns`], removed when the connection ends (its
/// last worker is gone).
pub(crate) struct Registration {
    sh: Arc<Shared>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.sh.conns).remove(&self.id);
    }
}

/// What every connection of a server shares.
pub(crate) struct Shared {
    exports: Vec<Arc<ExportEntry>>,
    tls: Option<TlsConfig>,
    tls_required: bool,
    workers: usize,
    limits: ServerLimits,
    stop: AtomicBool,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    admission: Arc<Admission>,
    /// Worker threads beyond each connection's first, across the server.
    extra_workers: AtomicUsize,
    /// Replies a worker that keeps a connection's read turn sends in one write, at most.
    reply_batch: usize,
    /// A worker keeps the read turn only while the last request took less than this (µs).
    keep_us: u64,
    /// What the connections' transmission did (read-turn hand-offs, reply writes).
    #[cfg(test)]
    counts: Arc<transmission::Counts>,
}

impl Shared {
    fn new(cfg: ServerConfig) -> Shared {
        Shared {
            exports: cfg
                .exports
                .iter()
                .map(|e| Arc::new(ExportEntry::new(e)))
                .collect(),
            tls: cfg.tls,
            tls_required: cfg.tls_required,
            workers: cfg.workers.clamp(1, 64),
            limits: cfg.limits,
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            admission: Arc::new(Admission::new(cfg.limits)),
            extra_workers: AtomicUsize::new(0),
            reply_batch: transmission::reply_batch(),
            keep_us: transmission::keep_us(),
            #[cfg(test)]
            counts: Arc::default(),
        }
    }
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    /// Take a server-wide slot for one more worker thread.
    pub(crate) fn take_worker_slot(&self) -> bool {
        self.extra_workers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limits.max_extra_workers).then_some(n + 1)
            })
            .is_ok()
    }
    pub(crate) fn free_worker_slot(&self) {
        self.extra_workers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A bound NBD server. [`Server::run`] serves until [`ShutdownHandle::shutdown`].
pub struct Server {
    listener: Listener,
    shared: Arc<Shared>,
}

/// Stops a running [`Server`] gracefully: no new connections, in-flight requests are
/// finished and answered, every backend is flushed, then `run` returns.
#[derive(Clone)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl ShutdownHandle {
    /// Ask the server to stop (returns at once; `run` returns when done).
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
    /// True once a shutdown was asked for.
    pub fn is_stopping(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }
}

/// Call `handle.shutdown()` on the first SIGINT or SIGTERM (after `on_signal(signo)`);
/// a second signal exits the process at once with status 130.
pub fn shutdown_on_signals(
    handle: ShutdownHandle,
    on_signal: impl Fn(i32) + Send + 'static,
) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    thread::Builder::new()
        .name("nbd-signals".into())
        .spawn(move || {
            let mut seen = 0;
            for sig in signals.forever() {
                seen += 1;
                if seen == 1 {
                    on_signal(sig);
                    handle.shutdown();
                } else {
                    std::process::exit(130);
                }
            }
        })?;
    Ok(())
}

impl Server {
    /// Validate the configuration and bind the listener.
    pub fn bind(cfg: ServerConfig, listen: &Listen) -> Result<Server, NbdError> {
        cfg.check()?;
        let listener = Listener::bind(listen, cfg.unix_access)?;
        Ok(Server {
            listener,
            shared: Arc::new(Shared::new(cfg)),
        })
    }

    /// The socket path, or the bound `IP:PORT`.
    pub fn local_addr(&self) -> String {
        self.listener.local_addr()
    }

    /// A handle to stop the server.
    pub fn handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Run `run` on a thread of its own.
    pub fn spawn(self) -> (ShutdownHandle, JoinHandle<Result<(), NbdError>>) {
        let h = self.handle();
        (h, thread::spawn(move || self.run()))
    }

    /// Accept and serve connections until shut down; then finish in-flight requests,
    /// flush every backend and return.
    pub fn run(self) -> Result<(), NbdError> {
        let sh = &self.shared;
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        let mut next_id = 0u64;
        while !sh.stop.load(Ordering::SeqCst) {
            threads.retain(|t| !t.is_finished());
            if !poll_in(self.listener.fd(), stream::TICK) {
                continue;
            }
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    if let Some(t) = start_connection(sh, sock, peer, next_id) {
                        threads.push(t);
                    }
                    next_id += 1;
                }
                // EMFILE, ECONNABORTED...: keep serving the others.
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
        self.listener.close();
        finish_connections(sh, threads);
        let mut first = None;
        for e in &sh.exports {
            if let Err(source) = e.backend.flush() {
                first.get_or_insert(NbdError::Flush {
                    export: e.name.clone(),
                    source,
                });
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Give an accepted connection a handshake slot and a thread, or close it at once
/// (too many handshakes: OpenSSH's `MaxStartups`).
fn start_connection(
    sh: &Arc<Shared>,
    sock: stream::Sock,
    peer: listener::Peer,
    id: u64,
) -> Option<JoinHandle<()>> {
    let ticket = sh.admission.start(peer)?;
    sock.tune();
    let reg = sock.try_clone().ok()?;
    let transmitting = Arc::new(AtomicBool::new(false));
    lock(&sh.conns).insert(
        id,
        ConnEntry {
            sock: reg,
            transmitting: Arc::clone(&transmitting),
        },
    );
    let reg = Registration {
        sh: Arc::clone(sh),
        id,
    };
    let sh2 = Arc::clone(sh);
    let t = thread::Builder::new()
        .name(format!("nbd-conn-{id}"))
        .spawn(move || {
            let _ = handshake::serve_conn(&sh2, sock, (ticket, reg), &transmitting);
        });
    match t {
        Ok(t) => Some(t),
        Err(_) => {
            if let Some(c) = lock(&sh.conns).remove(&id) {
                c.sock.shutdown(Shutdown::Both);
            }
            None
        }
    }
}

/// After the listener closed: drop connections still negotiating; let transmitting ones
/// finish what is in flight (their readers watch the stop flag), then cut clients that
/// stall mid-request, then those that do not read their replies.
fn finish_connections(sh: &Shared, threads: Vec<JoinHandle<()>>) {
    for c in lock(&sh.conns).values() {
        if !c.transmitting.load(Ordering::SeqCst) {
            c.sock.shutdown(Shutdown::Both);
        }
    }
    let start = Instant::now();
    let mut stage = 0;
    while threads.iter().any(|t| !t.is_finished()) || !lock(&sh.conns).is_empty() {
        let el = start.elapsed();
        if stage == 0 && el > GRACE {
            for c in lock(&sh.conns).values() {
                c.sock.shutdown(Shutdown::Read);
            }
            stage = 1;
        } else if stage == 1 && el > 2 * GRACE {
            for c in lock(&sh.conns).values() {
                c.sock.shutdown(Shutdown::Both);
            }
            stage = 2;
        }
        thread::sleep(Duration::from_millis(10));
    }
    for t in threads {
        let _ = t.join();
    }
}
