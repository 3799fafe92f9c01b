//! [`PostgresLock`], the one client type of the two strategies: each is a
//! [`Backend`](distlock_core::adapter::Backend) of its own under core's
//! [`BackendLock`], and the client forwards to the one it was connected with.

use crate::advisory::Advisory;
use crate::backend::Table;
use crate::keys::TableName;
use crate::pool::Pool;
use crate::protocol::Strategy;
use crate::rwlock::PgRwLock;
use crate::semaphore::PgSemaphore;
use crate::version_cas::VersionCas;
use async_trait::async_trait;
use distlock_core::adapter::{BackendLock, BackendRwLock, BackendSemaphore};
use distlock_core::toolkit::Inspect;
use distlock_core::{
    AcquireOptions, Capabilities, DistributedLock, DynElection, DynRwLock, DynSemaphore, Lease,
    LockError, LockKey, MetricsSnapshot,
};
use std::sync::Arc;

/// A PostgreSQL lock client: `PostgresConfig::from_url(url)?.connect().await?`.
#[derive(Debug)]
pub struct PostgresLock {
    table: Arc<Table>,
    client: Client,
}

#[derive(Debug)]
enum Client {
    VersionCas(BackendLock<VersionCas>),
    Advisory(BackendLock<Advisory>),
}

impl PostgresLock {
    /// A client of `table`'s strategy; `holders` are `advisory`'s connections,
    /// `defaults` its [`DistributedLock::default_options`].
    pub(crate) fn new(
        table: Table,
        holders: Pool,
        defaults: AcquireOptions,
    ) -> Result<Self, LockError> {
        let table = Arc::new(table);
        let client = match table.strategy {
            Strategy::VersionCas => Client::VersionCas(
                BackendLock::new(VersionCas {
                    table: table.clone(),
                })
                .with_lock_election()
                .with_semaphore(Arc::new(BackendSemaphore::new(PgSemaphore {
                    table: table.clone(),
                })))
                .with_rwlock(Arc::new(BackendRwLock::new(PgRwLock {
                    table: table.clone(),
                })))
                .with_defaults(defaults)?,
            ),
            Strategy::Advisory => Client::Advisory(
                BackendLock::new(Advisory {
                    table: table.clone(),
                    holders,
                })
                .with_lock_election()
                .with_defaults(defaults)?,
            ),
        };
        Ok(PostgresLock { table, client })
    }

    /// The strategy this client uses.
    pub fn strategy(&self) -> Strategy {
        self.table.strategy
    }

    /// The lock table.
    pub fn table(&self) -> &TableName {
        &self.table.name
    }

    /// The namespace of this client's lock names.
    pub fn namespace(&self) -> &str {
        &self.table.namespace
    }

    fn lock(&self) -> &dyn DistributedLock {
        match &self.client {
            Client::VersionCas(lock) => lock,
            Client::Advisory(lock) => lock,
        }
    }
}

#[async_trait]
impl DistributedLock for PostgresLock {
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
