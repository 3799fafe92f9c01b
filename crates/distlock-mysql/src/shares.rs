//! The semaphore and read-write lock: distlock-sql's share tables
//! (`{table}_sem`, `{table}_rw`) on this adapter's connections. A name is its
//! binary row name ([`row_name`]); waiters poll, and a cut-off attempt's
//! session is ended with `KILL` before its rows are deleted.

use crate::backend::Table;
use crate::error::DbError;
use crate::keys::{exact_range, prefix_range, row_name};
use crate::pool::{Pool, Thread};
use distlock_core::{Capabilities, LockKey};
use distlock_sql::pool::BoxFuture;
use distlock_sql::shares::{Names, Primitive, ShareAdapter, Value};
use std::sync::Arc;
use tokio::sync::Notify;

impl ShareAdapter for Table {
    type Dialect = Thread;
    /// MySQL tells nobody of a release.
    type Waiter = Arc<Notify>;

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn capabilities(&self) -> Capabilities {
        self.strategy.capabilities()
    }

    fn key(&self, key: &LockKey) -> Vec<Value> {
        vec![Value::Bytes(row_name(key))]
    }

    /// The byte range `[low, high)` of the names.
    fn names(&self, names: Names<'_>) -> Vec<Value> {
        let (low, high) = match names {
            Names::One(key) => exact_range(&row_name(key)),
            Names::Under(prefix) => prefix_range(prefix.as_bytes()),
        };
        vec![Value::Bytes(low), Value::Bytes(high)]
    }

    fn end_session(&self, thread: Thread) -> BoxFuture<'_, Result<(), DbError>> {
        Box::pin(self.end_session(thread.id))
    }

    fn waiter(&self, _: &LockKey, _: Primitive) -> Option<Arc<Notify>> {
        None
    }
}
