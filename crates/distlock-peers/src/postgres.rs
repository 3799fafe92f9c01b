//! The PostgreSQL peers: the statements a user would write by hand with sqlx,
//! one connection per client, no library between them and the server.
//!
//! - a lease table: one upsert that takes a free or expired row and raises its
//!   token, polled every [`POLL`] while the row is held, and an owner-checked
//!   update that frees it (the counter stays, so tokens keep rising);
//! - a session advisory lock: `pg_advisory_lock` (which waits in the server)
//!   and `pg_advisory_unlock` on the same connection, with no token;
//! - the same lock with a fencing token: once the lock is held, an upsert that
//!   raises the name's counter row and returns it (committed, like every
//!   statement, before its reply), then the unlock;
//! - a transaction-scoped advisory lock with a token, the lock a user takes
//!   inside their own transaction: `BEGIN`, `pg_advisory_xact_lock`, the same
//!   counter upsert, `COMMIT` (which frees the lock). The upsert is part of
//!   the transaction, so a rollback takes the token back with it: a next
//!   holder can be handed the same token again, which distlock's `lock_in`
//!   (next to it, in the same shape) prevents by raising it outside.

use distlock::LockKey;
use distlock::postgres::{PostgresConfig, TxLock};
use sqlx::{Connection, PgConnection};
use std::time::Duration;

/// How often the hand-written lease table asks again while the row is held.
const POLL: Duration = Duration::from_millis(10);

/// The lease table, created once before any client connects.
const LEASE_TABLE: &str = "CREATE TABLE IF NOT EXISTS peer_leases (\
     name text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL, \
     expires_at timestamptz NOT NULL)";

const TAKE: &str = "INSERT INTO peer_leases AS l (name, owner, token, expires_at) \
     VALUES ($1, $2, 1, clock_timestamp() + make_interval(secs => $3)) \
     ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, token = l.token + 1, \
     expires_at = EXCLUDED.expires_at WHERE l.expires_at < clock_timestamp() \
     RETURNING token";

/// The counter table of the fenced advisory lock, created with the lease table.
const FENCE_TABLE: &str = "CREATE TABLE IF NOT EXISTS peer_fences (\
     name text PRIMARY KEY, token bigint NOT NULL)";

const BUMP: &str = "INSERT INTO peer_fences AS f (name, token) VALUES ($1, 1) \
     ON CONFLICT (name) DO UPDATE SET token = f.token + 1 RETURNING token";

const FREE: &str = "UPDATE peer_leases SET expires_at = '-infinity' WHERE name = $1 AND owner = $2";

const LOCK: &str = "SELECT pg_advisory_lock(hashtextextended($1, 0))";

const UNLOCK: &str = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";

const XACT_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// A client of the hand-written lease table.
pub struct LeaseTable {
    conn: PgConnection,
    owner: String,
}

/// A client of the hand-written advisory lock, with a fencing token when
/// `fenced`.
pub struct Advisory {
    conn: PgConnection,
    fenced: bool,
}

/// A client of the hand-written transaction lock with a token.
pub struct XactLock {
    conn: PgConnection,
}

/// A client of distlock's lock inside the caller's transaction: the
/// caller's own connection, and distlock's [`TxLock`] beside it.
pub struct DistlockTx {
    conn: PgConnection,
    locks: TxLock,
}

async fn connect(url: &str) -> Result<PgConnection, String> {
    PgConnection::connect(url)
        .await
        .map_err(|e| format!("postgres connect: {e}"))
}

impl LeaseTable {
    pub async fn connect(url: &str) -> Result<Self, String> {
        Ok(LeaseTable {
            conn: connect(url).await?,
            owner: format!("{:016x}", rand::random::<u64>()),
        })
    }
}

impl Advisory {
    pub async fn connect(url: &str, fenced: bool) -> Result<Self, String> {
        Ok(Advisory {
            conn: connect(url).await?,
            fenced,
        })
    }
}

impl XactLock {
    pub async fn connect(url: &str) -> Result<Self, String> {
        Ok(XactLock {
            conn: connect(url).await?,
        })
    }

    /// One transaction that takes the lock of `name`, waiting in the server,
    /// raises its counter, calls `held`, and commits.
    pub async fn turn(
        &mut self,
        name: &str,
        held: &mut (dyn FnMut() + Send),
    ) -> Result<(), String> {
        let mut tx = self.conn.begin().await.map_err(|e| format!("BEGIN: {e}"))?;
        sqlx::query(XACT_LOCK)
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(|e| format!("pg_advisory_xact_lock: {e}"))?;
        let _token: i64 = sqlx::query_scalar(BUMP)
            .bind(name)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| format!("token bump: {e}"))?;
        held();
        tx.commit().await.map_err(|e| format!("COMMIT: {e}"))
    }
}

impl DistlockTx {
    /// `url` is distlock's URL of the `advisory` strategy, whose table and
    /// counters `lock_in` shares.
    pub async fn connect(url: &str) -> Result<Self, String> {
        let config = PostgresConfig::from_url(url).map_err(|e| e.to_string())?;
        let locks = config.connect_tx_lock().await.map_err(|e| e.to_string())?;
        let plain = url.split_once('?').map_or(url, |(plain, _)| plain);
        Ok(DistlockTx {
            conn: connect(plain).await?,
            locks,
        })
    }

    /// One transaction of the caller's that takes the lock of `name` with
    /// `lock_in`, calls `held`, and commits.
    pub async fn turn(
        &mut self,
        name: &str,
        held: &mut (dyn FnMut() + Send),
    ) -> Result<(), String> {
        let key = LockKey::new(name).map_err(|e| e.to_string())?;
        let mut tx = self.conn.begin().await.map_err(|e| format!("BEGIN: {e}"))?;
        self.locks
            .lock_in(&mut tx, &key)
            .await
            .map_err(|e| e.to_string())?;
        held();
        tx.commit().await.map_err(|e| format!("COMMIT: {e}"))
    }
}

/// Creates the lease and counter tables on the server at `url` and returns the server's
/// version.
pub async fn prepare(url: &str) -> Result<String, String> {
    let mut conn = connect(url).await?;
    for table in [LEASE_TABLE, FENCE_TABLE] {
        sqlx::query(table)
            .execute(&mut conn)
            .await
            .map_err(|e| format!("postgres: {e}"))?;
    }
    sqlx::query_scalar("SELECT current_setting('server_version')")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| format!("postgres: {e}"))
}

impl LeaseTable {
    /// Takes the row `name` for `ttl`, asking again every [`POLL`] while it is
    /// held.
    pub async fn take(&mut self, name: &str, ttl: Duration) -> Result<(), String> {
        loop {
            let token: Option<i64> = sqlx::query_scalar(TAKE)
                .bind(name)
                .bind(&self.owner)
                .bind(ttl.as_secs_f64())
                .fetch_optional(&mut self.conn)
                .await
                .map_err(|e| format!("lease take: {e}"))?;
            if token.is_some() {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Frees the row `name` if this client holds it.
    pub async fn free(&mut self, name: &str) -> Result<(), String> {
        sqlx::query(FREE)
            .bind(name)
            .bind(&self.owner)
            .execute(&mut self.conn)
            .await
            .map(drop)
            .map_err(|e| format!("lease free: {e}"))
    }
}

impl Advisory {
    /// Waits in the server for the advisory lock of `name` and, when
    /// `fenced`, raises its counter.
    pub async fn lock(&mut self, name: &str) -> Result<(), String> {
        sqlx::query(LOCK)
            .bind(name)
            .execute(&mut self.conn)
            .await
            .map_err(|e| format!("pg_advisory_lock: {e}"))?;
        if self.fenced {
            let _token: i64 = sqlx::query_scalar(BUMP)
                .bind(name)
                .fetch_one(&mut self.conn)
                .await
                .map_err(|e| format!("token bump: {e}"))?;
        }
        Ok(())
    }

    /// Releases it.
    pub async fn unlock(&mut self, name: &str) -> Result<(), String> {
        sqlx::query(UNLOCK)
            .bind(name)
            .execute(&mut self.conn)
            .await
            .map(drop)
            .map_err(|e| format!("pg_advisory_unlock: {e}"))
    }
}
