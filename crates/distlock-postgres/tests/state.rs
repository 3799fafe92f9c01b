//! Bounded state of `version_cas`: rows of names idle for `state_ttl` are
//! deleted by later acquires, a bounded number each, and a name used again
//! afterwards gets tokens above all its earlier ones, even when the server
//! clock is now below them.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use async_trait::async_trait;
use distlock_core::{AcquireOptions, BoxError, DynLock, HolderMeta, LockKey};
use distlock_postgres::{PostgresConfig, Strategy};
use distlock_testkit::servers::PostgresServer;
use distlock_testkit::state_rows::{
    RowDatabase, collected_names_rise_above_a_clock_behind, holder_column_is_named_then_used,
};
use std::time::Duration;
use support::{admin_value, server};

const STATE_TTL: Duration = Duration::from_secs(2);

async fn client(server: &PostgresServer) -> DynLock {
    PostgresConfig::from_url(&server.url())
        .unwrap()
        .strategy(Strategy::VersionCas)
        .state_ttl(STATE_TTL)
        .connect()
        .await
        .unwrap()
}

/// The server, as the scenario reads and changes it.
struct Rows<'a>(&'a PostgresServer);

#[async_trait]
impl RowDatabase for Rows<'_> {
    async fn rows(&self, prefix: &str) -> Result<u64, BoxError> {
        let sql = format!("SELECT COUNT(*) FROM distlock_locks WHERE name LIKE '{prefix}%';");
        Ok(admin_value(self.0, &sql).await.parse()?)
    }

    async fn push_ahead(&self, name: &str, by: u64) -> Result<(), BoxError> {
        let sql = format!("UPDATE distlock_locks SET fence = fence + {by} WHERE name = '{name}';");
        self.0.exec_admin(&sql).await?;
        Ok(())
    }

    async fn floor(&self) -> Result<u64, BoxError> {
        let sql = "SELECT floor FROM distlock_locks_hw;";
        Ok(admin_value(self.0, sql).await.parse()?)
    }
}

/// Idle rows are collected by new names' acquires, and tokens rise above a
/// collected name's earlier ones although those are far ahead of the server
/// clock (as if it had stepped back since).
#[tokio::test(flavor = "multi_thread")]
async fn idle_rows_are_collected_and_tokens_still_rise() {
    let server = server().await;
    let lock = client(&server).await;
    collected_names_rise_above_a_clock_behind(&lock, &Rows(&server), STATE_TTL)
        .await
        .unwrap();
}

/// Rows an earlier release left (no expiry stamp) are collected too, and the
/// schema changes (bounded state, the `holder` column) apply to a table that
/// release created.
#[tokio::test(flavor = "multi_thread")]
async fn rows_of_the_previous_release_are_collected() {
    let server = server().await;
    server
        .exec_admin(&format!(
            "{} INSERT INTO distlock_locks (namespace, name, fence) \
             VALUES ('distlock', 'old/1', 5), ('distlock', 'old/2', 7);",
            old_table("version_cas")
        ))
        .await
        .unwrap();
    let lock = client(&server).await;
    let index = "SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'distlock_locks_ix';";
    assert_eq!(admin_value(&server, index).await, "1");
    let key = LockKey::new("new").unwrap();
    let lease = lock.acquire(&key, &AcquireOptions::new()).await.unwrap();
    // The table got its `holder` column: the holder is named.
    let holder = lock.inspect().unwrap().holder(&key).await.unwrap().unwrap();
    assert_eq!(holder.meta, Some(HolderMeta::this_process()), "{holder:?}");
    lease.release().await.unwrap();
    assert_eq!(Rows(&server).rows("old/").await.unwrap(), 0);
    let floor = admin_value(&server, "SELECT floor FROM distlock_locks_hw;").await;
    assert_eq!(floor, "7");
    // A second client connects to the upgraded table without a change.
    client(&server).await;
}

/// A table of an earlier release made by hand (`create_table=false`) is
/// refused with the statement that adds its `holder` column; once run, the
/// table is used as it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_made_table_without_holder_names_the_statement_to_run() {
    let server = server().await;
    server.exec_admin(&old_table("advisory")).await.unwrap();
    let config = || {
        PostgresConfig::from_url(&server.url())
            .unwrap()
            .strategy(Strategy::Advisory)
            .create_table(false)
    };
    let add = "ALTER TABLE \"distlock_advisory\" ADD COLUMN IF NOT EXISTS holder TEXT NULL";
    let added = async {
        server.exec_admin(&format!("{add};")).await?;
        Ok(config().connect().await?)
    };
    holder_column_is_named_then_used(config().connect().await, add, added)
        .await
        .unwrap();
}

/// The lock table `distlock_{strategy}` as the release before `holder` made it.
fn old_table(strategy: &str) -> String {
    let table = match strategy {
        "version_cas" => "distlock_locks".to_owned(),
        other => format!("distlock_{other}"),
    };
    format!(
        "CREATE TABLE {table} (namespace TEXT NOT NULL, name TEXT NOT NULL, \
         owner TEXT NULL, fence BIGINT NOT NULL, expires_at TIMESTAMPTZ NULL, \
         lock_key BIGINT NULL UNIQUE, PRIMARY KEY (namespace, name)); \
         COMMENT ON TABLE {table} IS 'distlock:{strategy}'; \
         ALTER TABLE {table} OWNER TO distlock;"
    )
}
