//! A benchmark's floor: one attempt and the release of what it won, on one
//! connection, with no wait. Where the adapter has doorbells, the attempt
//! takes the name's bell and the release gives it back, as a lock cycle's
//! do: a cycle cannot skip them (a waiter could not queue), so they are part
//! of the protocol's minimal requests.

use super::{Attempt, Bid, Contender, OwnerChecked, RowHandle};
use crate::db_error::DbError;
use crate::table::{Db, LockTable, TableDb, statement};
use distlock_core::adapter::WaitUntil;
use distlock_core::toolkit::random_owner;
use distlock_core::{HolderMeta, LockKey};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One attempt of `contender` and the release of what it won, on one
/// connection, as a benchmark's floor: `Ok(false)` when the row was held.
pub async fn floor_cycle<A: LockTable, C: Contender<A>>(
    table: &A,
    contender: &C,
    rows: &OwnerChecked,
    key: &LockKey,
    ttl: Duration,
) -> Result<bool, DbError> {
    let bid = Bid {
        key,
        row: table.key(key),
        owner: random_owner().into(),
        meta: HolderMeta::this_process().encode().into(),
        ttl,
        until: WaitUntil::Deadline(Instant::now() + table.pool().timeout()),
    };
    let mut contender = contender.clone();
    let belled = match table.doorbell() {
        Some(bell) => bell.connection().await.map(|conn| (bell, conn)),
        None => None,
    };
    // Dropped on an error or a held row while it may keep the bell, the
    // connection is closed, which gives the bell back.
    let (mut conn, bell, attempt) = match belled {
        Some((bell, mut conn)) => {
            let (attempt, _) = contender
                .attempt_belled(table, &bid, &mut conn, bell, Duration::ZERO)
                .await?;
            (conn, Some(bell), attempt)
        }
        None => {
            let mut conn = Db::<A>::connection(table.pool()).await?;
            let attempt = contender.attempt(table, &bid, &mut conn).await?;
            (conn, None, attempt)
        }
    };
    let Attempt::Won { token: fence, .. } = attempt else {
        return Ok(false);
    };
    let handle: RowHandle<A::Dialect> = RowHandle {
        key: bid.row,
        owner: bid.owner,
        fence,
        bell: Mutex::new(None),
    };
    let values = rows.values(None, &handle);
    match bell {
        Some(bell) => {
            bell.release(&mut conn, (&rows.release, &values)).await?;
            conn.holds_nothing();
        }
        None => {
            Db::<A>::run(&mut conn, statement(&rows.release, &values)).await?;
        }
    }
    Ok(true)
}
