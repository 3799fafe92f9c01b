//! Critical sections of every contender on one lock, distlock's and the other
//! client's alike, as the test sees them.
//!
//! A section is entered after the contender reported the lock held and left
//! before it is told to release, so each recorded section lies inside a real
//! holding: two recorded sections that overlap prove two holders at once. Each
//! section also adds one to a counter with a read, a pause and a write, so an
//! overlap shows up as a lost update too.

use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_testkit::cases::{CaseError, CaseResult};
use distlock_testkit::ensure;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The longest hand-off from one client to the other once the holder lets go.
pub const HANDOFF: Duration = Duration::from_secs(5);

/// How long any one contender may wait for the lock.
pub const WAIT: Duration = Duration::from_secs(60);

/// Contenders per side in a contention case, and rounds per contender.
pub const CONTENDERS: usize = 2;
/// See [`CONTENDERS`].
pub const ROUNDS: usize = 8;

/// How long a contender stays in its section: long enough for another holder,
/// if there were one, to be inside at the same time.
pub const HOLD: Duration = Duration::from_millis(20);

/// One contender's section, in the order they were entered.
#[derive(Debug, Clone)]
struct Entry {
    /// `distlock` or the other client (`curator`, `etcdctl`).
    side: &'static str,
    /// Which contender of that side.
    who: String,
    /// The fencing token the server gave that holding.
    token: u64,
}

/// The shared record.
#[derive(Debug, Default)]
pub struct Sections {
    inside: AtomicUsize,
    counter: Mutex<u64>,
    entries: Mutex<Vec<Entry>>,
}

impl Sections {
    /// Runs one section for `who` of `side`, holding `token`: enter, add one to
    /// the counter across a pause of [`HOLD`], leave.
    pub async fn run(&self, side: &'static str, who: &str, token: u64) -> CaseResult {
        let before = self.inside.fetch_add(1, Ordering::SeqCst);
        let entry = Entry {
            side,
            who: who.to_owned(),
            token,
        };
        let previous = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            let previous = entries.last().cloned();
            entries.push(entry);
            previous
        };
        if before != 0 {
            self.inside.fetch_sub(1, Ordering::SeqCst);
            return Err(CaseError::msg(format!(
                "{side} {who} entered while another holder was inside (the last to enter: {previous:?})"
            )));
        }
        let read = *self.counter.lock().unwrap_or_else(PoisonError::into_inner);
        tokio::time::sleep(HOLD).await;
        *self.counter.lock().unwrap_or_else(PoisonError::into_inner) = read + 1;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    /// After the run: `expected` sections, no lost update, tokens strictly rising
    /// in the order of the sections, and the lock handed from each side to the
    /// other at least once (so the two really contended).
    pub fn check(&self, expected: usize) -> CaseResult {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let counter = *self.counter.lock().unwrap_or_else(PoisonError::into_inner);
        ensure!(
            entries.len() == expected,
            "{} sections, expected {expected}",
            entries.len()
        );
        ensure!(
            counter == expected as u64,
            "the counter reads {counter} after {expected} sections: an update was lost"
        );
        let mut handoffs = std::collections::BTreeSet::new();
        for pair in entries.windows(2) {
            let [earlier, later] = pair else { continue };
            ensure!(
                later.token > earlier.token,
                "token {} of {} {} is not above token {} of {} {} before it",
                later.token,
                later.side,
                later.who,
                earlier.token,
                earlier.side,
                earlier.who
            );
            if earlier.side != later.side {
                handoffs.insert((earlier.side, later.side));
            }
        }
        ensure!(
            handoffs.len() == 2,
            "the lock never changed hands in both directions between the two clients: {handoffs:?}"
        );
        Ok(())
    }
}

/// A distlock client's [`ROUNDS`] sections on `key`.
pub async fn distlock_rounds(
    lock: impl DistributedLock,
    who: String,
    key: LockKey,
    sections: std::sync::Arc<Sections>,
) -> CaseResult {
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Wait::For(WAIT));
    for _ in 0..ROUNDS {
        let lease = lock.acquire(&key, &opts).await?;
        sections.run("distlock", &who, lease.token().get()).await?;
        lease.release().await?;
    }
    Ok(())
}
