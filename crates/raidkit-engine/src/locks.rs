//! Taking the engine's locks. A poisoned lock means another thread panicked while it
//! changed what the lock guards, which may now be half-updated: that is a bug, and the
//! engine stops (panics, naming where) rather than carry on with that state.

use std::sync::{
    Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError,
};

#[cold]
#[track_caller]
fn poisoned() -> ! {
    panic!(
        "raidkit engine: a lock is poisoned (another thread panicked while holding it, so \
         what it guards may be half-updated); stopping instead of going on with it"
    )
}

/// Lock a mutex.
#[track_caller]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|_| poisoned())
}

/// Lock a reader-writer lock for reading.
#[track_caller]
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|_| poisoned())
}

/// Lock a reader-writer lock for writing.
#[track_caller]
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|_| poisoned())
}

/// Lock a mutex if it is free now (None if another thread holds it).
#[track_caller]
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::WouldBlock) => None,
        Err(TryLockError::Poisoned(_)) => poisoned(),
    }
}

/// The value of a mutex no one holds any more.
#[track_caller]
pub(crate) fn into_inner<T>(m: Mutex<T>) -> T {
    m.into_inner().unwrap_or_else(|_| poisoned())
}

/// Wait on a condition variable.
#[track_caller]
pub(crate) fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(|_| poisoned())
}

/// Wait on a condition variable for at most `d`.
#[track_caller]
pub(crate) fn wait_timeout<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    d: std::time::Duration,
) -> MutexGuard<'a, T> {
    cv.wait_timeout(guard, d)
        .map(|(g, _)| g)
        .unwrap_or_else(|_| poisoned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_stops_instead_of_being_used() {
        let m = Arc::new(Mutex::new(0u32));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = lock(&m2);
            panic!("while holding it");
        })
        .join();
        let r = std::panic::catch_unwind(|| *lock(&m));
        let msg = r.unwrap_err();
        let msg = msg
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| msg.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        assert!(msg.contains("lock is poisoned"), "{msg}");
        let l = RwLock::new(1u8);
        assert_eq!(*read(&l), 1);
        *write(&l) = 2;
        assert_eq!(*read(&l), 2);
    }
}
