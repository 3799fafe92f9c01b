//! A scenario for backends that keep per-name rows (the SQL adapters), beside
//! the conformance cases because it reaches behind the client: rows of names
//! idle for `state_ttl` are deleted by the acquires of new names, and a name
//! whose tokens are far ahead of the server clock (as after the clock stepped
//! back) still gets a higher token after its rows were collected. And the
//! upgrade of a lock table made by hand before the `holder` column.

use crate::servers::{MariaDbServer, PostgresServer};
use async_trait::async_trait;
use distlock_core::{AcquireOptions, BoxError, DynLock, LockError, LockKey, Wait};
use std::future::Future;
use std::time::{Duration, Instant};

/// What the scenario reads and changes on the server as an operator.
#[async_trait]
pub trait RowDatabase: Send + Sync {
    /// How many lock rows names starting with `prefix` have.
    async fn rows(&self, prefix: &str) -> Result<u64, BoxError>;
    /// How many rows a name just used and released keeps.
    fn rows_per_name(&self) -> u64;
    /// Raises the fence of `name`'s lock row by `by`.
    async fn push_ahead(&self, name: &str, by: u64) -> Result<(), BoxError>;
    /// The namespace's floor in the high-water table.
    async fn floor(&self) -> Result<u64, BoxError>;
    /// The server's wall clock, in µs since the epoch.
    async fn clock_micros(&self) -> Result<u64, BoxError>;
}

/// A SQL server as its operator reaches it.
#[async_trait]
pub trait Operator: Send + Sync {
    /// Runs `sql` as the server's superuser; the first field of its first row.
    async fn value(&self, sql: &str) -> Result<String, BoxError>;
}

#[async_trait]
impl Operator for MariaDbServer {
    async fn value(&self, sql: &str) -> Result<String, BoxError> {
        let out = self.exec_root(sql).await?;
        let first = out.lines().next().and_then(|line| line.split('\t').next());
        Ok(first.unwrap_or_default().to_owned())
    }
}

#[async_trait]
impl Operator for PostgresServer {
    async fn value(&self, sql: &str) -> Result<String, BoxError> {
        let out = self.exec_admin(sql).await?;
        let first = out.lines().next().and_then(|line| line.split('|').next());
        Ok(first.unwrap_or_default().trim().to_owned())
    }
}

/// A lock table of a SQL server, read and changed with operator SQL.
pub struct SqlRows<'a> {
    /// Who runs the SQL.
    pub operator: &'a dyn Operator,
    /// The table, as the operator names it.
    pub table: String,
    /// The rows that hold the fence of the name `{name}`: an SQL condition.
    pub fence_rows: &'static str,
    /// SQL that reads the server's wall clock, in µs since the epoch.
    pub clock: &'static str,
    /// How many rows a name just used and released keeps (its lock row, its
    /// counter row, or both).
    pub per_name: u64,
}

impl std::fmt::Debug for SqlRows<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlRows")
            .field("table", &self.table)
            .finish()
    }
}

#[async_trait]
impl RowDatabase for SqlRows<'_> {
    async fn rows(&self, prefix: &str) -> Result<u64, BoxError> {
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE name LIKE '{prefix}%';",
            self.table
        );
        Ok(self.operator.value(&sql).await?.parse()?)
    }

    fn rows_per_name(&self) -> u64 {
        self.per_name
    }

    async fn push_ahead(&self, name: &str, by: u64) -> Result<(), BoxError> {
        let rows = self.fence_rows.replace("{name}", name);
        let sql = format!(
            "UPDATE {} SET fence = fence + {by} WHERE {rows};",
            self.table
        );
        self.operator.value(&sql).await?;
        Ok(())
    }

    async fn floor(&self) -> Result<u64, BoxError> {
        let sql = format!("SELECT floor FROM {}_hw;", self.table);
        Ok(self.operator.value(&sql).await?.parse()?)
    }

    async fn clock_micros(&self) -> Result<u64, BoxError> {
        Ok(self.operator.value(self.clock).await?.parse()?)
    }
}

/// Takes and releases `name` once; its token.
pub async fn use_once(lock: &DynLock, name: &str) -> Result<u64, BoxError> {
    // 1 s: the shortest ttl of every strategy; a bounded wait, so that an
    // acquire that cannot succeed fails the case instead of hanging it.
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(1))
        .wait(Wait::For(Duration::from_secs(20)));
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
    if used == 0 || used > 100 * db.rows_per_name() {
        return Err(format!("{used} rows for 100 names just used").into());
    }
    let ahead = 10 * 24 * 3600 * 1_000_000_u64;
    db.push_ahead("reused", ahead).await?;
    let highest = last + ahead;
    let fresh = collect(lock, db, &["used/", "reused"], state_ttl).await?;
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
    if left > fresh * db.rows_per_name() {
        return Err(format!("{left} rows for {fresh} new names").into());
    }
    Ok(())
}

/// Uses new names (`fresh/<n>`) until the names under `prefixes` have no row
/// left (each new name's acquire collects up to 16 idle rows); how many.
pub async fn collect(
    lock: &DynLock,
    db: &dyn RowDatabase,
    prefixes: &[&str],
    state_ttl: Duration,
) -> Result<u64, BoxError> {
    let deadline = Instant::now() + state_ttl + Duration::from_secs(30);
    let mut fresh = 0;
    loop {
        let mut left = 0;
        for prefix in prefixes {
            left += db.rows(prefix).await?;
        }
        if left == 0 {
            return Ok(fresh);
        }
        if Instant::now() > deadline {
            return Err(format!("{left} idle rows left after {fresh} new names").into());
        }
        fresh += 1;
        use_once(lock, &format!("fresh/{fresh}")).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `lock` runs with `state_ttl` on a server whose wall clock `step_back`
/// sets an hour back. A name used three times and then collected gets, after
/// the step, a token above all three: from the floor, the clock being below.
pub async fn collected_name_rises_after_the_clock_steps_back(
    lock: &DynLock,
    db: &dyn RowDatabase,
    state_ttl: Duration,
    step_back: impl FnOnce() -> Result<(), BoxError>,
) -> Result<(), BoxError> {
    let mut last = 0;
    for _ in 0..3 {
        last = use_once(lock, "orders/42").await?;
    }
    collect(lock, db, &["orders/"], state_ttl).await?;
    step_back()?;
    let now = db.clock_micros().await?;
    if now >= last {
        return Err(format!("the server clock ({now} µs) did not step back below {last}").into());
    }
    let after = use_once(lock, "orders/42").await?;
    if after <= last {
        return Err(format!("token {after} after the clock stepped back, not above {last}").into());
    }
    Ok(())
}

/// `lock` runs with `state_ttl`. A name held for longer than `state_ttl`
/// (renewed all along) keeps its rows while new names' acquires collect idle
/// ones around it, and once released and used again its token rises.
pub async fn a_held_name_keeps_its_counter(
    lock: &DynLock,
    db: &dyn RowDatabase,
    state_ttl: Duration,
) -> Result<(), BoxError> {
    let key = LockKey::new("held")?;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(1));
    let lease = lock.acquire(&key, &opts).await?;
    let token = lease.token().get();
    let rows = db.rows("held").await?;
    let until = Instant::now() + state_ttl * 2;
    let mut fresh = 0;
    while Instant::now() < until {
        fresh += 1;
        use_once(lock, &format!("fresh/{fresh}")).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Collection is live: the first new names are idle by now, and go.
    use_once(lock, "fresh/last").await?;
    let left = db.rows("fresh/").await?;
    if left > fresh * db.rows_per_name() {
        return Err(format!("{left} rows for {fresh} new names: nothing collected").into());
    }
    let kept = db.rows("held").await?;
    if kept != rows || !lease.is_held() {
        return Err(format!(
            "the held name had {rows} rows and has {kept} after {state_ttl:?} held (held: {})",
            lease.is_held()
        )
        .into());
    }
    lease.release().await?;
    let after = use_once(lock, "held").await?;
    if after <= token {
        return Err(format!("token {after} after {token}").into());
    }
    Ok(())
}

/// A lock table made by hand before a column this release needs (`holder`,
/// PostgreSQL `version_cas`'s `used_at`): `refused`, the connect without
/// `create_table`, must be a configuration error naming `add`, the statement
/// that adds the column; `added` runs it and connects again, and that
/// client's holders are named with their label.
pub async fn missing_column_is_named_then_used(
    refused: Result<DynLock, LockError>,
    add: &str,
    added: impl Future<Output = Result<DynLock, BoxError>>,
) -> Result<(), BoxError> {
    match refused {
        Err(LockError::Config { reason, .. }) if reason.contains(add) => {}
        other => return Err(format!("a table without the column gave {other:?}").into()),
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
