//! `version_cas`: a release notifies only when a waiter marked the name. The
//! mark is a shared advisory lock its client's listening session holds while
//! the client has waiters of the name; a listening session lost and made
//! again takes its marks again.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::LockKey;
use distlock_postgres::Strategy;
use distlock_testkit::servers::PostgresServer;
use std::time::Duration;
use support::{admin_value, eventually, mark_holders, only_marked_names_notify, server};

const TABLE: &str = "quiet_cas";

/// The sessions holding a mark on `key` of [`TABLE`]: the pair (hash of the
/// table, hash of the release's payload).
async fn marked_by(server: &PostgresServer, key: &LockKey) -> Vec<String> {
    let hash = |text: &str| format!("hashtext('{text}')::BIGINT & 4294967295");
    let payload = format!("distlock' || E'\\n' || '{}", key.as_str());
    mark_holders(server, &hash(TABLE), &hash(&payload)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_notifies_only_when_a_waiter_marked_the_name() {
    let server = server().await;
    let marks = async |key: &LockKey| marked_by(&server, key).await.len();
    // The listening session ends while the waiter waits: the mark goes with
    // it, and the session made again takes it again before the release.
    let lose_the_listener = async |key: &LockKey| {
        let lost = marked_by(&server, key).await.remove(0);
        let ended = admin_value(&server, &format!("SELECT pg_terminate_backend({lost});")).await;
        assert_eq!(ended, "t", "the listening session was ended");
        eventually(Duration::from_secs(5), "the mark taken again", async || {
            let now = marked_by(&server, key).await;
            now.len() == 1 && now[0] != lost
        })
        .await;
    };
    // The mark is dropped by the listening session once the winner's waiter
    // is gone, a moment after the win.
    only_marked_names_notify(
        &server,
        Strategy::VersionCas,
        TABLE,
        marks,
        lose_the_listener,
    )
    .await;
}
