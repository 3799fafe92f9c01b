//! Noticing that a server restarted or failed over, and telling the leases held
//! on it at once rather than at their next renewal.
//!
//! Invariant: every lease held through a client is registered with the `run_id`
//! of the connection its acquire ran on. Whenever a connection to the server is
//! made (the command connection with a new `run_id`, or the subscriber's, which
//! is kept up while leases are held and sees a dead server at once because it
//! always reads), the current `run_id` is read and every lease registered under
//! another one (or an unknown one) is checked by its owner value right away:
//! gone or someone else's, it is lost. A lease is a lock key holding the owner
//! value, or (a semaphore permit, a read-write lock share) the owner value as
//! a member of its primitive's expiry set; both are checked the same way. A
//! lease that is still there (the server kept its data) is re-registered under
//! the new `run_id`, so a later blip costs one `PING` and no key reads.
//!
//! The restart guard's client half lives here too: the marker key it names,
//! what an acquire passes it, and the ttl it allows. The server half, which
//! decides, is `restart_guard.lua`, prepended to the acquire scripts of the
//! lock, the semaphore and the read-write lock.

use crate::connection::{Connection, Link, RunId};
use crate::error::CommandError;
use crate::keys::guard_marker;
use distlock_core::toolkit::Backoff;
use distlock_core::{LockError, LossReason};
use redis::ScriptInvocation;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

mod reads;

/// The restart guard of a namespace: a server that lost its lock state grants no
/// lock, permit or share under it until `ms` after it came back, as the marker
/// key records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RestartGuard {
    pub marker: String,
    pub ms: u64,
}

impl RestartGuard {
    pub fn new(namespace: &str, guard: Duration) -> Self {
        RestartGuard {
            marker: guard_marker(namespace),
            ms: u64::try_from(guard.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Appends what the guard's script half needs to an acquire script call,
    /// after its own keys and arguments: the marker, the guard, and the
    /// `run_id` of the connection it goes out on (a marker written by another
    /// server process means this one may not have what it granted).
    pub fn pass(guard: Option<&Self>, invocation: &mut ScriptInvocation<'_>, run_id: &RunId) {
        if let Some(guard) = guard {
            invocation.key(&guard.marker);
        }
        if let Some((ms, run_id)) = Self::args(guard, run_id) {
            invocation.arg(ms).arg(run_id);
        }
    }

    /// The guard's arguments, after the script's own: the guard in ms and
    /// the `run_id` of the connection the call goes out on. Its key, the
    /// marker, follows the script's own keys.
    pub fn args<'a>(guard: Option<&Self>, run_id: &'a RunId) -> Option<(u64, &'a str)> {
        guard.map(|guard| (guard.ms, run_id.as_deref().unwrap_or("")))
    }

    /// Refuses a ttl longer than the guard: such a lease could still be believed
    /// held when a restarted server starts granting the lock again.
    pub fn check(guard: Option<&Self>, ttl: Duration) -> Result<(), LockError> {
        match guard {
            Some(guard) if ttl.as_millis() > u128::from(guard.ms) => {
                Err(LockError::invalid_options(format!(
                    "ttl {ttl:?} is longer than the restart guard ({} ms): after a restart \
                     another client could get the lock while this lease is still believed \
                     held; use a shorter ttl or raise restart_guard to the longest ttl in use",
                    guard.ms
                )))
            }
            _ => Ok(()),
        }
    }
}

/// Where a lost lease is reported: the lease's channel and the tag it gave (the
/// node index for Redlock).
pub(crate) type LossSender = (mpsc::UnboundedSender<usize>, usize);

/// Where a lease lives on the server, as the restart check reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// A string key holding the owner value: a lock (plain, fair, a Redlock
    /// node's).
    Key(Arc<str>),
    /// The owner value as a member of this sorted set: a semaphore permit or a
    /// read-write lock share, in its primitive's expiry set.
    Member(Arc<str>),
}

struct Entry {
    place: Place,
    owner: String,
    run_id: RunId,
    /// Taken when the loss is reported, so it is reported once.
    report: Option<LossSender>,
}

#[derive(Default)]
struct Leases {
    next_id: u64,
    entries: HashMap<u64, Entry>,
}

type Shared = Arc<Mutex<Leases>>;

fn lock(leases: &Mutex<Leases>) -> MutexGuard<'_, Leases> {
    leases.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Pacing of the check while the server does not answer yet.
const RETRY_FIRST: Duration = Duration::from_millis(10);
const RETRY_CAP: Duration = Duration::from_millis(100);

/// The restart check of one client on one server.
pub(crate) struct Restarts {
    leases: Shared,
    nudge: mpsc::UnboundedSender<()>,
    run_ids: watch::Receiver<RunId>,
}

/// One registered lease; dropping it unregisters.
pub(crate) struct Watch {
    leases: Shared,
    id: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        lock(&self.leases).entries.remove(&self.id);
    }
}

impl Restarts {
    /// Starts the check task; it ends when this value is dropped. `connects`
    /// counts the subscriber's connections.
    pub fn start(
        connection: Arc<Connection>,
        connects: watch::Receiver<u64>,
        endpoint: Arc<str>,
        budget: Duration,
    ) -> Self {
        let leases = Shared::default();
        let (nudge, nudges) = mpsc::unbounded_channel();
        let run_ids = connection.run_ids();
        let task = Task {
            connection,
            endpoint,
            budget,
            leases: leases.clone(),
            nudges,
            connects,
            run_ids: run_ids.clone(),
        };
        tokio::spawn(task.run());
        Restarts {
            leases,
            nudge,
            run_ids,
        }
    }

    /// Registers a lease whose acquire ran on a server with `run_id`; its loss is
    /// sent to `report`.
    pub fn watch(&self, place: &Place, owner: &str, run_id: RunId, report: LossSender) -> Watch {
        let id = {
            let mut leases = lock(&self.leases);
            leases.next_id += 1;
            let id = leases.next_id;
            let entry = Entry {
                place: place.clone(),
                owner: owner.to_owned(),
                run_id: run_id.clone(),
                report: Some(report),
            };
            leases.entries.insert(id, entry);
            id
        };
        // The server may have changed between the acquire's reply and now.
        if *self.run_ids.borrow() != run_id {
            let _ = self.nudge.send(());
        }
        Watch {
            leases: self.leases.clone(),
            id,
        }
    }
}

/// Ends when fewer than `needed` of the servers that granted a lease (each
/// reporting its own tag through `lost`, kept registered by `watches`) still
/// hold it: 1 of 1 for one server, a majority for Redlock.
pub(crate) async fn wait_for_loss<W>(
    watches: Vec<W>,
    mut lost: mpsc::UnboundedReceiver<usize>,
    needed: usize,
) -> LossReason {
    let granted = watches.len();
    let mut gone = std::collections::HashSet::new();
    while let Some(tag) = lost.recv().await {
        gone.insert(tag);
        if granted - gone.len() < needed {
            return LossReason::Revoked;
        }
    }
    drop(watches);
    std::future::pending().await
}

struct Task {
    connection: Arc<Connection>,
    endpoint: Arc<str>,
    budget: Duration,
    leases: Shared,
    nudges: mpsc::UnboundedReceiver<()>,
    connects: watch::Receiver<u64>,
    run_ids: watch::Receiver<RunId>,
}

impl Task {
    async fn run(mut self) {
        let mut subscriber_alive = true;
        loop {
            tokio::select! {
                nudge = self.nudges.recv() => if nudge.is_none() { return },
                changed = self.connects.changed(), if subscriber_alive => {
                    subscriber_alive = changed.is_ok();
                }
                changed = self.run_ids.changed() => if changed.is_err() { return },
            }
            self.check_until_done().await;
        }
    }

    /// Checks until one check went through, no lease is left to check, or the
    /// server refuses the check (an ACL without `PING`, `MGET` or `ZMSCORE`, a
    /// server without `ZMSCORE`: the renewals still notice, at their own pace).
    async fn check_until_done(&mut self) {
        let mut retry = Backoff::new(RETRY_FIRST, RETRY_CAP);
        while !lock(&self.leases).entries.is_empty() {
            match self.check().await {
                Ok(()) => return,
                Err(e) if e.refused() => {
                    tracing::warn!(endpoint = %self.endpoint, error = %e, "the restart check was refused; held leases lost by a restart are noticed at their next renewal");
                    return;
                }
                Err(e) => {
                    tracing::debug!(endpoint = %self.endpoint, error = %e, "restart check failed; retrying");
                    tokio::time::sleep(retry.next_delay()).await;
                }
            }
        }
    }

    /// Reads the server's `run_id` (a `PING`, plus `INFO server` when it needs a
    /// new connection), then every lease acquired elsewhere ([`reads`]).
    async fn check(&self) -> Result<(), CommandError> {
        let ping = |link: Link| async move {
            let mut conn = link.conn;
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            Ok(())
        };
        let ((), current) = self.connection.call_linked(self.budget, ping).await?;
        let suspects: Vec<(u64, Place, String)> = lock(&self.leases)
            .entries
            .iter()
            .filter(|(_, e)| e.report.is_some() && (e.run_id.is_none() || e.run_id != current))
            .map(|(id, e)| (*id, e.place.clone(), e.owner.clone()))
            .collect();
        let reads = reads::plan(suspects);
        if reads.is_empty() {
            return Ok(());
        }
        let read = |link: Link| reads::send_all(link.conn, reads.clone());
        let (answers, run_id) = self.connection.call_linked(self.budget, read).await?;
        let mut leases = lock(&self.leases);
        for (id, held) in answers {
            let Some(entry) = leases.entries.get_mut(&id) else {
                continue;
            };
            if held {
                entry.run_id.clone_from(&run_id);
            } else if let Some((report, tag)) = entry.report.take() {
                tracing::debug!(endpoint = %self.endpoint, place = ?entry.place, "the server lost a held lease (restart or failover)");
                let _ = report.send(tag);
            }
        }
        Ok(())
    }
}
