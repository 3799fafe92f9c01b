//! Fence counter rows (`unique_insert`, `for_update`, `lock_in`): raised
//! once a lock is held, created above the namespace's floor when missing,
//! and collected once idle for `state_ttl` by the transaction that creates
//! another name's counter (see distlock-sql's `state`).
//!
//! `for_update`'s collection. A holder is an open transaction that commits
//! nothing, so no committed row tells a held name from an idle one; a locked
//! row does. Each raise stamps the counter with the end of the lease it is
//! raised for; lock rows keep no stamp. The collection:
//! - reads up to [`SWEEP`] counters whose stamp is `state_ttl` old, without
//!   locks; none found, it only shares the floor's lock, as any creation;
//! - otherwise locks the floor (one collection at a time per table), then
//!   those counters and their lock rows with `FOR UPDATE SKIP LOCKED`: a row
//!   a holder (or anyone) has locked is skipped, never waited for, so the
//!   collection holds the floor only for statements that wait on nobody;
//! - deletes the names whose lock row it locked (or that have none) and whose
//!   counter, read again under its lock, is still idle, after raising the
//!   floor to the highest of their fences; the counter of a name held (its
//!   lock row skipped) is stamped with now instead, so held names never fill
//!   the oldest rows the next collection reads.
//!
//! Invariants: a name's counter is deleted only in a transaction that holds
//! its lock row (or saw none) and the floor, which it raised to the counter's
//! fence, so the name's next counter starts above every token it gave; a lock
//! row is deleted only with its counter; the collection runs at READ
//! COMMITTED, so it locks no gaps an insert of a new name could meet.

use crate::backend::{Settle, Table};
use crate::error::DbError;
use crate::keys::counter_name;
use crate::pool::Conn;
use crate::protocol::inspect::NEXT_READ_COMMITTED;
use crate::protocol::{HELD_DELETE, HELD_LOCK, HELD_RESTAMP, Strategy, for_names};
use distlock_core::adapter::WaitUntil;
use distlock_sql::cas::HELD_FLAG;
use distlock_sql::state::SWEEP;
use distlock_sql::table::micros;
use sqlx::{AssertSqlSafe, FromRow, SqlSafeStr};
use std::time::Duration;

/// A row [`HELD_LOCK`] locked: its name, fence, and whether it is idle.
type Locked = (Vec<u8>, u64, Option<i64>);

impl Table {
    /// Raises the counter row of `row` on `conn`, stamped `stamp` from now,
    /// and returns the new token; a missing row (a new name, or one
    /// collected) is created first, on a connection of its own, in a
    /// transaction that collects idle rows and seeds it above the floor.
    /// Row-lock contention is retried until `until`.
    pub async fn raise_counter(
        &self,
        conn: &mut Conn,
        row: &[u8],
        stamp: Duration,
        until: WaitUntil,
    ) -> Result<u64, DbError> {
        let counter = counter_name(row);
        let bump = || {
            let bump = sqlx::query(self.sql.counter_bump.clone());
            bump.bind(micros(stamp)).bind(&*counter)
        };
        let mut retry = Settle::new(until);
        let raised = async |conn: &mut Conn| {
            let done = conn.execute(bump()).await?;
            if done.last_insert_id() != 0 {
                return Ok(done.last_insert_id());
            }
            self.create_counter(&counter).await?;
            Ok::<_, DbError>(conn.execute(bump()).await?.last_insert_id())
        };
        let token = loop {
            match raised(conn).await {
                Ok(token) => break token,
                Err(e) => retry.again(e).await?,
            }
        };
        match token {
            token if token != 0 && token & HELD_FLAG == 0 => Ok(token),
            other => Err(DbError::Protocol(format!(
                "the fence counter returned {other}"
            ))),
        }
    }

    /// Creates the counter row `counter` above the floor, in one transaction
    /// on a connection of its own that first collects idle rows.
    async fn create_counter(&self, counter: &[u8]) -> Result<(), DbError> {
        let insert = |floor: u64| {
            let insert = sqlx::query(self.sql.counter_insert.clone());
            insert.bind(counter).bind(floor)
        };
        let mut conn = self.pool.get().await?;
        if self.strategy != Strategy::ForUpdate {
            return self.counters.create_row(self, &mut conn, insert).await;
        }
        let limit = self.pool.timeout();
        let text = |sql: &'static str| AssertSqlSafe(sql).into_sql_str();
        // From the isolation level on, the connection is closed unless the
        // commit is answered.
        conn.may_hold();
        conn.execute_text(text(NEXT_READ_COMMITTED), limit).await?;
        conn.execute_text(text("BEGIN"), limit).await?;
        let floor = self.collect_held(&mut conn).await?;
        conn.execute(insert(floor)).await?;
        conn.execute_text(text("COMMIT"), limit).await?;
        conn.holds_nothing();
        Ok(())
    }

    /// for_update: collects up to [`SWEEP`] idle names inside the
    /// transaction open on `conn` (see the module docs); the floor.
    async fn collect_held(&self, conn: &mut Conn) -> Result<u64, DbError> {
        let ttl = micros(self.state_ttl);
        let idle = sqlx::query(self.sql.held_idle.clone())
            .bind(ttl)
            .bind(SWEEP);
        let idle = conn.fetch_all(idle).await?;
        if idle.is_empty() {
            return self.counters.floor(self, conn, false).await;
        }
        let floor = self.counters.floor(self, conn, true).await?;
        // Each counter, and its lock row where one exists.
        let mut candidates = Vec::with_capacity(idle.len());
        for row in &idle {
            let (counter, has_lock_row) = <(Vec<u8>, i64)>::from_row(row).map_err(DbError::Sql)?;
            let lock_row = counter[..counter.len().saturating_sub(1)].to_vec();
            candidates.push((counter, (has_lock_row != 0).then_some(lock_row)));
        }
        let names: Vec<&[u8]> = candidates
            .iter()
            .flat_map(|(counter, lock_row)| [Some(counter), lock_row.as_ref()])
            .flatten()
            .map(Vec::as_slice)
            .collect();
        let lock = for_names(HELD_LOCK, &self.name, names.len());
        let lock = names
            .iter()
            .fold(sqlx::query(lock).bind(ttl), |q, name| q.bind(name));
        let locked = conn.fetch_all(lock).await?;
        let locked: Vec<Locked> = locked
            .iter()
            .map(|row| Locked::from_row(row).map_err(DbError::Sql))
            .collect::<Result<_, _>>()?;
        let find = |name: &[u8]| locked.iter().find(|(locked, ..)| locked == name);
        let (mut collected, mut held, mut highest) = (Vec::new(), Vec::new(), 0);
        for (counter, lock_row) in &candidates {
            // Skipped: a raise has it locked right now.
            let Some((_, fence, idle)) = find(counter) else {
                continue;
            };
            match lock_row {
                Some(lock_row) if find(lock_row).is_none() => held.push(counter.clone()),
                // Raised since it was read: used, not idle.
                _ if *idle != Some(1) => {}
                lock_row => {
                    highest = highest.max(*fence);
                    collected.push(counter.clone());
                    collected.extend(lock_row.clone());
                }
            }
        }
        if !held.is_empty() {
            let restamp = for_names(HELD_RESTAMP, &self.name, held.len());
            let restamp = held
                .into_iter()
                .fold(sqlx::query(restamp), |q, n| q.bind(n));
            conn.execute(restamp).await?;
        }
        let floor = self.counters.raise(self, conn, floor, highest).await?;
        if !collected.is_empty() {
            let delete = for_names(HELD_DELETE, &self.name, collected.len());
            let delete = collected
                .into_iter()
                .fold(sqlx::query(delete), |q, n| q.bind(n));
            conn.execute(delete.bind(floor)).await?;
        }
        Ok(floor)
    }
}
