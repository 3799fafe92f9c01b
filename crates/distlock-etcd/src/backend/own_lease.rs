//! A renewal that asks for another expiry than the client's lease gives: a
//! minimum hold's (core's `lease/shared.rs`: the longer of the ttl and what is
//! left of the hold, and at a release within the hold the time left).
//!
//! A key lives as long as its lease, and an etcd lease's ttl is fixed at its
//! grant: a keep-alive sets its expiry to now + that ttl, and the client keeps
//! its shared leases alive as long as it uses them. So a key asked to expire at
//! another time moves to a lease of its own, granted for that long and kept
//! alive by nobody but later renewals: grant it, re-attach the key with a put
//! guarded by the key's create revision (a put keeps the create revision, so the
//! token stays; `protocol::reattach`), then revoke the lease it was on if that
//! was its own too. Its server expiry is then a fixed instant, which a killed
//! holder cannot push back. A renewal whose lease already expires when asked
//! (to the whole second) only checks the key; one asking exactly the own
//! lease's ttl keeps it alive once, as the shared lease's renewal does.
//!
//! The normal path (a renewal asking the shared lease's own ttl) never comes
//! here, so its request count is unchanged.

use super::{EtcdBackend, EtcdHandle};
use crate::error::Failure;
use crate::etcd_lease::grant_lease;
use crate::protocol::{reattach, still_created_at};
use distlock_core::LockError;
use distlock_core::adapter::Ownership;
use std::time::{Duration, Instant};

/// How far past the asked expiry a lease of its own may end and still serve a
/// renewal unchanged: a lease's ttl is whole seconds.
const GRANULARITY: Duration = Duration::from_secs(1);

/// How long after its ttl etcd may take to revoke an expired lease (its
/// lessor checks twice a second), for the slot reservation.
const EXPIRY_SLACK: Duration = Duration::from_secs(1);

/// A lease the held key alone is on, granted for a fixed time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnLease {
    pub id: i64,
    /// Its ttl as granted (etcd may raise a short one to its minimum).
    pub ttl: Duration,
    /// When its grant or last keep-alive was sent: the server keeps it at
    /// least until `from + ttl`.
    pub from: Instant,
}

impl OwnLease {
    fn expires(&self) -> Instant {
        self.from + self.ttl
    }
}

/// The ttl in whole seconds, rounded up: the key may outlive the ask by under
/// a second, never fall short of it.
fn seconds_up(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

impl EtcdBackend {
    /// Renews `handle` to `ttl` when that is not its shared lease's own ttl.
    pub(super) async fn renew_to(
        &self,
        handle: &EtcdHandle,
        ttl: Duration,
    ) -> Result<Ownership, LockError> {
        let mut own = handle.own.lock().await;
        let asked_at = Instant::now();
        let outcome = match *own {
            Some(lease) if covers(&lease, asked_at, ttl) => {
                self.still_mine(handle).await.map(|mine| (mine, lease))
            }
            Some(lease) if lease.ttl.as_secs() == seconds_up(ttl).unsigned_abs() => {
                self.keep_alive_once(handle, lease).await
            }
            current => self.move_to_own(handle, current, ttl).await,
        };
        match outcome {
            Ok((true, lease)) => {
                *own = Some(lease);
                handle
                    .own_id
                    .store(lease.id, std::sync::atomic::Ordering::Release);
                handle
                    .slot
                    .reserve_until(Instant::now() + lease.ttl + EXPIRY_SLACK);
                Ok(Ownership::Held)
            }
            Ok((false, _)) => Ok(Ownership::NotHeld),
            Err(f) => Err(self.rpc.endpoints.lock_error(f)),
        }
    }

    async fn still_mine(&self, handle: &EtcdHandle) -> Result<bool, Failure> {
        still_created_at(&self.rpc, &self.kv, &handle.key, handle.revision).await
    }

    /// One keep-alive of the key's own lease (whose ttl is the one asked), and
    /// the key's check beside it.
    async fn keep_alive_once(
        &self,
        handle: &EtcdHandle,
        lease: OwnLease,
    ) -> Result<(bool, OwnLease), Failure> {
        let client = self.client.lease_client();
        let from = Instant::now();
        let (alive, mine) = tokio::join!(
            self.rpc
                .call("lease keep-alive", client.keep_alive(lease.id)),
            self.still_mine(handle)
        );
        match alive {
            Err(Failure::LeaseNotFound) => Ok((false, lease)),
            Err(f) => Err(f),
            Ok(_) => Ok((mine?, OwnLease { from, ..lease })),
        }
    }

    /// Grants a lease of `ttl` (whole seconds, rounded up), moves the key onto
    /// it, and revokes the key's previous own lease, if any. On the shared
    /// lease the key leaves, its slot is marked clean, so that lease is not
    /// tainted by a key no longer on it.
    async fn move_to_own(
        &self,
        handle: &EtcdHandle,
        current: Option<OwnLease>,
        ttl: Duration,
    ) -> Result<(bool, OwnLease), Failure> {
        let client = self.client.lease_client();
        let secs = seconds_up(ttl);
        let from = Instant::now();
        let granted = grant_lease(&self.rpc, &client, secs).await?;
        let lease = OwnLease {
            id: granted.id(),
            ttl: Duration::from_secs(granted.ttl().max(secs).unsigned_abs()),
            from,
        };
        let moved = reattach(&self.rpc, &self.kv, &handle.key, handle.revision, lease.id).await;
        // Whatever the move did, one of the two leases carries nothing now.
        let unused = match moved {
            Ok(true) => current.map(|old| old.id),
            _ => Some(lease.id),
        };
        if let Some(id) = unused {
            let (rpc, client) = (self.rpc.clone(), client.clone());
            tokio::spawn(async move { rpc.call("lease revoke", client.revoke(id)).await });
        }
        if matches!(moved, Ok(true)) && current.is_none() {
            handle.slot.mark_clean();
        }
        Ok((moved?, lease))
    }
}

/// Whether `lease` already keeps the key from `now` for `ttl`, and not more
/// than a whole second beyond.
fn covers(lease: &OwnLease, now: Instant, ttl: Duration) -> bool {
    let wanted = now + ttl;
    lease.expires() >= wanted && lease.expires() <= wanted + GRANULARITY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_asked_ttl_rounds_up_to_whole_seconds() {
        assert_eq!(seconds_up(Duration::from_millis(3_001)), 4);
        assert_eq!(seconds_up(Duration::from_secs(3)), 3);
        assert_eq!(seconds_up(Duration::from_millis(1)), 1);
    }

    #[test]
    fn a_lease_serves_an_ask_it_ends_after_by_under_a_second() {
        let from = Instant::now();
        let lease = OwnLease {
            id: 1,
            ttl: Duration::from_secs(8),
            from,
        };
        let later = from + Duration::from_secs(2);
        assert!(covers(&lease, later, Duration::from_millis(6_000)));
        assert!(covers(&lease, later, Duration::from_millis(5_500)));
        assert!(!covers(&lease, later, Duration::from_millis(6_001)));
        assert!(!covers(&lease, later, Duration::from_millis(4_900)));
    }
}
