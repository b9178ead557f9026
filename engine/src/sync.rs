//! Locks that survive a panicked holder: every mutex in the engine guards state that is whole after each
//! write (a map, a cursor, a clock), so the data a panicking thread left is still the last good state, and
//! one failed task must not take the engine down with it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking the data over from a holder that panicked.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
