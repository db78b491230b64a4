//! Graceful stop on SIGINT, SIGTERM and SIGHUP.
//!
//! The signals are blocked in the calling thread (and so in every thread started after
//! it, which inherit the mask) and received synchronously by one thread with
//! `sigwait`: no async-signal-safety concerns, and no request thread is ever interrupted
//! in the middle of an array write. On a signal that thread unmounts; [`crate::Mounted::run`]
//! then returns after flushing and marking the array clean. If the mount point stays busy
//! (the file is attached to a loop device or open) for a short grace, nothing happens
//! except the report, and the next signal tries again.

use crate::{FuseError, StopHandle};
use std::io;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The blocked stop signals, from [`block_stop_signals`].
pub struct StopSignals {
    set: libc::sigset_t,
}

/// What happened on a received signal.
#[derive(Debug)]
pub struct StopEvent {
    /// The signal number (`libc::SIGINT`, ...).
    pub signal: i32,
    /// Its name (`SIGINT`, `SIGTERM`, `SIGHUP`).
    pub name: &'static str,
    /// The unmount: `Ok` means the mount is ending; `Err(FuseError::Busy)` means it
    /// keeps serving.
    pub result: Result<(), FuseError>,
}

const SIGNALS: [(i32, &str); 3] = [
    (libc::SIGINT, "SIGINT"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGHUP, "SIGHUP"),
];

/// Block SIGINT, SIGTERM and SIGHUP in the calling thread. Call it before starting any
/// thread (in particular before [`crate::mount`] and [`crate::Mounted::run`]) so that
/// no other thread receives them.
pub fn block_stop_signals() -> Result<StopSignals, FuseError> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before any other use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable sigset_t.
    if unsafe { libc::sigemptyset(&mut set) } != 0 {
        return Err(os_err("initialising a signal set"));
    }
    for (sig, _) in SIGNALS {
        // SAFETY: `set` was initialised by sigemptyset; `sig` is a valid signal number.
        if unsafe { libc::sigaddset(&mut set, sig) } != 0 {
            return Err(os_err("adding to a signal set"));
        }
    }
    // SAFETY: `set` is initialised; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(FuseError::Os {
            what: "blocking SIGINT/SIGTERM/SIGHUP",
            source: io::Error::from_raw_os_error(rc),
        });
    }
    Ok(StopSignals { set })
}

/// The signal thread started by [`stop_on_signals`].
///
/// The mount ends as soon as a signal's unmount takes effect, which is before the thread
/// has reported it; [`SignalWatcher::settle`] waits for that report, and only when a
/// signal's stop is in flight (after an unmount from outside it returns at once).
pub struct SignalWatcher {
    in_flight: Arc<InFlight>,
    thread: JoinHandle<()>,
}

/// How many signals are being handled (received, report not yet made).
#[derive(Default)]
struct InFlight {
    count: Mutex<u32>,
    reported: Condvar,
}

impl InFlight {
    fn begin(&self) {
        *self.count.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }

    fn end(&self) {
        let mut n = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
        self.reported.notify_all();
    }
}

/// How long a signal's stop keeps retrying an unmount that fails with busy: long enough
/// for a reference that outlives a `close` by moments (see
/// [`StopHandle::request_stop_within`]), short enough that an admin whose file is really
/// in use hears so at once. Shorter than [`SETTLE_LIMIT`], so the report is always made.
const BUSY_GRACE: Duration = Duration::from_secs(2);

/// The longest [`SignalWatcher::settle`] waits for a report: an unmount request is one
/// syscall, so this bounds a wedged kernel, not normal operation.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);
const _: () = assert!(BUSY_GRACE.as_millis() < SETTLE_LIMIT.as_millis());

impl SignalWatcher {
    /// Wait until every signal received so far has been reported by the callback
    /// (bounded by a few seconds). Returns at once when no signal is being handled.
    pub fn settle(&self) {
        let n = self
            .in_flight
            .count
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let _ = self
            .in_flight
            .reported
            .wait_timeout_while(n, SETTLE_LIMIT, |n| *n > 0);
    }

    /// Whether the thread has ended (after a successful stop).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }
}

/// Start the thread that waits for the blocked signals and stops the mount through
/// `handle`, calling `on_event` for each signal received. The thread ends after a
/// successful stop.
pub fn stop_on_signals(
    signals: StopSignals,
    handle: StopHandle,
    mut on_event: impl FnMut(&StopEvent) + Send + 'static,
) -> Result<SignalWatcher, FuseError> {
    let set = signals.set;
    let in_flight = Arc::new(InFlight::default());
    let flight = Arc::clone(&in_flight);
    let thread = std::thread::Builder::new()
        .name("raidkit-signals".into())
        .spawn(move || loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is an initialised signal set whose signals are blocked in
            // this thread (inherited mask); `sig` is a valid out-pointer.
            let rc = unsafe { libc::sigwait(&set, &mut sig) };
            if rc != 0 {
                continue;
            }
            let name = SIGNALS
                .iter()
                .find(|(s, _)| *s == sig)
                .map_or("signal", |(_, n)| *n);
            // Counted before the unmount, so a mount that ends because of it sees it.
            flight.begin();
            let result = handle.request_stop_within(BUSY_GRACE);
            let done = result.is_ok();
            on_event(&StopEvent {
                signal: sig,
                name,
                result,
            });
            flight.end();
            if done {
                return;
            }
        })
        .map_err(|e| FuseError::Os {
            what: "starting the signal thread",
            source: e,
        })?;
    Ok(SignalWatcher { in_flight, thread })
}

fn os_err(what: &'static str) -> FuseError {
    FuseError::Os {
        what,
        source: io::Error::last_os_error(),
    }
}
