//! The row-based semaphore and read-write lock beyond the conformance suite:
//! their statements per uncontended cycle (counted by the server's
//! `pg_stat_statements`), tokens that keep rising after an operator deletes
//! the counter rows, and the settings that refuse them.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{
    AcquireOptions, Capabilities, Held, LockError, LockKey, Renewal, SingleLease, Support,
};
use distlock_postgres::{PostgresConfig, Strategy};
use distlock_testkit::servers::PostgresServer;
use support::{admin_value, client, server};

const CYCLES: u64 = 20;

/// Statements the server ran so far; each reading counts itself once it ends.
async fn statements(server: &PostgresServer) -> u64 {
    admin_value(server, "SELECT sum(calls) FROM pg_stat_statements;")
        .await
        .parse()
        .unwrap()
}

/// Statements per cycle of `cycle`, after three warm-up cycles.
async fn per_cycle<F: AsyncFnMut()>(server: &PostgresServer, mut cycle: F) -> f64 {
    for _ in 0..3 {
        cycle().await;
    }
    let before = statements(server).await;
    for _ in 0..CYCLES {
        cycle().await;
    }
    let after = statements(server).await;
    // The first reading is counted in the second.
    (after - before - 1) as f64 / CYCLES as f64
}

#[tokio::test(flavor = "multi_thread")]
async fn uncontended_cycles_cost_one_transaction_and_a_release() {
    let server = server().await;
    let lock = client(&server, Strategy::VersionCas, "trips_primitives").await;
    let (sem, rw) = (lock.semaphore().unwrap(), lock.rwlock().unwrap());
    let key = LockKey::new("steady").unwrap();
    // Manual renewal: a renewal landing inside the window would be counted.
    let opts = AcquireOptions::new().renewal(Renewal::Manual);
    let permit = per_cycle(&server, async || {
        sem.acquire(&key, 4, &opts)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    })
    .await;
    // BEGIN and SET LOCAL go in one round trip.
    let cycle = "BEGIN, SET LOCAL, head raise, locked read, insert, COMMIT + release with NOTIFY";
    assert_eq!(permit, 7.0, "{cycle}");
    let read = per_cycle(&server, async || {
        rw.read(&key, &opts).await.unwrap().release().await.unwrap();
    })
    .await;
    assert_eq!(read, 7.0, "{cycle}");
    let write = per_cycle(&server, async || {
        rw.write(&key, &opts)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    })
    .await;
    assert_eq!(write, 7.0, "{cycle}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_keep_rising_after_the_counter_rows_are_deleted() {
    let server = server().await;
    let lock = client(&server, Strategy::VersionCas, "wiped").await;
    let (sem, rw) = (lock.semaphore().unwrap(), lock.rwlock().unwrap());
    let key = LockKey::new("wiped").unwrap();
    let opts = AcquireOptions::new();
    let permit = sem.acquire(&key, 2, &opts).await.unwrap();
    let (permit_token, _) = (permit.token(), permit.release().await.unwrap());
    let write = rw.write(&key, &opts).await.unwrap();
    let (write_token, _) = (write.token(), write.release().await.unwrap());
    // An operator wipes every row: the next counters are seeded from the
    // server clock in microseconds, above every earlier token.
    server
        .exec_admin("DELETE FROM wiped_sem; DELETE FROM wiped_rw;")
        .await
        .unwrap();
    let permit = sem.acquire(&key, 2, &opts).await.unwrap();
    assert!(
        permit.token() > permit_token,
        "{} after {permit_token}",
        permit.token()
    );
    permit.release().await.unwrap();
    // Only the head row deleted: the next acquire re-creates it at once.
    server
        .exec_admin("DELETE FROM wiped_sem WHERE slot = 4294967295;")
        .await
        .unwrap();
    let again = sem.try_acquire(&key, 2, &opts).await.unwrap();
    let again = again.expect("a semaphore whose head row was deleted is free");
    assert_eq!(again.slot(), 0);
    again.release().await.unwrap();
    let read = rw.read(&key, &opts).await.unwrap();
    assert!(
        read.token() > write_token,
        "{} after {write_token}",
        read.token()
    );
    read.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn advisory_offers_neither_and_a_long_table_name_is_refused() {
    let server = server().await;
    let advisory = client(&server, Strategy::Advisory, "advisory_locks").await;
    assert!(advisory.semaphore().is_none() && advisory.rwlock().is_none());
    let Capabilities { primitives, .. } = advisory.capabilities();
    for support in [primitives.semaphore, primitives.rwlock] {
        assert!(
            matches!(support, Support::NotOffered(why) if why.contains("strategy=version_cas")),
            "{support:?}"
        );
    }
    let long = "t".repeat(60);
    let refused = PostgresConfig::from_url(&server.url())
        .unwrap()
        .table(long.as_str())
        .connect()
        .await;
    match refused {
        Err(LockError::Config { reason, .. }) => {
            assert!(reason.contains("at most 59 bytes"), "{reason}")
        }
        other => panic!("a 60-byte version_cas table gave {other:?}"),
    }
}

/// Clients that disagree on the limit race for one semaphore: the limit
/// changes only while no permit is live, so the permits held at any moment
/// were all granted under one limit and never exceed it; the others get
/// `LimitMismatch`, and both limits get their turn.
#[tokio::test(flavor = "multi_thread")]
async fn a_limit_changes_only_while_no_permit_is_live() {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    const ROUNDS: usize = 10;
    let server = server().await;
    let key = LockKey::new("flip").unwrap();
    // The limits of the permits held right now, and what was seen.
    let live: Arc<Mutex<Vec<u32>>> = Arc::default();
    let seen: Arc<Mutex<(usize, [bool; 2])>> = Arc::default();
    let mut tasks = Vec::new();
    for client in 0..6u32 {
        let lock = support::client(&server, Strategy::VersionCas, "flip").await;
        let sem = lock.semaphore().unwrap();
        let limit = 2 + client % 2;
        let (key, live, seen) = (key.clone(), live.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            let _keep_client = lock;
            let mut granted = 0;
            while granted < ROUNDS {
                let permit = match sem.acquire(&key, limit, &AcquireOptions::new()).await {
                    Ok(permit) => permit,
                    Err(LockError::LimitMismatch { existing, .. }) => {
                        assert_ne!(existing, limit);
                        seen.lock().unwrap().0 += 1;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    }
                    Err(e) => panic!("limit {limit}: {e}"),
                };
                {
                    let mut live = live.lock().unwrap();
                    live.push(limit);
                    assert!(
                        live.iter().all(|l| *l == limit) && live.len() <= limit as usize,
                        "permits of limits {live:?} held at once"
                    );
                    seen.lock().unwrap().1[(limit - 2) as usize] = true;
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                {
                    let mut live = live.lock().unwrap();
                    let at = live.iter().position(|l| *l == limit).unwrap();
                    live.remove(at);
                }
                permit.release().await.unwrap();
                granted += 1;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (mismatches, used) = *seen.lock().unwrap();
    assert!(mismatches > 0, "no client was ever refused");
    assert_eq!(used, [true, true], "a limit never got its turn");
}
