//! Ending a session by (pid, start) against a real server: a pair whose
//! backend is gone ends nothing, even when its pid now belongs to another
//! session (faked here by pairing the live session's pid with the old start,
//! since the OS cannot be made to reuse a pid on demand).
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{end, terminate};
use crate::pool::{Conn, Pool};
use crate::protocol::{KEEPALIVE, SESSION_LISTED};
use crate::session::Session;
use distlock_core::toolkit::Timeouts;
use distlock_testkit::servers::PostgresServer;
use sqlx::Row;
use sqlx::postgres::PgConnectOptions;
use std::time::Duration;

async fn pool_on(server: &PostgresServer) -> Pool {
    let options: PgConnectOptions = server.url().parse().expect("the launcher's URL parses");
    let timeouts = Timeouts::new(Duration::from_secs(10), Duration::from_secs(5));
    Pool::new(options, "ending tests".into(), 4, &[], false, timeouts)
}

/// How many sessions the server lists with exactly this (pid, start).
async fn listed(conn: &mut Conn, session: Session) -> i64 {
    let read = sqlx::query(SESSION_LISTED)
        .bind(session.pid)
        .bind(session.started);
    conn.fetch_one(read).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_that_ended_is_never_matched_by_its_pid_alone() {
    let server = match PostgresServer::start().await {
        Ok(server) => server,
        Err(e) => panic!("cannot start PostgreSQL for the test: {e}"),
    };
    let pool = pool_on(&server).await;

    // A cut-off statement's session: its client dropped the connection.
    let mut gone = pool.get().await.unwrap();
    let gone_session = gone.session();
    gone.discard();
    drop(gone);
    end(&pool, gone_session).await.unwrap();

    // Another session runs on; say the OS gave it the old session's pid.
    let mut stranger = pool.get().await.unwrap();
    let stranger_session = stranger.session();
    assert_ne!(stranger_session, gone_session);
    assert_ne!(
        stranger_session.started, gone_session.started,
        "two backends of one server started at the same microsecond"
    );
    let stale = Session {
        pid: stranger_session.pid,
        started: gone_session.started,
    };

    // The undo of the cut-off statement comes late: it must hit nobody.
    assert!(
        !terminate(&pool, stale).await.unwrap(),
        "a backend was signalled for a session that no longer exists"
    );
    end(&pool, stale).await.unwrap();
    stranger
        .fetch_one(sqlx::query(KEEPALIVE))
        .await
        .expect("the live session whose pid matched a stale identity still answers");
    assert_eq!(listed(&mut stranger, stranger_session).await, 1);

    // The exact pair still ends its session.
    end(&pool, stranger_session).await.unwrap();
    assert!(
        stranger.fetch_one(sqlx::query(KEEPALIVE)).await.is_err(),
        "the session named by its own (pid, start) was ended"
    );
    let mut watcher = pool.get().await.unwrap();
    assert_eq!(listed(&mut watcher, stranger_session).await, 0);
}
