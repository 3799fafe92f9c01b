//! The strategy choice: each strategy is a
//! [`Backend`](distlock_core::adapter::Backend) of its own, and the client is
//! core's [`BackendLock`] over the one the table belongs to, handed out as a
//! [`DynLock`] so that every method of the trait, defaulted ones included, is
//! core's own and never a hand-written copy that could miss one.

use crate::advisory::Advisory;
use crate::backend::Table;
use crate::pool::Pool;
use crate::protocol::Strategy;
use crate::rwlock::PgRwLock;
use crate::semaphore::PgSemaphore;
use crate::version_cas::VersionCas;
use distlock_core::adapter::BackendLock;
use distlock_core::{AcquireOptions, DynLock, LockError};
use std::sync::Arc;

/// A client of `table`'s strategy; `holders` are `advisory`'s connections,
/// `defaults` its [`DistributedLock::default_options`](distlock_core::DistributedLock::default_options).
pub(crate) fn client(
    table: Table,
    holders: Pool,
    defaults: AcquireOptions,
) -> Result<DynLock, LockError> {
    let table = Arc::new(table);
    Ok(match table.strategy {
        Strategy::VersionCas => Arc::new(
            BackendLock::new(VersionCas {
                table: table.clone(),
            })
            .with_lock_election()
            .with_semaphore(PgSemaphore {
                table: table.clone(),
            })
            .with_rwlock(PgRwLock { table })
            .with_defaults(defaults)?,
        ),
        Strategy::Advisory => Arc::new(
            BackendLock::new(Advisory { table, holders })
                .with_lock_election()
                .with_defaults(defaults)?,
        ),
    })
}
