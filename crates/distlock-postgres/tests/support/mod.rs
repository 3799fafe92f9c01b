//! Shared by the adapter's own tests: a real PostgreSQL server per test, clients
//! on it, and superuser access for what an operator would do.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use distlock_core::{AcquireOptions, DynLock, LockError, LockKey, Wait};
use distlock_postgres::{PostgresConfig, Strategy};
use distlock_testkit::servers::PostgresServer;
use distlock_testkit::state_rows::Operator;
pub use distlock_testkit::support::eventually;
use distlock_testkit::support::start_server;
use sqlx::postgres::PgListener;
use std::time::Duration;

/// Starts a server of the test's own (a missing binary fails with the install
/// command, never skips).
pub async fn server() -> PostgresServer {
    start_server("PostgreSQL", PostgresServer::start()).await
}

/// A connected client of `strategy` on `table`.
pub async fn client(server: &PostgresServer, strategy: Strategy, table: &str) -> DynLock {
    PostgresConfig::from_url(&server.url())
        .expect("the launcher's URL parses")
        .strategy(strategy)
        .table(table)
        .connect()
        .await
        .expect("client connects")
}

/// Runs superuser SQL and returns the first field of the first row.
pub async fn admin_value(server: &PostgresServer, sql: &str) -> String {
    server.value(sql).await.expect("superuser SQL runs")
}

/// Notifies `marker` on `channel` from another session and asserts that it
/// is the next notification `heard` receives: nothing committed before it
/// notified the channel (notifications arrive in commit order).
pub async fn nothing_before(
    heard: &mut PgListener,
    server: &PostgresServer,
    channel: &str,
    marker: &str,
) {
    server
        .exec_admin(&format!("SELECT pg_notify('{channel}', '{marker}');"))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), heard.recv())
        .await
        .expect("the marker arrives")
        .unwrap();
    assert_eq!(
        next.payload(),
        marker,
        "a notification came before the marker"
    );
}

/// The sessions that hold a waiter mark: a granted shared advisory lock on
/// the two `int4`s whose `classid` and `objid` the SQL expressions give.
pub async fn mark_holders(server: &PostgresServer, classid: &str, objid: &str) -> Vec<String> {
    let sql = format!(
        "SELECT coalesce(string_agg(pid::TEXT, ',' ORDER BY pid), '') FROM pg_locks \
         WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND mode = 'ShareLock' \
         AND classid::BIGINT = {classid} AND objid::BIGINT = {objid};"
    );
    let pids = admin_value(server, &sql).await;
    pids.split(',')
        .filter(|pid| !pid.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A release notifies only when a waiter marked the name, checked alike for
/// both strategies on `table`: no uncontended release notifies; a waiter's
/// mark (`marks` counts them) makes the release notify, with `then` run
/// between the mark and that release; the winner's mark goes; a waiter that
/// gives up leaves none; a try that does not wait never marks.
pub async fn only_marked_names_notify(
    server: &PostgresServer,
    strategy: Strategy,
    table: &str,
    marks: impl AsyncFn(&LockKey) -> usize,
    then: impl AsyncFnOnce(&LockKey),
) {
    let (a, b) = (
        client(server, strategy, table).await,
        client(server, strategy, table).await,
    );
    let mut heard = PgListener::connect(&server.url()).await.unwrap();
    heard.listen(table).await.unwrap();
    let key = LockKey::new("jobs/quiet").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    // A new name (its row created), then a known one: nobody waits, so no
    // release notifies.
    distlock_testkit::cycles(&*a, &key, &opts, 2).await.unwrap();
    nothing_before(&mut heard, server, table, "uncontended").await;

    let lease = a.acquire(&key, &opts).await.unwrap();
    let first = lease.token();
    let waits = opts.clone().wait(Wait::For(Duration::from_secs(10)));
    let waiter = tokio::spawn({
        let (b, key, waits) = (b.clone(), key.clone(), waits.clone());
        async move { b.acquire(&key, &waits).await }
    });
    eventually(Duration::from_secs(5), "the waiter's mark", async || {
        marks(&key).await == 1
    })
    .await;
    then(&key).await;
    lease.release().await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(5), heard.recv())
        .await
        .expect("the release notifies the marked name")
        .unwrap();
    assert_eq!(woken.payload(), "distlock\njobs/quiet");
    let next = waiter.await.unwrap().unwrap();
    assert!(next.token() > first);
    eventually(
        Duration::from_secs(5),
        "the winner's mark dropped",
        async || marks(&key).await == 0,
    )
    .await;
    next.release().await.unwrap();
    nothing_before(&mut heard, server, table, "the waiter won").await;

    // A waiter that gives up leaves no mark.
    let lease = a.acquire(&key, &opts).await.unwrap();
    let short = opts.clone().wait(Wait::For(Duration::from_millis(300)));
    match b.acquire(&key, &short).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected the wait to end, got {other:?}"),
    }
    eventually(Duration::from_secs(5), "the mark is gone", async || {
        marks(&key).await == 0
    })
    .await;
    // A try that does not wait never marks.
    let busy = b.acquire(&key, &opts.clone().wait(Wait::No)).await;
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
    assert_eq!(marks(&key).await, 0, "no wait, no mark");
    lease.release().await.unwrap();
    nothing_before(&mut heard, server, table, "the waiter gave up").await;
}
