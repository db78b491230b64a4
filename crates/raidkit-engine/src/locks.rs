//! Taking the engine's locks.

use std::sync::{Mutex, MutexGuard};

/// Lock a mutex.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
