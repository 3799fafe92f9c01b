//! A benchmark's floor: one attempt and the release of what it won, on one
//! connection, with no wait and no doorbell.

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
    let mut conn = Db::<A>::connection(table.pool()).await?;
    let fence = match contender.clone().attempt(table, &bid, &mut conn).await? {
        Attempt::Won { token, .. } => token,
        Attempt::Held { .. } => return Ok(false),
    };
    let handle: RowHandle<A::Dialect> = RowHandle {
        key: bid.row,
        owner: bid.owner,
        fence,
        bell: Mutex::new(None),
    };
    let release = statement(&rows.release, rows.values(None, &handle));
    Db::<A>::run(&mut conn, release).await?;
    Ok(true)
}
