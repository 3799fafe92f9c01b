//! Many writers with interleaved random tokens, each doing admit + its write in
//! one transaction, retried as a whole on deadlock or lock wait timeout: the
//! data ends up with exactly the admitted writes, in token order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{FencingToken, LockError};
use distlock_sql::{SqlFence, is_contention, map_error};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::{AssertSqlSafe, Connection, MySqlConnection};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::{connect, exec, value};

const WRITERS: u64 = 16;
const ROUNDS: u64 = 32;
/// Whole-transaction retries one attempt may need before the test calls it a
/// livelock.
const MAX_RETRIES: usize = 100;

#[derive(Debug)]
enum Attempt {
    Committed { writer: u64, round: u64, token: u64 },
    Refused { token: u64, highest: u64 },
}

/// One attempt: admit, read the data row's token under lock, write it and a
/// log row, commit.
async fn attempt(
    fence: &SqlFence,
    conn: &mut MySqlConnection,
    table: &str,
    (writer, round, token): (u64, u64, u64),
) -> Result<Attempt, LockError> {
    let mut tx = conn.begin().await.map_err(map_error)?;
    match fence
        .admit(&mut tx, "counter", FencingToken::new(token))
        .await
    {
        Err(LockError::StaleToken { highest, .. }) => {
            return Ok(Attempt::Refused {
                token,
                highest: highest.get(),
            });
        }
        other => other?,
    }
    let prev: u64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT token FROM `{table}_data` WHERE id = 1 FOR UPDATE"
    )))
    .fetch_one(&mut *tx)
    .await
    .map_err(map_error)?;
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE `{table}_data` SET token = ?, writer = ?, round = ?, writes = writes + 1 WHERE id = 1"
    )))
    .bind(token)
    .bind(writer)
    .bind(round)
    .execute(&mut *tx)
    .await
    .map_err(map_error)?;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO `{table}_log` (writer, round, token, prev) VALUES (?, ?, ?, ?)"
    )))
    .bind(writer)
    .bind(round)
    .bind(token)
    .bind(prev)
    .execute(&mut *tx)
    .await
    .map_err(map_error)?;
    tx.commit().await.map_err(map_error)?;
    Ok(Attempt::Committed {
        writer,
        round,
        token,
    })
}

async fn many_writers(table: &str, isolation: &'static str) {
    let seed: u64 = rand::rng().random();
    println!("{table}: seed {seed}, isolation {isolation}");
    let fence = SqlFence::with_table(table).unwrap();
    fence.create_table(&mut connect().await).await.unwrap();
    exec(&format!(
        "CREATE TABLE `{table}_data` (id INT PRIMARY KEY, token BIGINT UNSIGNED NOT NULL,
             writer BIGINT UNSIGNED, round BIGINT UNSIGNED, writes INT NOT NULL);
         INSERT INTO `{table}_data` VALUES (1, 0, NULL, NULL, 0);
         CREATE TABLE `{table}_log` (seq BIGINT AUTO_INCREMENT PRIMARY KEY,
             writer BIGINT UNSIGNED NOT NULL, round BIGINT UNSIGNED NOT NULL,
             token BIGINT UNSIGNED NOT NULL, prev BIGINT UNSIGNED NOT NULL);"
    ))
    .await;

    // Tasks connect by URL: the testkit's server start is not spawnable.
    let url = support::server().await.url();
    let retries = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(WRITERS as usize));
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let (fence, table, retries, start, url) = (
            fence.clone(),
            table.to_owned(),
            retries.clone(),
            start.clone(),
            url.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed ^ writer);
            let mut conn = distlock_sql::connect(&url).await.unwrap();
            sqlx::query(AssertSqlSafe(format!(
                "SET SESSION TRANSACTION ISOLATION LEVEL {isolation}"
            )))
            .execute(&mut conn)
            .await
            .unwrap();
            // Everyone starts together: the first writers race on a missing row.
            start.wait().await;
            let mut outcomes = Vec::new();
            for round in 0..ROUNDS {
                // Overlapping ranges: late writers of one round meet early
                // writers of the next, with tokens below what already committed.
                let token = 1 + round * 4 + rng.random_range(0..12);
                let mut tries = 0;
                let outcome = loop {
                    match attempt(&fence, &mut conn, &table, (writer, round, token)).await {
                        Ok(outcome) => break outcome,
                        Err(e) if is_contention(&e) && tries < MAX_RETRIES => {
                            tries += 1;
                            retries.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("writer {writer} round {round}, {tries} retries: {e}"),
                    }
                };
                outcomes.push(outcome);
                if rng.random_bool(0.5) {
                    tokio::task::yield_now().await;
                }
            }
            outcomes
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.extend(task.await.unwrap());
    }

    let mut committed = BTreeSet::new();
    let mut committed_tokens = BTreeSet::new();
    let mut refused = 0;
    for outcome in &outcomes {
        match *outcome {
            Attempt::Committed {
                writer,
                round,
                token,
            } => {
                committed.insert((writer, round, token));
                committed_tokens.insert(token);
            }
            Attempt::Refused { .. } => refused += 1,
        }
    }
    // Every refusal names a higher token that some transaction committed.
    for outcome in &outcomes {
        if let Attempt::Refused { token, highest } = *outcome {
            assert!(highest > token, "{outcome:?}");
            assert!(
                committed_tokens.contains(&highest),
                "{outcome:?} cites an uncommitted token"
            );
        }
    }
    let max = *committed_tokens.last().unwrap();
    println!(
        "{table}: {} committed, {refused} refused, {} whole-transaction retries",
        committed.len(),
        retries.load(Ordering::Relaxed)
    );
    assert!(refused > 0, "the schedule never produced a stale writer");
    assert!(
        committed.len() > WRITERS as usize,
        "too few commits to mean much"
    );

    // The log holds exactly the committed attempts, each written over a token
    // no higher than its own: in commit order (the data row's lock order),
    // tokens never go down.
    let mut conn = connect().await;
    let log: Vec<(i64, u64, u64, u64, u64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT seq, writer, round, token, prev FROM `{table}_log` ORDER BY seq"
    )))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let logged: BTreeSet<_> = log.iter().map(|&(_, w, r, t, _)| (w, r, t)).collect();
    assert_eq!(log.len(), logged.len(), "an attempt committed twice");
    assert_eq!(logged, committed, "the log differs from the commits seen");
    let mut previous = 0;
    for &(seq, _, _, token, prev) in &log {
        assert!(
            token >= prev,
            "seq {seq}: token {token} committed over {prev}"
        );
        assert_eq!(
            prev, previous,
            "seq {seq}: did not write over the previous commit"
        );
        previous = token;
    }

    let data_sql = format!("SELECT token FROM `{table}_data` WHERE id = 1");
    assert_eq!(value::<u64>(&data_sql).await, Some(max));
    let writes_sql = format!("SELECT writes FROM `{table}_data` WHERE id = 1");
    assert_eq!(
        value::<i32>(&writes_sql).await,
        Some(committed.len() as i32)
    );
    assert_eq!(
        fence.highest(&mut conn, "counter").await.unwrap(),
        Some(FencingToken::new(max))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_writers_commit_in_token_order_under_repeatable_read() {
    tokio::time::timeout(
        Duration::from_secs(240),
        many_writers("many_rr", "REPEATABLE READ"),
    )
    .await
    .expect("the writers finish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_writers_commit_in_token_order_under_read_committed() {
    tokio::time::timeout(
        Duration::from_secs(240),
        many_writers("many_rc", "READ COMMITTED"),
    )
    .await
    .expect("the writers finish");
}

/// First writers of distinct resources all insert into the same empty gap of
/// the index, and hold their rows until everyone has: with gap locks in the
/// way (a `SELECT … FOR UPDATE` first), they would wait on each other or
/// deadlock; with the upsert, none waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn first_writers_of_distinct_resources_never_wait_on_each_other() {
    let fence = SqlFence::with_table("first_writers").unwrap();
    fence.create_table(&mut connect().await).await.unwrap();
    exec("INSERT INTO first_writers VALUES ('a', 1), ('z', 1)").await;
    let url = support::server().await.url();
    let all_admitted = Arc::new(tokio::sync::Barrier::new(WRITERS as usize));
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let (fence, all_admitted, url) = (fence.clone(), all_admitted.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = distlock_sql::connect(&url).await.unwrap();
            let mut tx = conn.begin().await.unwrap();
            let resource = format!("m{writer:02}");
            fence
                .admit(&mut tx, &resource, FencingToken::new(writer))
                .await?;
            // A plain read of a neighbouring row takes no lock either.
            fence.highest(&mut tx, "a").await?;
            all_admitted.wait().await;
            tx.commit().await.map_err(map_error)
        }));
    }
    let all = async {
        for task in tasks {
            task.await.unwrap().unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(30), all)
        .await
        .expect("no first writer waits for another");
    let rows: i64 = value("SELECT COUNT(*) FROM first_writers").await.unwrap();
    assert_eq!(rows, WRITERS as i64 + 2);
}

/// First writers of one missing resource, all at once, under REPEATABLE READ:
/// one inserts the row, the others queue on it and each gets an answer; none
/// is a deadlock victim (a `SELECT … FOR UPDATE` first would take gap locks
/// and make the inserts deadlock), so no retry is allowed here.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn first_writers_of_one_resource_queue_without_deadlocks() {
    let fence = SqlFence::with_table("one_resource").unwrap();
    fence.create_table(&mut connect().await).await.unwrap();
    let url = support::server().await.url();
    let start = Arc::new(tokio::sync::Barrier::new(WRITERS as usize));
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let (fence, start, url) = (fence.clone(), start.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = distlock_sql::connect(&url).await.unwrap();
            start.wait().await;
            let mut tx = conn.begin().await.unwrap();
            let token = FencingToken::new(100 + (writer * 7) % WRITERS);
            match fence.admit(&mut tx, "new", token).await {
                Ok(()) => {
                    tx.commit().await.map_err(map_error)?;
                    Ok(Some(token))
                }
                Err(LockError::StaleToken { .. }) => Ok(None),
                Err(other) => Err(other),
            }
        }));
    }
    let mut admitted = Vec::new();
    for task in tasks {
        let outcome: Result<Option<FencingToken>, LockError> = task.await.unwrap();
        admitted.extend(outcome.expect("no deadlock, no lock wait timeout"));
    }
    let max = admitted.iter().max().copied();
    assert!(!admitted.is_empty());
    assert_eq!(
        fence.highest(&mut connect().await, "new").await.unwrap(),
        max
    );
}
