//! Doorbells: how a release wakes the next waiter where the database sends no
//! notifications (MySQL and MariaDB have no `LISTEN`). A holder keeps a named
//! server lock (`GET_LOCK`) on a connection of its own while it holds, taken
//! in the background right after its win, and gives it back right after its
//! release statement; a waiter that found the lock held waits on that named
//! lock, at most until the holder's expiry, and attempts again as soon as it
//! is given back: one round trip after the release, whatever the poll's pause.
//! A waiter that finds nobody keeping the bell (the holder has not taken it
//! yet, had no free connection for it, or died) pauses and polls as before.
//! Not a stable API.

use crate::pool::BoxFuture;
use distlock_core::LockKey;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::oneshot;

/// What a waiter's wait on a bell found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    /// Its keeper gave it back: the holder released (or its session ended).
    Rang,
    /// Still kept when the wait's bound passed.
    TimedOut,
    /// Nobody keeps it: pause and poll.
    Unkept,
}

/// The bells of one lock table's names.
pub trait Doorbell: Send + Sync {
    /// Keeps `key`'s bell for its new holder, in the background, until the
    /// returned [`Ringer`] rings or is dropped.
    fn keep(&self, key: &LockKey) -> Ringer;
    /// Waits at most `bound` for `key`'s bell to be given back.
    fn wait<'a>(&'a self, key: &'a LockKey, bound: Duration) -> BoxFuture<'a, Rung>;
}

/// A holder's side of its bell: rung or dropped, the bell is given back.
#[derive(Debug)]
pub struct Ringer(Mutex<Option<oneshot::Sender<()>>>);

impl Ringer {
    /// A ringer, and what the bell's keeper awaits: it completes (with an
    /// error) once the ringer rang or was dropped.
    pub fn new() -> (Ringer, oneshot::Receiver<()>) {
        let (ring, rung) = oneshot::channel();
        (Ringer(Mutex::new(Some(ring))), rung)
    }

    /// Gives the bell back (once the release statement has answered).
    pub fn ring(&self) {
        drop(self.0.lock().unwrap_or_else(PoisonError::into_inner).take());
    }
}
