//! What the semaphore and the read-write lock keep alike per name: live
//! holders that expire, a FIFO of waiters each woken when it reaches the front,
//! and a token counter that outlives them. Each primitive adds only its rule
//! for when a waiter may take something (a free slot, a compatible mode).

use super::{Attempt, Queued, clock_seed};
use crate::backend::Ownership;
use crate::{FencingToken, LockKey};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// One name's holders under `K` (a share's id, a permit's slot), each with
/// what it holds, `M` (a mode, a holder id).
#[derive(Debug)]
pub(super) struct Holders<K, M> {
    pub(super) live: BTreeMap<K, Live<M>>,
    queue: VecDeque<Queued>,
    counter: Option<u64>,
}

impl<K, M> Default for Holders<K, M> {
    fn default() -> Self {
        Holders {
            live: BTreeMap::new(),
            queue: VecDeque::new(),
            counter: None,
        }
    }
}

#[derive(Debug)]
pub(super) struct Live<M> {
    pub(super) what: M,
    pub(super) token: FencingToken,
    pub(super) expires_at: Instant,
    revoked: Arc<Notify>,
}

impl<K: Ord + Copy, M> Holders<K, M> {
    pub(super) fn expire(&mut self, now: Instant) {
        let expired: Vec<K> = (self.live.iter())
            .filter(|(_, l)| l.expires_at <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in expired {
            self.remove(k);
        }
    }

    pub(super) fn remove(&mut self, k: K) -> bool {
        let Some(live) = self.live.remove(&k) else {
            return false;
        };
        live.revoked.notify_one();
        self.wake_front();
        true
    }

    /// Tells every holder it lost (a restart without persistence).
    pub(super) fn revoke_all(&mut self) {
        for live in std::mem::take(&mut self.live).into_values() {
            live.revoked.notify_one();
        }
    }

    /// Only the first waiter is woken: FIFO, and no herd. One granted wakes
    /// the next, so a run of waiters that all fit is granted together.
    fn wake_front(&self) {
        if let Some(front) = self.queue.front() {
            front.wake.notify_one();
        }
    }

    pub(super) fn in_use(&self) -> bool {
        !self.live.is_empty() || !self.queue.is_empty()
    }

    fn first(&self, me: &Queued) -> bool {
        self.queue.front().map(|q| q.id) == Some(me.id)
    }

    /// Whether `me` may take what is free: nobody waits ahead of it.
    pub(super) fn my_turn(&self, me: &Queued) -> bool {
        self.queue.is_empty() || self.first(me)
    }

    /// Records `me`'s win under `k`, with the next token, and passes the turn.
    pub(super) fn grant(
        &mut self,
        me: &Queued,
        k: K,
        what: M,
        expires_at: Instant,
    ) -> (FencingToken, Arc<Notify>) {
        if self.first(me) {
            self.queue.pop_front();
            // What is left may be enough for the next in line too (another
            // slot, a read beside ours): it tries next.
            self.wake_front();
        }
        let counter = self.counter.get_or_insert_with(clock_seed);
        *counter += 1;
        let token = FencingToken::new(*counter);
        let revoked = Arc::new(Notify::new());
        let live = Live {
            what,
            token,
            expires_at,
            revoked: revoked.clone(),
        };
        self.live.insert(k, live);
        (token, revoked)
    }

    /// `me` cannot take anything now: queued, when `enqueue`, and told when
    /// to look again if first in line (`blocking_expiry`, the earliest expiry
    /// among the holders in its way).
    pub(super) fn blocked<T>(
        &mut self,
        me: &Queued,
        enqueue: bool,
        blocking_expiry: Option<Instant>,
    ) -> Attempt<T> {
        if enqueue && !self.queue.iter().any(|q| q.id == me.id) {
            self.queue.push_back(Queued {
                id: me.id,
                wake: me.wake.clone(),
            });
        }
        let wake_at = blocking_expiry.filter(|_| self.first(me));
        Attempt::Blocked { wake_at }
    }

    pub(super) fn leave(&mut self, id: u64) {
        if let Some(at) = self.queue.iter().position(|q| q.id == id) {
            self.queue.remove(at);
            if at == 0 {
                self.wake_front();
            }
        }
    }
}

/// Applies `f` to the holder `find` picks if it is still live.
pub(super) fn if_holder<K: Ord + Copy, M>(
    holders: Option<&mut Holders<K, M>>,
    find: impl FnOnce(&Holders<K, M>) -> Option<K>,
    f: impl FnOnce(&mut Holders<K, M>, K),
) -> Ownership {
    let Some(holders) = holders else {
        return Ownership::NotHeld;
    };
    holders.expire(Instant::now());
    match find(holders) {
        Some(k) => {
            f(holders, k);
            Ownership::Held
        }
        None => Ownership::NotHeld,
    }
}

/// The live holders of one name, each as `describe` puts it.
pub(super) fn live_now<K: Ord + Copy, M, R>(
    holders: Option<&mut Holders<K, M>>,
    describe: impl Fn(&K, &Live<M>) -> R,
) -> Vec<R> {
    let Some(holders) = holders else {
        return Vec::new();
    };
    holders.expire(Instant::now());
    holders.live.iter().map(|(k, l)| describe(k, l)).collect()
}

/// Holders and waiters of every name that starts with `prefix`, one line each
/// (a holder as `describe` puts it): what a crashed or cancelled client could
/// leave behind.
pub(super) fn residue<'a, K: Ord + Copy + 'a, M: 'a>(
    names: impl Iterator<Item = (&'a LockKey, &'a mut Holders<K, M>)>,
    prefix: &str,
    describe: impl Fn(&K, &M) -> String,
) -> Vec<String> {
    let now = Instant::now();
    let mut found = Vec::new();
    for (key, holders) in names {
        if !key.as_str().starts_with(prefix) {
            continue;
        }
        holders.expire(now);
        let live = holders.live.iter().map(|(k, l)| describe(k, &l.what));
        found.extend(live.map(|line| format!("{key}: {line}")));
        found.extend(
            holders
                .queue
                .iter()
                .map(|q| format!("{key}: waiter {}", q.id)),
        );
    }
    found
}
