//! A paused server answers nothing: not on a connection that a child process
//! of the server serves (a PostgreSQL backend), not to a new client. Natively
//! and in containers (`DISTLOCK_LAUNCHER=docker`), where the pause is sent
//! from the host to every process of the container.

// Helpers fail the test by panicking, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_testkit::servers::{Launched, PostgresServer};
use sqlx::Connection;
use std::time::Duration;
use tokio::time::timeout;

/// Long enough for any healthy answer on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(20);
/// How long a paused server must stay silent.
const SILENCE: Duration = Duration::from_millis(700);

#[tokio::test]
async fn a_paused_postgres_answers_neither_its_sessions_nor_new_clients() {
    let server = PostgresServer::start().await.unwrap();
    let url = server.url();
    let mut session = timeout(PATIENCE, sqlx::PgConnection::connect(&url))
        .await
        .unwrap()
        .unwrap();
    let select = "SELECT 1";
    sqlx::query(select).execute(&mut session).await.unwrap();

    server.process().pause().unwrap();
    let answered = timeout(SILENCE, sqlx::query(select).execute(&mut session)).await;
    assert!(
        answered.is_err(),
        "the backend of a paused server answered: {answered:?}"
    );
    let connected = timeout(SILENCE, sqlx::PgConnection::connect(&url)).await;
    assert!(
        connected.is_err(),
        "a paused server took a new client: {connected:?}"
    );

    server.process().resume().unwrap();
    // The query cut short above left the session mid-exchange: a new one.
    let mut session = timeout(PATIENCE, sqlx::PgConnection::connect(&url))
        .await
        .unwrap()
        .unwrap();
    sqlx::query(select).execute(&mut session).await.unwrap();
}
