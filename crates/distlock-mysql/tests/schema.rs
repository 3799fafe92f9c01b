//! The table, the configuration, and bad input: clear errors, nothing built from
//! unvalidated text, safe concurrent creation.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockError, LockKey};
use distlock_mysql::{MySqlConfig, MySqlConnectOptions, Strategy};
use std::str::FromStr;
use std::sync::Arc;
use support::{client, root_value, server};
use tokio::sync::Barrier;

/// Clients starting at the same moment all create-if-missing the same table and
/// all succeed; the table then works for all of them.
#[tokio::test(flavor = "multi_thread")]
async fn clients_creating_the_table_at_once_all_succeed() {
    let server = server().await;
    let url = server.url();
    let start = Arc::new(Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (url, start) = (url.clone(), start.clone());
            let strategy = Strategy::VersionCas;
            tokio::spawn(async move {
                let config = MySqlConfig::from_url(&url)
                    .unwrap()
                    .strategy(strategy)
                    .table("created_at_once");
                start.wait().await;
                (i, config.connect().await)
            })
        })
        .collect();
    let mut clients = Vec::new();
    for task in tasks {
        let (i, connected) = task.await.unwrap();
        clients.push(connected.unwrap_or_else(|e| panic!("client {i}: {e}")));
    }
    let key = LockKey::new("shared").unwrap();
    let lease = clients[0]
        .acquire(&key, &AcquireOptions::new())
        .await
        .unwrap();
    assert!(
        clients[7]
            .try_acquire(&key, &AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    lease.release().await.unwrap();
}

/// Table names that are not plain identifiers are `Config` errors before any
/// statement is sent, and no table with a strange name appears.
#[tokio::test(flavor = "multi_thread")]
async fn table_name_rejects_injection_attempts() {
    let server = server().await;
    let attempts = [
        "locks; DROP TABLE mysql.user",
        "locks` (x INT); DROP DATABASE distlock; --",
        "locks'",
        "locks\"",
        "distlock.locks",
        "`locks`",
        "locks/*",
        "1locks",
        "",
        "l\u{200b}ocks",
    ];
    for table in attempts {
        let config = MySqlConfig::from_url(&server.url()).unwrap().table(table);
        match config.connect().await {
            Err(LockError::Config { reason, .. }) => {
                assert!(reason.contains("identifier"), "{table:?}: {reason}")
            }
            other => panic!("{table:?} gave {other:?}"),
        }
    }
    let encoded = format!("{}?table=locks%3B%20DROP%20TABLE%20x", server.url());
    assert!(matches!(
        MySqlConfig::from_url(&encoded),
        Err(LockError::Config { .. })
    ));
    let tables = root_value(
        &server,
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'distlock';",
    )
    .await;
    assert_eq!(tables, "0", "no table was created by a rejected name");
}

/// A table belongs to one strategy: another strategy on it is refused, because
/// their rows mean different things.
#[tokio::test(flavor = "multi_thread")]
async fn strategies_cannot_share_a_table() {
    let server = server().await;
    drop(client(&server, Strategy::VersionCas, "locks").await);
    let config = MySqlConfig::from_url(&server.url())
        .unwrap()
        .strategy(Strategy::ForUpdate)
        .table("locks");
    match config.connect().await {
        Err(LockError::Config { reason, .. }) => {
            assert!(reason.contains("version_cas"), "{reason}")
        }
        other => panic!("a second strategy on the table gave {other:?}"),
    }
    let missing = MySqlConfig::from_url(&server.url())
        .unwrap()
        .table("absent")
        .create_table(false);
    assert!(matches!(
        missing.connect().await,
        Err(LockError::Config { .. })
    ));
}

/// Wrong credentials, a missing privilege and an unreachable server each give a
/// clear error that never shows the password.
#[tokio::test(flavor = "multi_thread")]
async fn bad_credentials_privileges_and_addresses_give_clear_errors() {
    let server = server().await;
    let wrong = MySqlConnectOptions::from_str(&server.url())
        .unwrap()
        .password("not-the-password");
    match MySqlConfig::from_options(wrong).connect().await {
        Err(e @ LockError::Config { .. }) => {
            assert!(e.to_string().contains("password"), "{e}");
            assert!(!e.to_string().contains("not-the-password"), "{e}");
        }
        other => panic!("wrong password gave {other:?}"),
    }

    server
        .exec_root("CREATE USER 'reader'@'%' IDENTIFIED BY 'r3ader-pw'; GRANT SELECT ON distlock.* TO 'reader'@'%';")
        .await
        .unwrap();
    let reader = MySqlConnectOptions::from_str(&server.url())
        .unwrap()
        .username("reader")
        .password("r3ader-pw");
    match MySqlConfig::from_options(reader).connect().await {
        Err(e @ LockError::Config { .. }) => {
            assert!(e.to_string().contains("privilege"), "{e}");
            assert!(!e.to_string().contains("r3ader-pw"), "{e}");
        }
        other => panic!("a user without CREATE gave {other:?}"),
    }

    let port = distlock_testkit::servers::free_port().unwrap();
    let nowhere = MySqlConnectOptions::from_str(&server.url())
        .unwrap()
        .port(port);
    match MySqlConfig::from_options(nowhere).connect().await {
        Err(e @ LockError::Unavailable { .. }) => {
            assert!(
                e.to_string().contains(&port.to_string()),
                "names the endpoint: {e}"
            );
            assert!(!e.to_string().contains(server.password()), "{e}");
        }
        other => panic!("an unreachable server gave {other:?}"),
    }
}

/// Names longer than the column are stored hashed, stay independent, and work.
#[tokio::test(flavor = "multi_thread")]
async fn over_long_names_are_hashed_and_stay_independent() {
    let server = server().await;
    let lock = client(&server, Strategy::UniqueInsert, "locks").await;
    let long_a = LockKey::new(format!("{}a", "p".repeat(400))).unwrap();
    let long_b = LockKey::new(format!("{}b", "p".repeat(400))).unwrap();
    let a = lock.acquire(&long_a, &AcquireOptions::new()).await.unwrap();
    let b = lock.acquire(&long_b, &AcquireOptions::new()).await.unwrap();
    assert!(
        lock.try_acquire(&long_a, &AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    let longest = root_value(&server, "SELECT MAX(LENGTH(name)) FROM distlock.locks;").await;
    assert_eq!(
        longest, "255",
        "counter rows use the last byte of the column"
    );
    a.release().await.unwrap();
    b.release().await.unwrap();
}
