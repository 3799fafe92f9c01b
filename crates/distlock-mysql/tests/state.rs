//! Bounded state of `version_cas`: rows of names idle for `state_ttl` are
//! deleted by later acquires, a bounded number each, and a name used again
//! afterwards gets tokens above all its earlier ones, even when the server
//! clock is now below them.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, DynLock, LockKey};
use distlock_mysql::{MySqlConfig, Strategy};
use distlock_testkit::servers::MariaDbServer;
use std::time::Duration;
use support::{eventually, root_value, server};

const STATE_TTL: Duration = Duration::from_secs(2);

async fn client(server: &MariaDbServer) -> DynLock {
    MySqlConfig::from_url(&server.url())
        .unwrap()
        .strategy(Strategy::VersionCas)
        .state_ttl(STATE_TTL)
        .connect()
        .await
        .unwrap()
}

/// Takes and releases `name` once; its token.
async fn use_once(lock: &DynLock, name: &str) -> u64 {
    let opts = AcquireOptions::new().ttl(Duration::from_millis(500));
    let lease = lock
        .acquire(&LockKey::new(name).unwrap(), &opts)
        .await
        .unwrap();
    let token = lease.token().get();
    lease.release().await.unwrap();
    token
}

async fn rows(server: &MariaDbServer, prefix: &str) -> u64 {
    let sql = format!("SELECT COUNT(*) FROM distlock.distlock_locks WHERE name LIKE '{prefix}%';");
    root_value(server, &sql).await.parse().unwrap()
}

/// 100 names used once leave no row once idle for `state_ttl`, collected by
/// the acquires of new names that follow; the high-water row keeps their
/// tokens, and a collected name's next token is above them although its
/// earlier tokens were put far above the server clock (as if the clock had
/// stepped back since).
#[tokio::test(flavor = "multi_thread")]
async fn idle_rows_are_collected_and_tokens_still_rise() {
    let server = server().await;
    let lock = client(&server).await;
    for i in 0..100 {
        use_once(&lock, &format!("used/{i}")).await;
    }
    let mut earlier = Vec::new();
    for _ in 0..3 {
        earlier.push(use_once(&lock, "reused").await);
    }
    assert_eq!(rows(&server, "used/").await, 100);
    // Ten days of µs above every token so far: a clock seed alone would now
    // go back.
    let ahead = 10 * 24 * 3600 * 1_000_000_u64;
    let sql = format!(
        "UPDATE distlock.distlock_locks SET fence = fence + {ahead} WHERE name = 'reused';"
    );
    server.exec_root(&sql).await.unwrap();
    let highest = earlier.last().unwrap() + ahead;
    // Each new name's acquire collects up to 16 idle rows.
    let mut fresh = 0;
    eventually(
        STATE_TTL + Duration::from_secs(30),
        "idle rows collected",
        async || {
            fresh += 1;
            use_once(&lock, &format!("fresh/{fresh}")).await;
            rows(&server, "used/").await == 0 && rows(&server, "reused").await == 0
        },
    )
    .await;
    let floor: u64 = root_value(&server, "SELECT floor FROM distlock.distlock_locks_hw;")
        .await
        .parse()
        .unwrap();
    assert!(
        floor >= highest,
        "floor {floor} below the collected token {highest}"
    );
    let after = use_once(&lock, "reused").await;
    assert!(
        after > highest,
        "token {after} after collection, not above {highest}"
    );
    // What is left is the recent names only: at most those used since.
    assert!(rows(&server, "fresh/").await <= fresh);
}

/// Rows an earlier release left (no expiry stamp) are collected too, and the
/// schema change applies to a table that release created.
#[tokio::test(flavor = "multi_thread")]
async fn rows_of_the_previous_release_are_collected() {
    let server = server().await;
    server
        .exec_root(
            "CREATE TABLE distlock.distlock_locks (name VARBINARY(255) NOT NULL, \
             owner VARBINARY(64) NULL DEFAULT NULL, fence BIGINT UNSIGNED NOT NULL DEFAULT 0, \
             expires_at TIMESTAMP(6) NULL DEFAULT NULL, PRIMARY KEY (name)) ENGINE=InnoDB \
             COMMENT='distlock:version_cas'; \
             INSERT INTO distlock.distlock_locks (name, fence) VALUES ('old/1', 5), ('old/2', 7);",
        )
        .await
        .unwrap();
    let lock = client(&server).await;
    let index = "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'distlock' \
                 AND TABLE_NAME = 'distlock_locks' AND INDEX_NAME = 'distlock_idle';";
    assert_eq!(root_value(&server, index).await, "1");
    use_once(&lock, "new").await;
    assert_eq!(rows(&server, "old/").await, 0);
    let floor = root_value(&server, "SELECT floor FROM distlock.distlock_locks_hw;").await;
    assert_eq!(floor, "7");
    // A second client connects to the upgraded table without a change.
    client(&server).await;
}
