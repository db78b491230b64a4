//! The in-flight budget of one connection: requests and payload bytes read from the
//! client and not yet answered on the socket. The reader takes budget before it
//! accepts a request and blocks when there is none, so a client that does not read its
//! replies stops being read (backpressure) instead of growing the server's memory.

use crate::util::lock;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// What one request holds until its reply has been written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    pub(crate) requests: usize,
    pub(crate) bytes: u64,
}

impl Cost {
    /// One request with `bytes` of payload (read data or write data).
    pub(crate) fn request(bytes: u64) -> Cost {
        Cost { requests: 1, bytes }
    }
    pub(crate) fn add(&mut self, o: Cost) {
        self.requests += o.requests;
        self.bytes += o.bytes;
    }
}

#[derive(Default)]
struct State {
    held: Cost,
    /// The reader waits for budget to be released.
    waiting: bool,
}

pub(crate) struct Flight {
    max_requests: usize,
    max_bytes: u64,
    state: Mutex<State>,
    released: Condvar,
}

impl Flight {
    pub(crate) fn new(max_requests: usize, max_bytes: u64) -> Flight {
        Flight {
            max_requests: max_requests.max(1),
            max_bytes: max_bytes.max(1),
            state: Mutex::new(State::default()),
            released: Condvar::new(),
        }
    }

    fn fits(&self, held: Cost, c: Cost) -> bool {
        let requests_ok = held.requests + c.requests <= self.max_requests;
        // A request larger than the whole budget is served alone.
        let bytes_ok = held.bytes == 0 || held.bytes + c.bytes <= self.max_bytes;
        requests_ok && bytes_ok
    }

    /// Take `c`, waiting while the budget is exhausted. `give_up` is asked every 100 ms
    /// (a dead connection); true: return false without taking anything. `before_wait`
    /// runs once, without the budget's lock, before the first wait (the caller's
    /// deferred replies hold budget: it sends them).
    pub(crate) fn acquire(
        &self,
        c: Cost,
        give_up: impl Fn() -> bool,
        before_wait: impl FnOnce(),
    ) -> bool {
        let mut st = lock(&self.state);
        if !self.fits(st.held, c) {
            drop(st);
            before_wait();
            st = lock(&self.state);
        }
        while !self.fits(st.held, c) {
            if give_up() {
                st.waiting = false;
                return false;
            }
            st.waiting = true;
            st = self
                .released
                .wait_timeout(st, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        st.waiting = false;
        st.held.add(c);
        true
    }

    /// Give back what a written (or abandoned) reply held.
    pub(crate) fn release(&self, c: Cost) {
        if c == Cost::default() {
            return;
        }
        let mut st = lock(&self.state);
        debug_assert!(st.held.requests >= c.requests && st.held.bytes >= c.bytes);
        st.held.requests = st.held.requests.saturating_sub(c.requests);
        st.held.bytes = st.held.bytes.saturating_sub(c.bytes);
        // Only the reader ever waits; a notify is a system call even without waiters.
        if st.waiting {
            self.released.notify_one();
        }
    }

    /// What is held now.
    pub(crate) fn held(&self) -> Cost {
        lock(&self.state).held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn budget_blocks_until_released() {
        let f = Arc::new(Flight::new(2, 1000));
        assert!(f.acquire(Cost::request(600), || false, || ()));
        assert!(
            !f.acquire(Cost::request(600), || true, || ()),
            "bytes exhausted"
        );
        assert!(f.acquire(Cost::request(400), || false, || ()));
        assert!(
            !f.acquire(Cost::request(0), || true, || ()),
            "requests exhausted"
        );
        let f2 = Arc::clone(&f);
        let t = std::thread::spawn(move || f2.acquire(Cost::request(1000), || false, || ()));
        std::thread::sleep(Duration::from_millis(30));
        f.release(Cost::request(600));
        assert!(!t.is_finished(), "400 bytes still held");
        f.release(Cost::request(400));
        assert!(t.join().unwrap());
        assert_eq!(f.held(), Cost::request(1000));
        f.release(Cost::request(1000));
        // Larger than the whole budget: served alone.
        assert!(f.acquire(Cost::request(5000), || false, || ()));
        assert!(!f.acquire(Cost::request(1), || true, || ()));
    }
}
