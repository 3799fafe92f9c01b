//! Noticing that a server restarted or failed over, and telling the leases held
//! on it at once rather than at their next renewal.
//!
//! Invariant: every lease held through a client is registered with the `run_id`
//! of the connection its acquire ran on. Whenever a connection to the server is
//! made (the command connection with a new `run_id`, or the subscriber's, which
//! is kept up while leases are held and sees a dead server at once because it
//! always reads), the current `run_id` is read and every lease registered under
//! another one (or an unknown one) is checked by its owner value right away:
//! gone or someone else's, it is lost. A lease that is still there (the server
//! kept its data) is re-registered under the new `run_id`, so a later blip
//! costs one `PING` and no key reads.
//!
//! The restart guard's client half lives here too: the marker key it names and
//! the ttl it allows. The server half, which decides, is in the acquire script.

use crate::connection::{Connection, Link, RunId};
use crate::error::CommandError;
use crate::keys::guard_marker;
use distlock_core::backend::LossSignal;
use distlock_core::toolkit::Backoff;
use distlock_core::{LockError, LossReason};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The restart guard of a namespace: a server that lost its lock state grants no
/// lock under it until `ms` after it came back, as the marker key records.
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

struct Entry {
    lock: String,
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

/// Keys per `MGET` when many leases must be checked at once.
const CHUNK: usize = 500;
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
    pub fn watch(&self, lock_key: &str, owner: &str, run_id: RunId, report: LossSender) -> Watch {
        let id = {
            let mut leases = lock(&self.leases);
            leases.next_id += 1;
            let id = leases.next_id;
            let entry = Entry {
                lock: lock_key.to_owned(),
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

/// Fires when fewer than `needed` of the servers that granted a lease (each
/// reporting its own tag through `lost`, kept registered by `watches`) still
/// hold it: 1 of 1 for one server, a majority for Redlock.
pub(crate) fn loss_signal<W: Send + 'static>(
    watches: Vec<W>,
    mut lost: mpsc::UnboundedReceiver<usize>,
    needed: usize,
) -> LossSignal {
    Box::pin(async move {
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
    })
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
    /// server refuses the check (an ACL without `PING` or `GET`: the renewals
    /// still notice, at their own pace).
    async fn check_until_done(&mut self) {
        let mut retry = Backoff::new(RETRY_FIRST, RETRY_CAP);
        while !lock(&self.leases).entries.is_empty() {
            match self.check().await {
                Ok(()) => return,
                Err(e) if e.forbidden() => {
                    tracing::warn!(endpoint = %self.endpoint, error = %e, "the restart check was refused; held locks lost by a restart are noticed at their next renewal");
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
    /// new connection), then the lock key of every lease acquired elsewhere.
    async fn check(&self) -> Result<(), CommandError> {
        let ping = |link: Link| async move {
            let mut conn = link.conn;
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            Ok(())
        };
        let ((), current) = self.connection.call_linked(self.budget, ping).await?;
        let suspects: Vec<(u64, String, String)> = lock(&self.leases)
            .entries
            .iter()
            .filter(|(_, e)| e.report.is_some() && (e.run_id.is_none() || e.run_id != current))
            .map(|(id, e)| (*id, e.lock.clone(), e.owner.clone()))
            .collect();
        for chunk in suspects.chunks(CHUNK) {
            // One `MGET`: a cluster connection splits it by slot and puts the
            // answers back in order, where a pipeline of `GET`s would be refused
            // for crossing slots.
            let mut mget = redis::cmd("MGET");
            for (_, lock_key, _) in chunk {
                mget.arg(lock_key);
            }
            let read = |link: Link| {
                let mget = mget.clone();
                async move {
                    let mut conn = link.conn;
                    let owners: Vec<Option<String>> = mget.query_async(&mut conn).await?;
                    Ok(owners)
                }
            };
            let (owners, run_id) = self.connection.call_linked(self.budget, read).await?;
            let mut leases = lock(&self.leases);
            for ((id, _, owner), found) in chunk.iter().zip(owners) {
                let Some(entry) = leases.entries.get_mut(id) else {
                    continue;
                };
                if found.as_deref() == Some(owner.as_str()) {
                    entry.run_id.clone_from(&run_id);
                } else if let Some((report, tag)) = entry.report.take() {
                    tracing::debug!(endpoint = %self.endpoint, key = %entry.lock, "the server lost a held lock (restart or failover)");
                    let _ = report.send(tag);
                }
            }
        }
        Ok(())
    }
}
