//! The strategy choice: each strategy is a
//! [`Backend`](distlock_core::adapter::Backend) of its own, and the client is
//! core's [`BackendLock`] over the one the table belongs to, handed out as a
//! [`DynLock`] so that every method of the trait, defaulted ones included, is
//! core's own and never a hand-written copy that could miss one.

use crate::advisory::Advisory;
use crate::backend::Table;
use crate::pool::Pool;
use crate::protocol::Strategy;
use distlock_core::adapter::BackendLock;
use distlock_core::{AcquireOptions, DynLock, LockError};
use distlock_sql::held::HeldLock;
use distlock_sql::shares::rwlock::SqlRwLock;
use distlock_sql::shares::semaphore::SqlSemaphore;
use distlock_sql::shares::{Primitive, Shares};
use std::sync::Arc;
use std::time::Duration;

/// A client of `table`'s strategy; `holders` are `advisory`'s connections,
/// `defaults` its [`DistributedLock::default_options`](distlock_core::DistributedLock::default_options).
/// A `version_cas` client opens its semaphore's and read-write lock's share
/// tables (creating them when `create`; their idle heads collected after
/// `state_ttl`).
pub(crate) async fn client(
    table: Table,
    holders: Pool,
    defaults: AcquireOptions,
    create: bool,
    state_ttl: Duration,
) -> Result<DynLock, LockError> {
    let table = Arc::new(table);
    Ok(match table.strategy {
        Strategy::VersionCas => {
            let name = table.name.as_str();
            let open = |primitive| Shares::open(table.clone(), name, primitive, create, state_ttl);
            let (semaphores, rwlocks) = (
                open(Primitive::Semaphore).await?,
                open(Primitive::RwLock).await?,
            );
            Arc::new(
                BackendLock::new(table.cas.backend(table.clone()))
                    .with_lock_election()
                    .with_semaphore(SqlSemaphore { shares: semaphores })
                    .with_rwlock(SqlRwLock { shares: rwlocks })
                    .with_defaults(defaults)?,
            )
        }
        Strategy::Advisory => Arc::new(
            BackendLock::new(HeldLock(Advisory { table, holders }))
                .with_lock_election()
                .with_defaults(defaults)?,
        ),
    })
}
