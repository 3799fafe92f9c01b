//! What `distlock run` and `distlock elect` hold while the command runs: a
//! lock's lease (or a read-write lock's share), a semaphore permit or a leadership. All three are leases, so
//! the command is supervised the same way; only the acquire and the child's
//! environment differ.

use distlock::prelude::*;
use distlock::{AcquireOptions, DynLock, Leadership, Lease, LockError, LockKey, Permit, RwMode};
use tokio::process::Command;

/// How to acquire.
#[derive(Debug, Clone)]
pub enum Want {
    /// The lock `key`.
    Lock,
    /// One of `limit` permits of the semaphore `key`.
    Permit { limit: u32 },
    /// Leadership of the election `key`, campaigning with `proposal`.
    Leadership { proposal: String },
    /// A read or write share of the read-write lock `key`.
    Share(RwMode),
}

/// A held lock, permit or leadership: one lease underneath, so key, token,
/// `lost` and `release` come from [`Held`].
#[derive(Debug)]
pub enum Hold {
    Lock(Lease),
    Permit(Permit),
    Leadership(Leadership),
}

/// A primitive the backend does not offer: a configuration error naming why.
fn not_offered(lock: &DynLock, what: &str, why: Option<&str>) -> LockError {
    LockError::config(
        lock.name(),
        format!(
            "this backend offers no {what}{}",
            why.map(|w| format!(": {w}")).unwrap_or_default()
        ),
    )
}

impl Want {
    pub async fn acquire(
        &self,
        lock: &DynLock,
        key: &LockKey,
        opts: &AcquireOptions,
    ) -> Result<Hold, LockError> {
        let primitives = lock.capabilities().primitives;
        match self {
            Want::Lock => Ok(Hold::Lock(lock.acquire(key, opts).await?)),
            Want::Permit { limit } => {
                let semaphore = lock.semaphore().ok_or_else(|| {
                    not_offered(lock, "semaphore", primitives.semaphore.why_not())
                })?;
                Ok(Hold::Permit(semaphore.acquire(key, *limit, opts).await?))
            }
            Want::Leadership { proposal } => {
                let election = lock
                    .election()
                    .ok_or_else(|| not_offered(lock, "election", primitives.election.why_not()))?;
                let leadership = election.campaign(key, proposal, opts).await?;
                Ok(Hold::Leadership(leadership))
            }
            Want::Share(mode) => {
                let rwlock = lock.rwlock().ok_or_else(|| {
                    LockError::invalid_options(format!(
                        "--{mode} needs a read-write lock, which the {} backend does not offer ({})",
                        lock.name(),
                        primitives.rwlock.why_not().unwrap_or("")
                    ))
                })?;
                let share = match mode {
                    RwMode::Read => rwlock.read(key, opts).await?,
                    RwMode::Write => rwlock.write(key, opts).await?,
                };
                // A share is a lease like any other: supervised the same way.
                Ok(Hold::Lock(share.into_lease()))
            }
        }
    }
}

impl Hold {
    /// Sets what the child learns: the name, the token, and the slot of a permit.
    pub fn describe_to(&self, cmd: &mut Command) {
        cmd.env("DISTLOCK_KEY", self.key().as_str())
            .env("DISTLOCK_FENCING_TOKEN", self.token().to_string());
        if let Hold::Permit(permit) = self {
            cmd.env("DISTLOCK_SLOT", permit.slot().to_string());
        }
    }
}

impl SingleLease for Hold {
    fn lease(&self) -> &Lease {
        match self {
            Hold::Lock(lease) => lease,
            Hold::Permit(permit) => permit.lease(),
            Hold::Leadership(leadership) => leadership.lease(),
        }
    }

    fn into_lease(self) -> Lease {
        match self {
            Hold::Lock(lease) => lease,
            Hold::Permit(permit) => permit.into_lease(),
            Hold::Leadership(leadership) => leadership.into_lease(),
        }
    }
}

/// `--permits` is a whole number from 1 to `MAX_PERMITS`.
pub fn parse_permits(raw: &str) -> Result<u32, String> {
    match raw.parse::<u32>() {
        Ok(n) if (1..=distlock::adapter::MAX_PERMITS).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{raw}` is not a number of permits from 1 to {}",
            distlock::adapter::MAX_PERMITS
        )),
    }
}
