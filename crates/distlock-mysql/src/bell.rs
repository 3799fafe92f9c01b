//! `version_cas`'s and `unique_insert`'s doorbells (distlock-sql's `bell`): a
//! named server lock per lock name, `GET_LOCK` on a connection of the holders'
//! pool. The holder keeps it from just after its win until just after its
//! release statement; a waiter waits for it to be given back, so a release
//! wakes the next waiter within a round trip. A holder that finds no free
//! holder connection keeps no bell, and its waiters poll.
//!
//! A bell decides nothing: whoever it wakes attempts the row's CAS, which
//! alone grants the lock. Named locks are server-wide, so the bell's name is a
//! hash of the table's and the lock's names (64 characters at most).

use crate::backend::Table;
use crate::keys::row_name;
use crate::pool::{Conn, Statement};
use crate::protocol::{BELL_GIVE_BACK, BELL_KEEP, BELL_WAIT};
use distlock_core::LockKey;
use distlock_sql::bell::{Doorbell, Keeper, Ringer, Rung};
use distlock_sql::pool::BoxFuture;
use sha2::{Digest, Sha256};
use sqlx::Row;
use std::time::Duration;

/// How long a new holder waits for its bell while waiters take it in passing
/// (each gives it back in the statement that took it) or the previous holder
/// gives it back.
const KEEP_WITHIN: Duration = Duration::from_secs(1);

impl Table {
    /// `key`'s bell: `distlock:` and 40 hex digits of the SHA-256 of the
    /// table's name, a zero byte and the row's name.
    fn bell(&self, key: &LockKey) -> String {
        let mut hash = Sha256::new();
        hash.update(self.name.as_str().as_bytes());
        hash.update([0]);
        hash.update(row_name(key));
        let hex: String = hash.finalize()[..20]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        format!("distlock:{hex}")
    }
}

impl Doorbell for Table {
    fn keep(&self, key: &LockKey) -> Ringer {
        let (ringer, Keeper { rung, done }) = Ringer::new();
        let (holders, bell) = (self.holders.clone(), self.bell(key));
        tokio::spawn(async move {
            // Dropped when this ends: the release that rang stops waiting.
            let _done = done;
            let Some(Ok(mut conn)) = holders.try_get().await else {
                return;
            };
            // Dropped while it keeps the bell, the connection is closed, and the
            // server gives the bell back.
            conn.may_hold();
            let keep = sqlx::query(BELL_KEEP)
                .bind(bell.clone())
                .bind(KEEP_WITHIN.as_secs());
            if !matches!(answer(&mut conn, keep).await, Some(1)) {
                return;
            }
            // Rung, or the lease dropped without a release.
            let _ = rung.await;
            let give_back = sqlx::query(BELL_GIVE_BACK).bind(bell);
            if answer(&mut conn, give_back).await == Some(1) {
                conn.holds_nothing();
            }
        });
        ringer
    }

    fn wait<'a>(&'a self, key: &'a LockKey, bound: Duration) -> BoxFuture<'a, Rung> {
        Box::pin(async move {
            let Some(Ok(mut conn)) = self.holders.try_get().await else {
                return Rung::Unkept;
            };
            let bell = self.bell(key);
            // GET_LOCK takes whole seconds; the caller's wait cuts it short.
            let secs = bound.as_secs() + u64::from(bound.subsec_nanos() > 0);
            let wait = sqlx::query(BELL_WAIT)
                .bind(bell.clone())
                .bind(bell.clone())
                .bind(secs)
                .bind(bell);
            let limit = bound + self.holders.timeout();
            match conn.fetch_optional_within(wait, limit).await {
                Ok(Some(row)) => match row.try_get::<Option<i64>, _>(0) {
                    Ok(Some(1)) => Rung::Rang,
                    Ok(Some(0)) => Rung::TimedOut,
                    _ => Rung::Unkept,
                },
                _ => Rung::Unkept,
            }
        })
    }
}

/// The first column of `query`'s one row, as a number.
async fn answer(conn: &mut Conn, query: Statement) -> Option<i64> {
    let row = conn.fetch_one(query).await.ok()?;
    row.try_get::<Option<i64>, _>(0).ok().flatten()
}
