//! Who gets in: connection slots per server and per peer, and handshake slots
//! (OpenSSH's `MaxStartups`). A connection holds a [`Ticket`] from accept to close;
//! dropping it frees its slots.

use super::config::ServerLimits;
use super::listener::Peer;
use crate::util::lock;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default, Clone, Copy)]
struct PeerCount {
    handshakes: usize,
    connections: usize,
}

#[derive(Default)]
struct State {
    handshakes: usize,
    connections: usize,
    peers: HashMap<Peer, PeerCount>,
}

/// The server's slot counts.
pub(crate) struct Admission {
    limits: ServerLimits,
    state: Mutex<State>,
    freed: Condvar,
}

/// Why a connection was not admitted (said to the client in `NBD_REP_ERR_POLICY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// The server's connection limit.
    Server(usize),
    /// The peer's connection limit.
    Peer(usize),
}

impl Full {
    pub(crate) fn message(&self) -> String {
        match self {
            Full::Server(n) => {
                format!("the server has its maximum of {n} connections; try again later")
            }
            Full::Peer(n) => format!(
                "you have the maximum of {n} connections to this server; close one and retry"
            ),
        }
    }
}

impl Admission {
    pub(crate) fn new(limits: ServerLimits) -> Admission {
        Admission {
            limits,
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
        }
    }

    /// At accept: a handshake slot, or None (too many handshakes in the server or from
    /// this peer: the connection is closed at once).
    pub(crate) fn start(self: &Arc<Self>, peer: Peer) -> Option<Ticket> {
        let mut st = lock(&self.state);
        let pc = st.peers.get(&peer).copied().unwrap_or_default();
        if st.handshakes >= self.limits.max_handshakes
            || pc.handshakes >= self.limits.max_connections_per_peer
        {
            return None;
        }
        st.handshakes += 1;
        st.peers.entry(peer).or_default().handshakes += 1;
        Some(Ticket {
            adm: Arc::clone(self),
            peer,
            started: Instant::now(),
            handshaking: true,
            admitted: false,
        })
    }

    /// (handshakes, connections) now.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        let st = lock(&self.state);
        (st.handshakes, st.connections)
    }
}

/// One connection's slots.
pub(crate) struct Ticket {
    adm: Arc<Admission>,
    peer: Peer,
    started: Instant,
    handshaking: bool,
    admitted: bool,
}

impl Ticket {
    /// When the connection was accepted.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Take a connection slot, waiting up to `wait` for one to be freed (a client that
    /// reconnects at once may find its previous connection still closing).
    pub(crate) fn admit(&mut self, wait: Duration) -> Result<(), Full> {
        let adm = Arc::clone(&self.adm);
        let lim = &adm.limits;
        let until = Instant::now() + wait;
        let mut st = lock(&adm.state);
        loop {
            let pc = st.peers.get(&self.peer).copied().unwrap_or_default();
            let full = if st.connections >= lim.max_connections {
                Some(Full::Server(lim.max_connections))
            } else if pc.connections >= lim.max_connections_per_peer {
                Some(Full::Peer(lim.max_connections_per_peer))
            } else {
                None
            };
            let Some(full) = full else { break };
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(full);
            }
            st = adm
                .freed
                .wait_timeout(st, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        st.connections += 1;
        st.peers.entry(self.peer).or_default().connections += 1;
        self.admitted = true;
        Ok(())
    }

    /// The handshake is over: free the handshake slot.
    pub(crate) fn handshake_done(&mut self) {
        if !self.handshaking {
            return;
        }
        self.handshaking = false;
        let mut st = lock(&self.adm.state);
        st.handshakes = st.handshakes.saturating_sub(1);
        if let Some(pc) = st.peers.get_mut(&self.peer) {
            pc.handshakes = pc.handshakes.saturating_sub(1);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.handshake_done();
        let mut st = lock(&self.adm.state);
        if self.admitted {
            st.connections = st.connections.saturating_sub(1);
            if let Some(pc) = st.peers.get_mut(&self.peer) {
                pc.connections = pc.connections.saturating_sub(1);
            }
        }
        if st
            .peers
            .get(&self.peer)
            .is_some_and(|pc| pc.connections == 0 && pc.handshakes == 0)
        {
            st.peers.remove(&self.peer);
        }
        drop(st);
        self.adm.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adm(conns: usize, per_peer: usize, hs: usize) -> Arc<Admission> {
        Arc::new(Admission::new(ServerLimits {
            max_connections: conns,
            max_connections_per_peer: per_peer,
            max_handshakes: hs,
            ..ServerLimits::default()
        }))
    }

    #[test]
    fn handshake_slots_per_server_and_peer() {
        let a = adm(10, 2, 3);
        let (p, q) = (Peer::Uid(1), Peer::Uid(2));
        let t1 = a.start(p).unwrap();
        let _t2 = a.start(p).unwrap();
        assert!(a.start(p).is_none(), "peer's handshakes at its limit");
        let _t3 = a.start(q).unwrap();
        assert!(a.start(Peer::Uid(3)).is_none(), "server's handshakes full");
        drop(t1);
        let t4 = a.start(Peer::Uid(3));
        assert!(t4.is_some());
        assert_eq!(a.counts(), (3, 0));
    }

    #[test]
    fn connection_slots_wait_then_refuse() {
        let a = adm(2, 1, 8);
        let p = Peer::Uid(1);
        let mut t1 = a.start(p).unwrap();
        t1.admit(Duration::ZERO).unwrap();
        t1.handshake_done();
        let mut t2 = a.start(p).unwrap();
        assert_eq!(t2.admit(Duration::from_millis(20)), Err(Full::Peer(1)));
        // Freed while waiting: admitted.
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(t1);
        });
        assert_eq!(t2.admit(Duration::from_secs(10)), Ok(()));
        h.join().unwrap();
        let mut t3 = a.start(Peer::Uid(2)).unwrap();
        t3.admit(Duration::ZERO).unwrap();
        let mut t4 = a.start(Peer::Uid(3)).unwrap();
        assert_eq!(t4.admit(Duration::ZERO), Err(Full::Server(2)));
        drop((t2, t3, t4));
        assert_eq!(a.counts(), (0, 0));
        assert!(lock(&a.state).peers.is_empty());
    }
}
