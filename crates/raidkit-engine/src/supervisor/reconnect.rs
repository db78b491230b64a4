//! Network members come back by themselves: a failed network member is reconnected with
//! back-off, and when the same member (array UUID, role, and a history that did not move
//! on without us) answers again, it is re-added with a catch-up of only the bitmap's dirty
//! regions. A member that changed while it was away (split brain, or newer than us), is
//! not that member any more (a blank disk, another array's), or holds the only copy of
//! its data without being the last to leave (or older than the array's record of it), is
//! refused once, before any catch-up starts, with an event saying what happened (and
//! which side to keep); it is then left alone until the administrator re-adds or
//! replaces it.
//!
//! A failed member's old connection is always dropped first: writes it acknowledged but
//! had not made durable may be gone, so only a new connection and a catch-up make it whole.

use super::{Event, Supervisor};
use crate::array::ArrayEvent;
use crate::dev::BlockDev;
use crate::error::EngineError;
use crate::locks::lock;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first retry after a failure; each failed attempt doubles the wait.
pub const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest wait between attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(30);
/// How often the reconnector looks at the members.
const TICK: Duration = Duration::from_millis(200);

/// A failed network member the reconnector is bringing back.
struct Away {
    next_try: Instant,
    backoff: Duration,
    attempts: u64,
    /// Its old connection was dropped.
    dropped: bool,
    /// It came back changed: left alone until the administrator decides.
    refused: bool,
}

impl Away {
    fn new() -> Away {
        Away {
            next_try: Instant::now() + FIRST_RETRY,
            backoff: FIRST_RETRY,
            attempts: 0,
            dropped: false,
            refused: false,
        }
    }

    fn retry_later(&mut self) {
        self.backoff = (self.backoff * 2).min(MAX_RETRY);
        self.next_try = Instant::now() + self.backoff;
    }
}

/// A device's identity for the reconnector's table (the same `Arc` for as long as it is
/// in its slot).
fn key(dev: &Arc<dyn BlockDev>) -> usize {
    Arc::as_ptr(dev).cast::<()>() as usize
}

impl Supervisor {
    /// The `member_disconnected` event of a failure, if the failed member is a network
    /// member.
    pub(super) fn network_member_failed(&self, e: &ArrayEvent) -> Option<Event> {
        let ArrayEvent::MemberFailed {
            role,
            device,
            reason,
        } = e
        else {
            return None;
        };
        let cur = self.cur();
        let slots = cur.slots();
        let m = slots.get(*role)?.as_ref()?;
        // Its connection goes at once (requests still in flight on it fail now): only a
        // new connection and a catch-up make it whole again.
        m.dev
            .network()?
            .disconnect("failed by the array; a new connection and a catch-up follow");
        Some(Event::MemberDisconnected {
            role: *role,
            device: device.clone(),
            reason: reason.clone(),
        })
    }

    /// Start the reconnector thread (once; it ends with the supervisor or at shutdown).
    pub(super) fn start_reconnector(self: &Arc<Self>) {
        if !self.cur().is_writable() || self.reconnecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        let started = std::thread::Builder::new()
            .name(format!("raidkit-reconnect-{}", self.name))
            .spawn(move || {
                let mut away: HashMap<usize, Away> = HashMap::new();
                loop {
                    std::thread::sleep(TICK);
                    let Some(s) = weak.upgrade() else { break };
                    if s.shutting_down.load(Ordering::Acquire) {
                        break;
                    }
                    s.reconnect_pass(&mut away);
                }
            });
        if started.is_err() {
            self.reconnecting.store(false, Ordering::Release);
        }
    }

    /// One look at every network member that is away: a failed one (drop its old
    /// connection, try to connect when its back-off has passed, re-add it once
    /// connected), one not reached at assembly (connect, then re-add it in the role its
    /// superblock names), and one kept in its slot whose link is down (the array cannot
    /// run without it: connect, and IO resumes).
    fn reconnect_pass(self: &Arc<Self>, away: &mut HashMap<usize, Away>) {
        let cur = self.cur();
        let mut todo: Vec<(Option<usize>, Arc<dyn BlockDev>, Kind)> = Vec::new();
        for (r, m) in cur.slots().iter().enumerate() {
            let Some(m) = m else { continue };
            let Some(net) = m.dev.network() else { continue };
            if m.is_failed() {
                todo.push((Some(r), Arc::clone(&m.dev), Kind::Failed));
            } else if net.link_state() == crate::dev::nbd::LinkState::Disconnected {
                todo.push((Some(r), Arc::clone(&m.dev), Kind::Kept));
            }
        }
        for d in cur.away_members() {
            todo.push((None, d, Kind::Unreached));
        }
        drop(cur);
        // Forget members no longer away (re-added, removed, reconnected).
        away.retain(|k, _| todo.iter().any(|(_, d, _)| key(d) == *k));
        for (role, dev, kind) in todo {
            let a = away.entry(key(&dev)).or_insert_with(|| {
                let mut a = Away::new();
                // Nothing to drop: never connected, or kept (its link is down already).
                a.dropped = kind != Kind::Failed;
                if let (Kind::Kept, Some(role)) = (kind, role) {
                    self.emit(Event::MemberDisconnected {
                        role,
                        device: dev.name().to_string(),
                        reason: format!(
                            "the array cannot run without it, so it is kept: IO it is needed for fails until it reconnects ({})",
                            dev.network()
                                .and_then(|n| n.link_status().error)
                                .unwrap_or_default()
                        ),
                    });
                }
                a
            });
            self.bring_back(role, &dev, kind, a);
        }
    }

    fn bring_back(
        self: &Arc<Self>,
        role: Option<usize>,
        dev: &Arc<dyn BlockDev>,
        kind: Kind,
        a: &mut Away,
    ) {
        let Some(net) = dev.network() else { return };
        if !a.dropped {
            net.disconnect("failed by the array; a new connection and a catch-up follow");
            a.dropped = true;
        }
        if a.refused || Instant::now() < a.next_try {
            return;
        }
        if kind != Kind::Kept && lock(&self.job).as_ref().is_some_and(|j| j.running()) {
            // A job runs (another member's catch-up, a scrub): try again after it.
            return;
        }
        a.attempts += 1;
        if net.reconnect().is_err() {
            a.retry_later();
            return;
        }
        // Not reached at assembly: its role is the one its superblock names, if it is
        // still this array's member (checked again by the re-add).
        let role = match role {
            Some(r) => r,
            None => match self.cur().returning_member(dev.as_ref(), false) {
                Ok(back) => back.role,
                Err(e @ (EngineError::Diverged { .. } | EngineError::Invalid(_))) => {
                    return self.refuse(None, dev, a, e)
                }
                Err(_) => {
                    // Its superblock could not be read: try again later.
                    net.disconnect("its superblock could not be read");
                    a.retry_later();
                    return;
                }
            },
        };
        self.emit(Event::MemberReconnected {
            role,
            device: dev.name().to_string(),
            attempts: a.attempts,
        });
        if kind == Kind::Kept {
            // Its slot was kept: IO resumes on it only if it is still what the array
            // last wrote to it.
            if let Err(e) = self.cur().check_kept_member(dev.as_ref(), role) {
                self.refuse(Some(role), dev, a, e);
            }
            return;
        }
        match self.re_add_dev(Arc::clone(dev), false) {
            Ok(()) => self.cur().no_longer_away(dev),
            // Changed while away, or not this member any more (another array's disk, a
            // blank one, its role taken): the administrator decides; not retried.
            Err(super::SupervisorError::Engine(
                e @ (EngineError::Diverged { .. } | EngineError::Invalid(_)),
            )) => self.refuse(Some(role), dev, a, e),
            Err(_) => {
                // Busy, stopping, or unreadable: drop the connection and try again later.
                net.disconnect("the re-add did not start");
                a.retry_later();
            }
        }
    }

    /// `dev` came back changed, or is not this array's member: left alone (disconnected)
    /// until the administrator decides, with an event saying why.
    fn refuse(&self, role: Option<usize>, dev: &Arc<dyn BlockDev>, a: &mut Away, e: EngineError) {
        a.refused = true;
        if let Some(net) = dev.network() {
            net.disconnect("not re-added");
        }
        let why = match e {
            EngineError::Diverged { why, .. } => why,
            other => other.to_string(),
        };
        self.emit(Event::MemberRefused {
            role,
            device: dev.name().to_string(),
            why,
        });
    }
}

/// Why a network member is away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Failed by the array: re-added once it answers.
    Failed,
    /// Not reached at assembly: re-added once it answers.
    Unreached,
    /// Kept in its slot (the array cannot run without it), its link down.
    Kept,
}
