//! A scenario for backends that keep per-name rows (the SQL adapters), beside
//! the conformance cases because it reaches behind the client: rows of names
//! idle for `state_ttl` are deleted by the acquires of new names, and a name
//! whose tokens are far ahead of the server clock (as after the clock stepped
//! back) still gets a higher token after its rows were collected. And the
//! upgrade of a lock table made by hand before the `holder` column.

use async_trait::async_trait;
use distlock_core::{AcquireOptions, BoxError, DynLock, LockError, LockKey};
use std::future::Future;
use std::time::{Duration, Instant};

/// What the scenario reads and changes on the server as an operator.
#[async_trait]
pub trait RowDatabase: Send + Sync {
    /// How many lock rows names starting with `prefix` have.
    async fn rows(&self, prefix: &str) -> Result<u64, BoxError>;
    /// Raises the fence of `name`'s lock row by `by`.
    async fn push_ahead(&self, name: &str, by: u64) -> Result<(), BoxError>;
    /// The namespace's floor in the high-water table.
    async fn floor(&self) -> Result<u64, BoxError>;
}

/// Takes and releases `name` once; its token.
async fn use_once(lock: &DynLock, name: &str) -> Result<u64, BoxError> {
    let opts = AcquireOptions::new().ttl(Duration::from_millis(500));
    let lease = lock.acquire(&LockKey::new(name)?, &opts).await?;
    let token = lease.token().get();
    lease.release().await?;
    Ok(token)
}

/// `lock` runs with `state_ttl`. 100 names used once leave no row once idle,
/// collected by the acquires of new names that follow; the floor keeps their
/// tokens; and a collected name's next token is above its earlier ones,
/// which were put ten days ahead of the server clock first (so a seed from
/// the clock alone would go back).
pub async fn collected_names_rise_above_a_clock_behind(
    lock: &DynLock,
    db: &dyn RowDatabase,
    state_ttl: Duration,
) -> Result<(), BoxError> {
    for i in 0..100 {
        use_once(lock, &format!("used/{i}")).await?;
    }
    let mut last = 0;
    for _ in 0..3 {
        last = use_once(lock, "reused").await?;
    }
    // The last names' rows are younger than the ttl plus `state_ttl` (the
    // first ones' may be gone already on a slow machine).
    let used = db.rows("used/").await?;
    if used == 0 || used > 100 {
        return Err(format!("{used} rows for 100 names just used").into());
    }
    let ahead = 10 * 24 * 3600 * 1_000_000_u64;
    db.push_ahead("reused", ahead).await?;
    let highest = last + ahead;
    // Each new name's acquire collects up to 16 idle rows.
    let deadline = Instant::now() + state_ttl + Duration::from_secs(30);
    let mut fresh = 0;
    while db.rows("used/").await? + db.rows("reused").await? > 0 {
        if Instant::now() > deadline {
            return Err(format!("idle rows left after {fresh} new names").into());
        }
        fresh += 1;
        use_once(lock, &format!("fresh/{fresh}")).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let floor = db.floor().await?;
    if floor < highest {
        return Err(format!("floor {floor} below the collected token {highest}").into());
    }
    let after = use_once(lock, "reused").await?;
    if after <= highest {
        return Err(format!("token {after} after collection, not above {highest}").into());
    }
    // What is left is the recent names only.
    let left = db.rows("fresh/").await?;
    if left > fresh {
        return Err(format!("{left} rows for {fresh} new names").into());
    }
    Ok(())
}

/// A lock table made by hand before the `holder` column: `refused`, the
/// connect without `create_table`, must be a configuration error naming
/// `add`, the statement that adds the column; `added` runs it and connects
/// again, and that client's holders are named with their label.
pub async fn holder_column_is_named_then_used(
    refused: Result<DynLock, LockError>,
    add: &str,
    added: impl Future<Output = Result<DynLock, BoxError>>,
) -> Result<(), BoxError> {
    match refused {
        Err(LockError::Config { reason, .. }) if reason.contains(add) => {}
        other => return Err(format!("a table without `holder` gave {other:?}").into()),
    }
    let lock = added.await?;
    let key = LockKey::new("by-hand")?;
    let lease = lock
        .acquire(&key, &AcquireOptions::new().label("x"))
        .await?;
    let inspect = lock.inspect().ok_or("no inspector")?;
    let holder = inspect.holder(&key).await?.ok_or("no holder")?;
    let label = holder.meta.as_ref().and_then(|meta| meta.label());
    if label != Some("x") {
        return Err(format!("the holder is {holder:?}, without the label").into());
    }
    lease.release().await?;
    Ok(())
}
