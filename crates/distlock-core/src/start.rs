//! Turning one won acquisition into a [`Lease`], written once for every
//! primitive: the lock, semaphore permits, leadership (and any later one, such as
//! read and write shares). Each primitive's adapter returns a [`Holding`]; this
//! checks that validity is left, starts the watchdog with the backend's loss
//! signal, and registers a reentrant owner.

use crate::backend::Holding;
use crate::counters::Metrics;
use crate::lease::{Lease, Shared, clock_drift};
use crate::reentry::{Reentry, Registry};
use crate::{AcquireOptions, FencingToken, LockError, LockKey};
use std::sync::Arc;
use std::time::Instant;

/// An acquisition the backend granted, with its backend type erased.
pub(crate) struct Won {
    pub holding: Arc<dyn Holding>,
    pub token: FencingToken,
    /// When the winning request was sent: validity is measured from here.
    pub sent_at: Instant,
}

/// Starts the lease for `won`, or gives it back when the reply came too late to
/// leave any validity (a dead lease is never handed out: the caller gets
/// `Timeout`). `reentrant` registers `opts`' owner, for primitives that offer
/// reentrancy.
pub(crate) fn begin(
    key: &LockKey,
    won: Won,
    opts: &AcquireOptions,
    started: Instant,
    metrics: &Arc<Metrics>,
    reentrant: Option<&Arc<Registry<Shared>>>,
) -> Result<Lease, LockError> {
    let ttl = opts.get_ttl();
    if Instant::now() >= won.sent_at + ttl - clock_drift(ttl) {
        let holding = won.holding;
        tokio::spawn(async move { holding.release().await });
        return Err(LockError::Timeout {
            key: key.clone(),
            waited: started.elapsed(),
        });
    }
    let loss = won.holding.loss_signal();
    let reentry = reentrant
        .zip(opts.get_owner())
        .map(|(registry, owner)| Reentry {
            registry: registry.clone(),
            owner: owner.clone(),
        });
    let shared = Arc::new(
        Shared::new(
            key.clone(),
            won.token,
            ttl,
            won.sent_at,
            won.holding,
            metrics.clone(),
            reentry,
        )
        .with_min_hold(won.sent_at, opts.get_min_hold()),
    );
    if let (Some(registry), Some(owner)) = (reentrant, opts.get_owner()) {
        registry.insert(key, owner, &shared);
    }
    Ok(Lease::start(
        shared,
        opts.renew_interval(),
        opts.get_max_hold(),
        loss,
    ))
}
