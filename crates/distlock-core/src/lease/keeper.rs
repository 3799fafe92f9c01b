//! Watchdogs started late: most leases of a busy client end within
//! milliseconds, long before anything is due that a watchdog would do, so a
//! lease's watchdog task is spawned only once the lease has lived for
//! [`GRACE`] (up to twice that). A lease released sooner never has one.
//!
//! Spawning a task per lease cost more than the task's own work: the new task
//! waits in the acquiring thread's next-task slot, and the next task woken on
//! that thread (the connection's, by the release's request) pushes it out to
//! the run queue and wakes another worker thread for it. From then on the
//! client and its connection ping-pong between the threads: about three
//! `futex` calls a cycle on two cores, where the same requests sent raw made
//! none.
//!
//! One keeper task per tokio runtime holds the young leases in the order
//! they began and wakes at most once a [`GRACE`], when the oldest is that
//! old; it is woken only when a lease arrives while it holds none.

use super::renewal::{self, Watchdog};
use super::shared::Status;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, Id};
use tokio::sync::Notify;

/// How long a lease goes without its watchdog, at least (at most twice
/// this): a loss the backend signals meanwhile reaches the lease that much
/// later. Renewal, `max_hold` and the deadline are never this close (see
/// [`may_wait`]).
const GRACE: Duration = Duration::from_millis(10);

/// Whether the first thing `dog` may have to do is far enough off for it to
/// start late: ten graces before the deadline, the first renewal and
/// `max_hold`.
fn may_wait(dog: &Watchdog) -> bool {
    let far = dog.began + GRACE * 10;
    [
        Some(dog.shared.deadline()),
        dog.renew_every.map(|every| dog.began + every),
        dog.max_hold_at,
    ]
    .into_iter()
    .flatten()
    .all(|at| at >= far)
}

fn spawn(dog: Watchdog) {
    tokio::spawn(renewal::watchdog(dog));
}

/// Starts `dog` now, or after [`GRACE`] if its lease is still held then.
pub(crate) fn watch(dog: Watchdog) {
    if !may_wait(&dog) {
        return spawn(dog);
    }
    let Ok(runtime) = Handle::try_current() else {
        return spawn(dog);
    };
    keeper(&runtime).push(dog);
}

/// The young leases of one runtime.
struct Keeper {
    young: Mutex<VecDeque<Watchdog>>,
    arrived: Notify,
}

thread_local! {
    /// The keeper of the runtime this thread last started a lease on.
    static KEEPER: RefCell<Option<(Id, Weak<Keeper>)>> = const { RefCell::new(None) };
}

/// Every runtime's keeper, for threads that have none cached.
static KEEPERS: Mutex<Vec<(Id, Weak<Keeper>)>> = Mutex::new(Vec::new());

/// The keeper of `runtime`, started if it has none (or its task ended).
fn keeper(runtime: &Handle) -> Arc<Keeper> {
    let id = runtime.id();
    let cached = KEEPER.with_borrow(|cached| {
        cached
            .as_ref()
            .filter(|(of, _)| *of == id)
            .and_then(|(_, keeper)| keeper.upgrade())
    });
    if let Some(keeper) = cached {
        return keeper;
    }
    let keeper = {
        let mut keepers = KEEPERS.lock().unwrap_or_else(PoisonError::into_inner);
        keepers.retain(|(_, keeper)| keeper.strong_count() > 0);
        match keepers.iter().find(|(of, _)| *of == id) {
            Some((_, keeper)) => keeper.upgrade(),
            None => None,
        }
        .unwrap_or_else(|| {
            let keeper = Arc::new(Keeper {
                young: Mutex::new(VecDeque::new()),
                arrived: Notify::new(),
            });
            keepers.push((id, Arc::downgrade(&keeper)));
            // The task holds the keeper: it ends with the runtime.
            runtime.spawn(keeper.clone().run());
            keeper
        })
    };
    KEEPER.with_borrow_mut(|cached| *cached = Some((id, Arc::downgrade(&keeper))));
    keeper
}

impl Keeper {
    fn push(&self, dog: Watchdog) {
        let was_empty = {
            let mut young = self.young.lock().unwrap_or_else(PoisonError::into_inner);
            young.push_back(dog);
            young.len() == 1
        };
        if was_empty {
            self.arrived.notify_one();
        }
    }

    /// Spawns the watchdogs of the leases that have lived for [`GRACE`] and
    /// are still held, at most once a [`GRACE`] (so a lease waits up to two):
    /// the keeper's own wake-ups stay few however fast leases come.
    async fn run(self: Arc<Self>) {
        let mut woke = Instant::now();
        loop {
            let oldest = self
                .young
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .front()
                .map(|dog| dog.began);
            match oldest {
                Some(began) => {
                    let at = (began + GRACE).max(woke + GRACE);
                    tokio::time::sleep_until(at.into()).await;
                }
                None => self.arrived.notified().await,
            }
            woke = Instant::now();
            let grown = {
                let mut young = self.young.lock().unwrap_or_else(PoisonError::into_inner);
                let old = young.partition_point(|dog| dog.began + GRACE <= woke);
                young.drain(..old).collect::<Vec<_>>()
            };
            for dog in grown {
                if *dog.shared.status.borrow() == Status::Held {
                    spawn(dog);
                }
            }
        }
    }
}
