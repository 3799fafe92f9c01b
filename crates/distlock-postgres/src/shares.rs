//! The semaphore and read-write lock (`version_cas` tables only):
//! distlock-sql's share tables (`{table}_sem`, `{table}_rw`) on this
//! adapter's connections. A name is the key's namespace and name; a release
//! notifies the lock table's channel (payload: namespace, name and the
//! primitive, each on a line of its own, so a lock waiter of the same name is
//! not woken), and a cut-off attempt's session is ended (matched by pid and
//! start) before its rows are deleted.

use crate::backend::Table;
use crate::ending;
use crate::error::DbError;
use crate::pool::Pool;
use crate::session::Session;
use crate::wake::Waiter;
use distlock_core::{Capabilities, LockKey};
use distlock_sql::pool::BoxFuture;
use distlock_sql::shares::{Names, Primitive, ShareAdapter, Value};

impl ShareAdapter for Table {
    type Dialect = Session;
    type Waiter = Waiter;

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn capabilities(&self) -> Capabilities {
        self.strategy.capabilities()
    }

    fn key(&self, key: &LockKey) -> Vec<Value> {
        vec![
            Value::Text(self.namespace.clone()),
            Value::Text(key.as_str().to_owned()),
        ]
    }

    /// The namespace, the name or prefix, and whether the name is exact.
    fn names(&self, names: Names<'_>) -> Vec<Value> {
        let (name, exact) = match names {
            Names::One(key) => (key.as_str(), true),
            Names::Under(prefix) => (prefix, false),
        };
        vec![
            Value::Text(self.namespace.clone()),
            Value::Text(name.to_owned()),
            Value::Flag(exact),
        ]
    }

    fn end_session(&self, session: Session) -> BoxFuture<'_, Result<(), DbError>> {
        Box::pin(ending::end(&self.pool, session))
    }

    fn waiter(&self, key: &LockKey, primitive: Primitive) -> Option<Waiter> {
        let payload = format!("{}\n{}\n{}", self.namespace, key.as_str(), primitive.word());
        Some(self.wakeups.waiter(&payload))
    }
}
