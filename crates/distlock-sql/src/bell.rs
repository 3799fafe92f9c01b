//! Doorbells: how a release wakes the next waiter where the database sends no
//! notifications (MySQL and MariaDB have no `LISTEN`). A holder keeps a named
//! server lock (`GET_LOCK`) on a connection of its own while it holds, taken
//! in the background right after its win, and gives it back right after its
//! release statement, before the release returns; a waiter that found the lock held waits on that named
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
pub struct Ringer(Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>);

/// The bell keeper's side of a [`Ringer`].
#[derive(Debug)]
pub struct Keeper {
    /// Completes (with an error) once the ringer rang or was dropped.
    pub rung: oneshot::Receiver<()>,
    /// Dropped once the bell is given back, or was never kept.
    pub done: oneshot::Sender<()>,
}

impl Ringer {
    /// A ringer, and its keeper's side.
    pub fn new() -> (Ringer, Keeper) {
        let (ring, rung) = oneshot::channel();
        let (done, given_back) = oneshot::channel();
        (
            Ringer(Mutex::new(Some((ring, given_back)))),
            Keeper { rung, done },
        )
    }

    /// Gives the bell back (once the release statement has answered), and
    /// waits at most `within` until it is: the waiter it wakes then attempts
    /// no later than this holder's own next attempt could.
    pub async fn ring(&self, within: Duration) {
        let taken = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((ring, given_back)) = taken {
            drop(ring);
            let _ = tokio::time::timeout(within, given_back).await;
        }
    }
}
