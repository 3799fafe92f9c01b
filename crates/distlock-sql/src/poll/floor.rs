//! A benchmark's floor: one attempt and the release of what it won, on one
//! connection, with no wait: the statements of an uncontended cycle, the
//! doorbell's included, without the lease around them.

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
        owner: random_owner(),
        meta: HolderMeta::this_process().encode(),
        ttl,
        until: WaitUntil::Deadline(Instant::now() + table.pool().timeout()),
    };
    let handle = |fence| RowHandle::<A::Dialect> {
        key: bid.row.clone(),
        owner: bid.owner.clone(),
        fence,
        bell: Mutex::new(None),
    };
    // Where the adapter has doorbells, they are part of the protocol: the
    // attempt takes the name's bell in the same text (waiting for none, as a
    // first attempt does) and the release gives it back in the same text.
    let belled = match table.doorbell() {
        Some(bell) => bell.connection().await.map(|conn| (bell, conn)),
        None => None,
    };
    if let Some((bell, mut conn)) = belled {
        // Dropped on an error, the connection is closed, and the bell with it.
        let attempt = contender
            .clone()
            .attempt_belled(table, &bid, &mut conn, bell, Duration::ZERO)
            .await?;
        let Attempt::Won { token, .. } = attempt.0 else {
            return Ok(false);
        };
        let values = rows.values(None, &handle(token));
        bell.release(&mut conn, (&rows.release, &values)).await?;
        conn.holds_nothing();
        return Ok(true);
    }
    let mut conn = Db::<A>::connection(table.pool()).await?;
    let fence = match contender.clone().attempt(table, &bid, &mut conn).await? {
        Attempt::Won { token, .. } => token,
        Attempt::Held { .. } => return Ok(false),
    };
    let release = statement(&rows.release, rows.values(None, &handle(fence)));
    Db::<A>::run(&mut conn, release).await?;
    Ok(true)
}
