//! The strategy choice: each strategy is a
//! [`Backend`](distlock_core::adapter::Backend) of its own, and the client is
//! core's [`BackendLock`] over the one the table belongs to, handed out as a
//! [`DynLock`] so that every method of the trait, defaulted ones included, is
//! core's own and never a hand-written copy that could miss one.

use crate::backend::Table;
use crate::for_update::ForUpdate;
use crate::protocol::Strategy;
use crate::unique_insert::Insert;
use distlock_core::adapter::{Backend, BackendLock};
use distlock_core::{AcquireOptions, DynLock, LockError};
use distlock_sql::held::HeldLock;
use distlock_sql::poll::Polling;
use distlock_sql::shares::Shares;
use distlock_sql::shares::rwlock::SqlRwLock;
use distlock_sql::shares::semaphore::SqlSemaphore;
use std::sync::Arc;

/// A client of `table`'s strategy; `defaults` its [`DistributedLock::default_options`](distlock_core::DistributedLock::default_options),
/// and the two share tables those of its semaphore and read-write lock (the
/// same for every strategy).
pub(crate) fn client(
    table: Arc<Table>,
    defaults: AcquireOptions,
    semaphores: Arc<Shares<Table>>,
    rwlocks: Arc<Shares<Table>>,
) -> Result<DynLock, LockError> {
    let semaphore = SqlSemaphore { shares: semaphores };
    let rwlock = SqlRwLock { shares: rwlocks };
    match table.strategy {
        Strategy::VersionCas => {
            let cas = table.cas.backend(table.clone());
            lock(cas, semaphore, rwlock, defaults)
        }
        Strategy::UniqueInsert => {
            let rows = Insert::rows(&table);
            let insert = Polling::new(table, Insert::default(), rows);
            lock(insert, semaphore, rwlock, defaults)
        }
        Strategy::ForUpdate => lock(HeldLock(ForUpdate { table }), semaphore, rwlock, defaults),
    }
}

/// `backend` as the client: every strategy offers the same primitives.
fn lock<B: Backend>(
    backend: B,
    semaphore: SqlSemaphore<Table>,
    rwlock: SqlRwLock<Table>,
    defaults: AcquireOptions,
) -> Result<DynLock, LockError> {
    Ok(Arc::new(
        BackendLock::new(backend)
            .with_lock_election()
            .with_semaphore(semaphore)
            .with_rwlock(rwlock)
            .with_defaults(defaults)?,
    ))
}
