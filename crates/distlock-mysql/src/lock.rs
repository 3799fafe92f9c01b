//! [`MySqlLock`], the one client type of the three strategies: each is a
//! [`Backend`](distlock_core::adapter::Backend) of its own under core's
//! [`BackendLock`], and the client forwards to the one it was connected with.

use crate::backend::Table;
use crate::for_update::ForUpdate;
use crate::keys::TableName;
use crate::pool::Pool;
use crate::protocol::Strategy;
use crate::rwlock::MySqlRwLock;
use crate::semaphore::MySqlSemaphore;
use crate::shares::Shares;
use crate::unique_insert::UniqueInsert;
use crate::version_cas::VersionCas;
use async_trait::async_trait;
use distlock_core::adapter::{BackendLock, BackendRwLock, BackendSemaphore};
use distlock_core::toolkit::Inspect;
use distlock_core::{
    AcquireOptions, Capabilities, DistributedLock, DynElection, DynRwLock, DynSemaphore, Lease,
    LockError, LockKey, MetricsSnapshot,
};
use std::sync::Arc;

/// A MySQL / MariaDB lock client: `MySqlConfig::from_url(url)?.connect().await?`.
#[derive(Debug)]
pub struct MySqlLock {
    table: Arc<Table>,
    client: Client,
}

#[derive(Debug)]
enum Client {
    VersionCas(BackendLock<VersionCas>),
    UniqueInsert(BackendLock<UniqueInsert>),
    ForUpdate(BackendLock<ForUpdate>),
}

impl MySqlLock {
    /// A client of `table`'s strategy; `holders` are `for_update`'s connections,
    /// `defaults` its [`DistributedLock::default_options`], and the two share
    /// tables those of its semaphore and read-write lock (the same for every
    /// strategy).
    pub(crate) fn new(
        table: Arc<Table>,
        holders: Pool,
        defaults: AcquireOptions,
        semaphores: Arc<Shares>,
        rwlocks: Arc<Shares>,
    ) -> Result<Self, LockError> {
        let semaphore: DynSemaphore =
            Arc::new(BackendSemaphore::new(MySqlSemaphore { shares: semaphores }));
        let rwlock: DynRwLock = Arc::new(BackendRwLock::new(MySqlRwLock { shares: rwlocks }));
        let client = match table.strategy {
            Strategy::VersionCas => Client::VersionCas(
                BackendLock::new(VersionCas {
                    table: table.clone(),
                })
                .with_lock_election()
                .with_semaphore(semaphore)
                .with_rwlock(rwlock)
                .with_defaults(defaults)?,
            ),
            Strategy::UniqueInsert => Client::UniqueInsert(
                BackendLock::new(UniqueInsert {
                    table: table.clone(),
                })
                .with_lock_election()
                .with_semaphore(semaphore)
                .with_rwlock(rwlock)
                .with_defaults(defaults)?,
            ),
            Strategy::ForUpdate => Client::ForUpdate(
                BackendLock::new(ForUpdate {
                    table: table.clone(),
                    holders,
                })
                .with_lock_election()
                .with_semaphore(semaphore)
                .with_rwlock(rwlock)
                .with_defaults(defaults)?,
            ),
        };
        Ok(MySqlLock { table, client })
    }

    /// The strategy this client uses.
    pub fn strategy(&self) -> Strategy {
        self.table.strategy
    }

    /// The lock table.
    pub fn table(&self) -> &TableName {
        &self.table.name
    }

    fn lock(&self) -> &dyn DistributedLock {
        match &self.client {
            Client::VersionCas(lock) => lock,
            Client::UniqueInsert(lock) => lock,
            Client::ForUpdate(lock) => lock,
        }
    }
}

#[async_trait]
impl DistributedLock for MySqlLock {
    async fn acquire(&self, key: &LockKey, opts: &AcquireOptions) -> Result<Lease, LockError> {
        self.lock().acquire(key, opts).await
    }

    async fn try_acquire(
        &self,
        key: &LockKey,
        opts: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        self.lock().try_acquire(key, opts).await
    }

    fn default_options(&self) -> AcquireOptions {
        self.lock().default_options()
    }

    fn capabilities(&self) -> Capabilities {
        self.lock().capabilities()
    }

    fn name(&self) -> &'static str {
        self.lock().name()
    }

    fn metrics(&self) -> Option<MetricsSnapshot> {
        self.lock().metrics()
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        self.lock().inspect()
    }

    fn election(&self) -> Option<DynElection> {
        self.lock().election()
    }

    fn semaphore(&self) -> Option<DynSemaphore> {
        self.lock().semaphore()
    }

    fn rwlock(&self) -> Option<DynRwLock> {
        self.lock().rwlock()
    }
}
