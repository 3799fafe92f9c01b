//! What the two strategies' [`Backend`](distlock_core::adapter::Backend)
//! impls share: the lock table at one server (opened and checked once at
//! connect) and the wake-ups of its channel; and what distlock-sql's code
//! written once (`version_cas`, the polling wait, the semaphore and read-write
//! lock, the undo of a cut-off statement) gets from it: the key's namespace
//! and name, the session ending (matched by pid and start), and `NOTIFY`
//! wake-ups. A release notifies the table's channel with the namespace and
//! name as payload (a share's adds its primitive on a third line, so a lock
//! waiter of the same name is not woken).
//!
//! Invariant of both strategies: a table belongs to one strategy (its comment
//! says which), every expiry is judged by the server clock (`now()`, or the
//! server's own idle timeout), and a name's fence only ever rises.

use crate::ending;
use crate::error::{BACKEND, DbError, code};
use crate::keys::{TableName, check_room_for_primitives, wake_payload};
use crate::pool::{Conn, Pool};
use crate::protocol::{
    COUNTER_IDLE, DROP_EXPIRY_INDEX, Statements, Strategy, TABLE_COMMENT, USED_AT, USED_AT_COLUMN,
    for_table,
};
use crate::session::Session;
use crate::wake::{Waiter, Wakeups};
use distlock_core::{Capabilities, LockError, LockKey};
use distlock_sql::adapter::Settings;
use distlock_sql::cas::{CasDb, CasStatements};
use distlock_sql::pool::BoxFuture;
use distlock_sql::state::{self, Collector, StateDb};
use distlock_sql::table::{LockTable, Names, Primitive, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Postgres, Row, SqlStr};
use std::sync::Arc;

/// The lock table of one client: its strategy, namespace, statements,
/// connections and wake-ups.
#[derive(Debug)]
pub(crate) struct Table {
    pub strategy: Strategy,
    pub name: TableName,
    pub namespace: Arc<str>,
    pub sql: Statements,
    /// `version_cas`'s statements (distlock-sql's).
    pub cas: CasStatements,
    /// `advisory`'s collection of idle counters (see `counter`).
    pub counters: Collector,
    /// Connections for single statements.
    pub pool: Pool,
    /// The server, without credentials, for messages.
    pub endpoint: String,
    pub wakeups: Wakeups,
}

impl Table {
    /// Creates the table if missing (when asked), marks an unmarked table as
    /// `strategy`'s, checks that it belongs to `strategy`, and starts listening
    /// with `listen`'s options (without them waiters poll alone).
    pub async fn open(
        strategy: Strategy,
        name: TableName,
        namespace: String,
        pool: Pool,
        listen: Option<PgConnectOptions>,
        endpoint: String,
        settings: &Settings,
    ) -> Result<Table, LockError> {
        let (create, state_ttl) = (settings.create_table, settings.state_ttl);
        if strategy == Strategy::VersionCas {
            check_room_for_primitives(&name)?;
        }
        let err = |e: DbError| e.into_lock_error(&crate::error::TEXTS, &endpoint);
        let mut conn = pool.get().await.map_err(err)?;
        if create {
            create_if_missing(&mut conn, Statements::create_table(&name))
                .await
                .map_err(err)?;
        }
        let read = sqlx::query(TABLE_COMMENT).bind(name.as_str());
        let row = conn.fetch_one(read).await.map_err(err)?;
        let decoded = |e| err(DbError::Sql(e));
        let exists: bool = row.try_get(0).map_err(decoded)?;
        let comment: Option<String> = row.try_get(1).map_err(decoded)?;
        let wanted = strategy.table_comment();
        match (exists, comment) {
            (false, _) => {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "table \"{name}\" does not exist at {endpoint}; enable create_table or create it with the \
                         SQL in docs/backends/postgres.md"
                    ),
                ));
            }
            (true, None) => {
                conn.execute(sqlx::query(Statements::mark_table(&name, strategy)))
                    .await
                    .map_err(err)?;
            }
            (true, Some(found)) if found == wanted => {}
            (true, Some(found)) => {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "table \"{name}\" at {endpoint} is marked `{found}`, not `{wanted}`: strategies cannot share \
                         a table; use another table for {}, or mark a hand-made table with \
                         COMMENT ON TABLE \"{name}\" IS '{wanted}'",
                        strategy.as_str()
                    ),
                ));
            }
        }
        let mut columns = vec![(Postgres::STATE.holder, state::HOLDER_COLUMN)];
        let mut index = Postgres::STATE.index;
        if strategy == Strategy::VersionCas {
            columns.push((USED_AT, USED_AT_COLUMN));
            index = Postgres::CAS.idle_index;
            if create {
                // Earlier releases' index on `expires_at`: while it exists,
                // no acquire or release can update its row in place.
                let drop_index = for_table(DROP_EXPIRY_INDEX, &name);
                conn.execute(sqlx::query(drop_index)).await.map_err(err)?;
            }
        }
        drop(conn);
        for (column, what) in columns {
            let missing = state::add_column(&pool, name.as_str(), create, column).await;
            if let Some(add) = missing.map_err(err)? {
                let no_column = state::no_column(&name, &endpoint, what, &add);
                return Err(LockError::config(BACKEND, no_column));
            }
        }
        let state_namespace = vec![Value::Text(namespace.as_str().into())];
        state::prepare(
            &pool,
            name.as_str(),
            name.as_str(),
            state_namespace,
            create,
            index,
        )
        .await
        .map_err(err)?;
        let sql = Statements::new(&name);
        let wakeups = match listen {
            Some(options) => Wakeups::listen(&options, &pool, &sql.channel, &endpoint).await?,
            None => Wakeups::polling(),
        };
        Ok(Table {
            strategy,
            cas: CasStatements::new::<Postgres>(name.as_str(), state_ttl),
            counters: Collector::with_idle::<Postgres>(
                name.as_str(),
                name.as_str(),
                state_ttl,
                COUNTER_IDLE,
            ),
            name,
            namespace: namespace.into(),
            sql,
            pool,
            endpoint,
            wakeups,
        })
    }

    /// The public error for a failed statement.
    pub fn error(&self, e: DbError) -> LockError {
        e.into_lock_error(&crate::error::TEXTS, &self.endpoint)
    }

    /// The payload a release of `key` notifies.
    pub fn payload(&self, key: &LockKey) -> String {
        wake_payload(&self.namespace, key.as_str())
    }
}

/// Runs one `CREATE TABLE IF NOT EXISTS`. Two clients creating a table at
/// once can both pass IF NOT EXISTS; the loser fails creating the table's row
/// type or on the catalog's unique index, and the table is there.
async fn create_if_missing(conn: &mut Conn, create: SqlStr) -> Result<(), DbError> {
    let lost_race = [
        code::UNIQUE_VIOLATION,
        code::DUPLICATE_TABLE,
        code::DUPLICATE_OBJECT,
    ];
    match conn.execute(sqlx::query(create)).await {
        Err(e) if e.code().is_some_and(|c| lost_race.contains(&c)) => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Ok(()),
    }
}

/// The undo of a cut-off statement, written once in distlock-sql:
/// `pg_terminate_backend`, then until `pg_stat_activity` no longer lists the
/// session (both matching its pid and start, so a reused pid is never hit),
/// then the statement.
pub(crate) type Undo = distlock_sql::table::Undo<Table>;
pub(crate) use distlock_sql::table::undo;

impl LockTable for Table {
    type Dialect = Session;
    type Waiter = Waiter;

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn capabilities(&self) -> Capabilities {
        self.strategy.capabilities()
    }

    fn namespace(&self) -> Vec<Value> {
        vec![Value::Text(self.namespace.clone())]
    }

    fn key(&self, key: &LockKey) -> Vec<Value> {
        vec![
            Value::Text(self.namespace.clone()),
            Value::Text(key.as_str().into()),
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
            Value::Text(name.into()),
            Value::Flag(exact),
        ]
    }

    /// Through a transaction-pooling proxy a connection has no session of its
    /// own to end (ending the server connection would hit another client's
    /// transaction), and none needs ending: a cut-off statement ran in a
    /// transaction whose `COMMIT` was never sent, and the proxy ends it when
    /// the client connection closes.
    fn end_session(&self, session: Session) -> BoxFuture<'_, Result<(), DbError>> {
        if self.pool.is_behind_transaction_pooler() {
            return Box::pin(std::future::ready(Ok(())));
        }
        Box::pin(ending::end(&self.pool, session))
    }

    fn waiter(&self, key: &LockKey, primitive: Option<Primitive>) -> Option<Waiter> {
        let mut payload = self.payload(key);
        if let Some(primitive) = primitive {
            payload = format!("{payload}\n{}", primitive.word());
        }
        Some(self.wakeups.waiter(&payload))
    }
}
