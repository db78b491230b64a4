//! Small helpers shared by the server and the client.

use std::io;
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Lock a mutex. A poisoned lock means a thread panicked while holding it, which is a
/// bug; the data it protects here (queues, counters) stays consistent at every step, so
/// carrying on is safe.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn poll_one(fd: RawFd, events: libc::c_short, timeout: Duration) -> bool {
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is a valid, initialised pollfd that lives across the call; we pass
        // a count of exactly one.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r > 0 {
            return true;
        }
        if r == 0 {
            return false;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // Let the following read or write report the problem.
            return true;
        }
    }
}

/// Wait until `fd` is readable (or hung up, or in error). False on timeout.
pub(crate) fn poll_in(fd: RawFd, timeout: Duration) -> bool {
    poll_one(fd, libc::POLLIN, timeout)
}

/// Wait until `fd` is writable (or hung up, or in error). False on timeout.
pub(crate) fn poll_out(fd: RawFd, timeout: Duration) -> bool {
    poll_one(fd, libc::POLLOUT, timeout)
}

/// Read and discard `n` bytes.
pub(crate) fn drain(s: &mut dyn io::Read, mut n: u64) -> io::Result<()> {
    let mut buf = [0u8; 8192];
    while n > 0 {
        let k = n.min(buf.len() as u64) as usize;
        s.read_exact(&mut buf[..k])?;
        n -= k as u64;
    }
    Ok(())
}
