//! A lock built from the application's own `sqlx::PgPool`: it reaches the
//! pool's server and database on connections of its own (named `distlock`,
//! the pool's own left alone), excludes and raises tokens; an advisory lock
//! is never on one of the pool's connections; behind PgBouncer the pool's
//! options work with `pooler=transaction`, and without it are refused.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, DynLock, LockError, LockKey};
use distlock_postgres::{Pooler, PostgresConfig, Strategy};
use distlock_testkit::servers::PgBouncerServer;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::str::FromStr;
use std::time::Duration;
use support::{admin_value, server};

/// The application's pool, its connections named `app`.
async fn app_pool(url: &str) -> PgPool {
    let options = PgConnectOptions::from_str(url)
        .unwrap()
        .application_name("app");
    PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .expect("the application's pool connects")
}

fn opts() -> AcquireOptions {
    AcquireOptions::new().ttl(Duration::from_secs(10))
}

/// Exclusion between two clients and a token that rises from one holder to
/// the next.
async fn excludes_and_raises(first: &DynLock, second: &DynLock, name: &str) {
    let key = LockKey::new(name).unwrap();
    let held = first.acquire(&key, &opts()).await.unwrap();
    assert!(second.try_acquire(&key, &opts()).await.unwrap().is_none());
    let token = held.token();
    held.release().await.unwrap();
    let next = second.acquire(&key, &opts()).await.unwrap();
    assert!(next.token() > token, "{} after {token}", next.token());
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_from_the_apps_pool_excludes_raises_tokens_and_leaves_the_pool_alone() {
    let server = server().await;
    let pool = app_pool(&server.url()).await;
    let config = PostgresConfig::from_pool(&pool).table("own_pool");
    assert!(!format!("{config:?}").contains(server.password()));
    let first = config.clone().connect().await.unwrap();
    let second = config.connect().await.unwrap();
    excludes_and_raises(&first, &second, "jobs/own-pool").await;
    // distlock's sessions carry its own name, and one of them listens.
    let sql = "SELECT count(*) FROM pg_stat_activity \
               WHERE application_name = 'distlock' AND query LIKE 'LISTEN %';";
    assert_eq!(
        admin_value(&server, sql).await,
        "2",
        "one LISTEN per client"
    );
    let app: String = sqlx::query_scalar("SELECT current_setting('application_name')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(app, "app");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_advisory_lock_from_the_apps_pool_is_never_on_the_pools_connections() {
    let server = server().await;
    let pool = app_pool(&server.url()).await;
    let config = PostgresConfig::from_pool(&pool)
        .strategy(Strategy::Advisory)
        .table("own_pool_advisory");
    let first = config.clone().connect().await.unwrap();
    let second = config.connect().await.unwrap();
    let key = LockKey::new("jobs/own-advisory").unwrap();
    let held = first.acquire(&key, &opts()).await.unwrap();
    let holders = "SELECT string_agg(DISTINCT a.application_name, ',') FROM pg_locks l \
                   JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory';";
    assert_eq!(admin_value(&server, holders).await, "distlock");
    held.release().await.unwrap();
    excludes_and_raises(&first, &second, "jobs/own-advisory-2").await;
}

async fn pgbouncer() -> PgBouncerServer {
    match PgBouncerServer::start().await {
        Ok(server) => server,
        Err(e) => panic!("cannot start PgBouncer for the test: {e}"),
    }
}

/// The application's pool through PgBouncer (it does not prepare statements
/// there: the proxy has no support for them).
async fn pooled_app_pool(server: &PgBouncerServer) -> PgPool {
    let options = PgConnectOptions::from_str(&server.url())
        .unwrap()
        .statement_cache_capacity(0);
    PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .expect("the application's pool connects through PgBouncer")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_behind_pgbouncer_works_with_pooler_transaction_and_is_refused_without() {
    let bouncer = pgbouncer().await;
    let pool = pooled_app_pool(&bouncer).await;
    let refused = PostgresConfig::from_pool(&pool)
        .table("own_pooled")
        .connect()
        .await
        .expect_err("LISTEN through a transaction pooler cannot work");
    assert!(matches!(refused, LockError::Config { .. }), "{refused:?}");
    assert!(
        refused.to_string().contains("pooler=transaction"),
        "{refused}"
    );
    let config = PostgresConfig::from_pool(&pool)
        .pooler(Pooler::Transaction)
        .table("own_pooled");
    let first = config.clone().connect().await.unwrap();
    let second = config.connect().await.unwrap();
    excludes_and_raises(&first, &second, "jobs/own-pooled").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn advisory_from_a_pool_behind_pgbouncer_is_refused_with_the_strategy_to_use() {
    let bouncer = pgbouncer().await;
    let pool = pooled_app_pool(&bouncer).await;
    let refused = PostgresConfig::from_pool(&pool)
        .pooler(Pooler::Transaction)
        .strategy(Strategy::Advisory)
        .connect()
        .await
        .expect_err("an advisory lock needs a session");
    assert!(
        refused.to_string().contains("strategy=version_cas"),
        "{refused}"
    );
}
