//! Row-lock contention never reaches the caller as a server error: a statement
//! that another transaction made wait too long (1205) or picked as a deadlock
//! victim (1213) is retried within the caller's wait, so every path ends with
//! the lock, a clean `Timeout` or `Busy`, or (renew, release) success.
//!
//! A blocker is a plain session of the test user that holds a lock row or a
//! counter row in an open transaction for longer than the adapter's 1 s lock
//! wait: every statement of the adapter that needs that row gets 1205 at least
//! once. Deadlocks are the classic three-session one: two inserts of the same
//! name queue behind a third session's uncommitted insert, which rolls back.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, DynLock, Lease, LockError, LockKey, Renewal, Wait};
use distlock_mysql::{Strategy, counter_name, row_name};
use distlock_testkit::servers::MariaDbServer;
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, Row};
use std::time::{Duration, Instant};
use support::{client, eventually};
use tokio::sync::OnceCell;

/// Longer than the adapter's lock wait (1 s), so its statements time out on it.
const HOLD: Duration = Duration::from_millis(2500);

/// One server for this file's tests; each uses tables of its own.
async fn server() -> &'static MariaDbServer {
    static SERVER: OnceCell<MariaDbServer> = OnceCell::const_new();
    SERVER.get_or_init(support::server).await
}

/// A session holding a row in an open transaction.
struct Blocker {
    conn: MySqlConnection,
}

impl Blocker {
    async fn connect(server: &MariaDbServer) -> Self {
        let mut conn = MySqlConnection::connect(&server.url()).await.unwrap();
        sqlx::query("START TRANSACTION")
            .execute(&mut conn)
            .await
            .unwrap();
        Blocker { conn }
    }

    /// Locks the existing row `name` of `table`.
    async fn lock(server: &MariaDbServer, table: &str, name: Vec<u8>) -> Self {
        let mut blocker = Self::connect(server).await;
        let sql = format!("SELECT name FROM `{table}` WHERE name = ? FOR UPDATE");
        let found = sqlx::query(AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(&mut blocker.conn)
            .await
            .unwrap();
        assert!(found.is_some(), "the row to block exists");
        blocker
    }

    /// Inserts row `name` into `table` without committing: others inserting or
    /// locking that name wait for this transaction.
    async fn insert(server: &MariaDbServer, table: &str, name: Vec<u8>) -> Self {
        let mut blocker = Self::connect(server).await;
        let sql = format!(
            "INSERT INTO `{table}` (name, owner, fence, expires_at) \
             VALUES (?, 'blocker', 0, NOW(6) + INTERVAL 1 HOUR)"
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(name)
            .execute(&mut blocker.conn)
            .await
            .unwrap();
        blocker
    }

    /// Ends the transaction after `hold`, in the background.
    fn roll_back_after(mut self, hold: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            self.roll_back().await;
        })
    }

    async fn roll_back(&mut self) {
        sqlx::query("ROLLBACK")
            .execute(&mut self.conn)
            .await
            .unwrap();
    }
}

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

fn waiting(limit: Duration) -> AcquireOptions {
    AcquireOptions::new().wait(Wait::For(limit))
}

/// Creates the lock row of `key` (and its counter row) by one acquire/release.
async fn create_rows(lock: &DynLock, key: &LockKey) {
    lock.acquire(key, &AcquireOptions::new())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Runs `acquire` with a 30 s wait while a blocker ends after [`HOLD`]: it must
/// get the lock, no sooner than the blocker let go.
async fn acquire_once_released(lock: &DynLock, key: &LockKey, blocker: Blocker) -> Lease {
    let started = Instant::now();
    let released = blocker.roll_back_after(HOLD);
    let lease = lock.acquire(key, &waiting(Duration::from_secs(30))).await;
    let lease = lease.unwrap_or_else(|e| panic!("acquire through a blocked row: {e}"));
    assert!(
        started.elapsed() >= HOLD - Duration::from_millis(50),
        "got the lock after {:?}, before the blocker let go",
        started.elapsed()
    );
    released.await.unwrap();
    lease
}

/// While another transaction holds the lock row, `Wait::No` answers `Busy` (by
/// the 1 s lock wait) and a short wait `Timeout` (on time); a long wait gets
/// the lock once the row is free.
async fn blocked_lock_row(strategy: Strategy) {
    let server = server().await;
    let table = format!("row_{}", strategy.as_str());
    let (lock, other) = (
        client(server, strategy, &table).await,
        client(server, strategy, &table).await,
    );
    let key = key("blocked");
    let first = other.acquire(&key, &AcquireOptions::new()).await.unwrap();
    let first_token = first.token();
    first.release().await.unwrap();
    // A unique_insert row exists only while held: another transaction's
    // uncommitted insert is what holds it.
    let blocker = match strategy {
        Strategy::UniqueInsert => Blocker::insert(server, &table, row_name(&key)).await,
        _ => Blocker::lock(server, &table, row_name(&key)).await,
    };

    let started = Instant::now();
    let busy = lock.try_acquire(&key, &AcquireOptions::new()).await;
    assert!(matches!(busy, Ok(None)), "Wait::No gave {busy:?}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "Wait::No took {took:?}");
    let started = Instant::now();
    let short = lock
        .acquire(&key, &waiting(Duration::from_millis(600)))
        .await;
    assert!(
        matches!(short, Err(LockError::Timeout { .. })),
        "a short wait gave {short:?}"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1300), "the wait took {took:?}");

    let lease = acquire_once_released(&lock, &key, blocker).await;
    assert!(lease.token() > first_token);
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn version_cas_acquire_waits_out_a_blocked_row() {
    blocked_lock_row(Strategy::VersionCas).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unique_insert_acquire_waits_out_a_blocked_row() {
    blocked_lock_row(Strategy::UniqueInsert).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn for_update_acquire_waits_out_a_blocked_row() {
    blocked_lock_row(Strategy::ForUpdate).await;
}

/// A `for_update` waiter queues server-side for at most 10 s per statement: a
/// row held longer answers 1205, and the waiter queues again.
#[tokio::test(flavor = "multi_thread")]
async fn for_update_waits_past_the_servers_lock_wait_timeout() {
    let server = server().await;
    let table = "row_for_update_long";
    let lock = client(server, Strategy::ForUpdate, table).await;
    let key = key("blocked-long");
    create_rows(&lock, &key).await;
    let blocker = Blocker::lock(server, table, row_name(&key)).await;
    let started = Instant::now();
    let released = blocker.roll_back_after(Duration::from_secs(11));
    let lease = lock.acquire(&key, &waiting(Duration::from_secs(30))).await;
    let lease = lease.unwrap_or_else(|e| panic!("acquire through an 11 s block: {e}"));
    assert!(started.elapsed() >= Duration::from_secs(11));
    released.await.unwrap();
    lease.release().await.unwrap();
}

/// A name whose row another transaction inserted and has not committed: every
/// strategy waits it out (the row vanishes with the rollback) and takes the
/// name.
async fn uncommitted_foreign_insert(strategy: Strategy) {
    let server = server().await;
    let table = format!("fresh_{}", strategy.as_str());
    let lock = client(server, strategy, &table).await;
    let key = key("fresh");
    let blocker = Blocker::insert(server, &table, row_name(&key)).await;
    let lease = acquire_once_released(&lock, &key, blocker).await;
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn version_cas_waits_out_an_uncommitted_insert() {
    uncommitted_foreign_insert(Strategy::VersionCas).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unique_insert_waits_out_an_uncommitted_insert() {
    uncommitted_foreign_insert(Strategy::UniqueInsert).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn for_update_waits_out_an_uncommitted_insert() {
    uncommitted_foreign_insert(Strategy::ForUpdate).await;
}

/// The counter bump after the lock is won: with the counter row blocked,
/// `Wait::No` gives the lock back and answers `Busy`; a long wait gets the lock
/// with a higher token once the counter row is free.
async fn blocked_counter_row(strategy: Strategy) {
    let server = server().await;
    let table = format!("counter_{}", strategy.as_str());
    let (lock, other) = (
        client(server, strategy, &table).await,
        client(server, strategy, &table).await,
    );
    let key = key("counted");
    let first = lock.acquire(&key, &AcquireOptions::new()).await.unwrap();
    let first_token = first.token();
    first.release().await.unwrap();
    let counter = counter_name(&row_name(&key));
    let blocker = Blocker::lock(server, &table, counter.clone()).await;

    let busy = lock.try_acquire(&key, &AcquireOptions::new()).await;
    assert!(matches!(busy, Ok(None)), "Wait::No gave {busy:?}");
    // The lock it won for a moment was given back.
    let inspect = other.inspect().unwrap();
    eventually(
        Duration::from_secs(5),
        "the won row is given back",
        async || inspect.holder(&key).await.unwrap().is_none(),
    )
    .await;

    let lease = acquire_once_released(&lock, &key, blocker).await;
    assert!(lease.token() > first_token);
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn unique_insert_counter_bump_waits_out_a_blocked_counter() {
    blocked_counter_row(Strategy::UniqueInsert).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn for_update_counter_bump_waits_out_a_blocked_counter() {
    blocked_counter_row(Strategy::ForUpdate).await;
}

/// Renewal and release of the polling strategies wait through a blocked row
/// (the reply timeout is their budget) and succeed.
async fn renew_and_release_through_a_blocked_row(strategy: Strategy) {
    let server = server().await;
    let table = format!("renew_{}", strategy.as_str());
    let lock = client(server, strategy, &table).await;
    let key = key("renewed");
    let opts = AcquireOptions::new().renewal(Renewal::Manual);
    let lease = lock.acquire(&key, &opts).await.unwrap();

    let released = Blocker::lock(server, &table, row_name(&key))
        .await
        .roll_back_after(HOLD);
    let started = Instant::now();
    lease
        .renew()
        .await
        .unwrap_or_else(|e| panic!("renew through a blocked row: {e}"));
    assert!(started.elapsed() >= HOLD - Duration::from_millis(50));
    released.await.unwrap();

    let released = Blocker::lock(server, &table, row_name(&key))
        .await
        .roll_back_after(HOLD);
    let started = Instant::now();
    lease
        .release()
        .await
        .unwrap_or_else(|e| panic!("release through a blocked row: {e}"));
    assert!(started.elapsed() >= HOLD - Duration::from_millis(50));
    released.await.unwrap();
    assert!(
        lock.inspect()
            .unwrap()
            .holder(&key)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn version_cas_renew_and_release_wait_out_a_blocked_row() {
    renew_and_release_through_a_blocked_row(Strategy::VersionCas).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unique_insert_renew_and_release_wait_out_a_blocked_row() {
    renew_and_release_through_a_blocked_row(Strategy::UniqueInsert).await;
}

/// InnoDB's deadlock count.
async fn deadlocks(conn: &mut MySqlConnection) -> u64 {
    let row = sqlx::query("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
        .fetch_one(conn)
        .await
        .unwrap();
    row.get::<String, _>(1).parse().unwrap()
}

/// Sessions of the test user running a statement that starts with `text`.
async fn running(conn: &mut MySqlConnection, text: &str) -> i64 {
    let row = sqlx::query(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE ID <> CONNECTION_ID() AND INFO LIKE CONCAT(?, '%')",
    )
    .bind(text)
    .fetch_one(conn)
    .await
    .unwrap();
    row.get(0)
}

/// unique_insert: two clients insert the same new name behind a third
/// session's uncommitted insert; its rollback lets both in at once and InnoDB
/// kills one as a deadlock victim (1213). Both still get the lock, one after the
/// other.
///
/// (The other strategies cannot deadlock among themselves: a `version_cas`
/// statement is a single-row autocommit one, and a `for_update` waiter's
/// transaction holds no lock while it waits, nor does a holder ever wait.)
#[tokio::test(flavor = "multi_thread")]
async fn unique_insert_survives_a_deadlock() {
    let strategy = Strategy::UniqueInsert;
    let server = server().await;
    let table = format!("deadlock_{}", strategy.as_str());
    let (a, b) = (
        client(server, strategy, &table).await,
        client(server, strategy, &table).await,
    );
    let mut probe = MySqlConnection::connect(&server.url()).await.unwrap();
    let key = key("contested");
    let before = deadlocks(&mut probe).await;
    let mut blocker = Blocker::insert(server, &table, row_name(&key)).await;
    let contenders: Vec<_> = [a, b]
        .into_iter()
        .map(|lock| {
            let key = key.clone();
            tokio::spawn(async move {
                let lease = lock.acquire(&key, &waiting(Duration::from_secs(30))).await;
                let lease = lease.unwrap_or_else(|e| panic!("a deadlocked contender: {e}"));
                lease.release().await.unwrap();
            })
        })
        .collect();
    let queued = format!("INSERT INTO `{table}`");
    eventually(Duration::from_secs(10), "both inserts queue", async || {
        running(&mut probe, &queued).await == 2
    })
    .await;
    blocker.roll_back().await;
    for contender in contenders {
        contender.await.unwrap();
    }
    let after = deadlocks(&mut probe).await;
    assert!(after > before, "no deadlock happened ({before} → {after})");
}
