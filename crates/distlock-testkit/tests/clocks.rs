//! A server launched under a `MovableClock` reads the moved time, natively and
//! with `DISTLOCK_LAUNCHER=docker` (the shim's directory mounted into the
//! container): the clock trials would pass vacuously if it did not.

// Helpers fail the test by panicking, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_testkit::servers::{
    MariaDbServer, MovableClock, PostgresServer, RedisOptions, RedisServer,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HOUR: Duration = Duration::from_secs(3600);

/// How far `server_secs` is behind this machine's clock, in whole minutes.
fn minutes_behind(server_secs: &str) -> i64 {
    let server: f64 = server_secs.trim().parse().expect("a number of seconds");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    ((now.as_secs_f64() - server) / 60.0).round() as i64
}

/// Reads `read` before and after stepping `clock` back an hour.
async fn steps_back<F, Fut>(clock: &MovableClock, read: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    assert_eq!(minutes_behind(&read().await), 0);
    clock.step_back(HOUR).unwrap();
    assert_eq!(minutes_behind(&read().await), 60);
}

#[tokio::test]
async fn a_mariadb_server_reads_its_stepped_back_clock() {
    let clock = MovableClock::new().unwrap();
    let server = MariaDbServer::start_with_clock(&clock).await.unwrap();
    steps_back(&clock, || async {
        server
            .exec_root("SELECT UNIX_TIMESTAMP(SYSDATE(6));")
            .await
            .unwrap()
    })
    .await;
}

#[tokio::test]
async fn a_postgres_server_reads_its_stepped_back_clock() {
    let clock = MovableClock::new().unwrap();
    let server = PostgresServer::start_with_clock(&clock).await.unwrap();
    steps_back(&clock, || async {
        server
            .exec_admin("SELECT extract(epoch FROM clock_timestamp());")
            .await
            .unwrap()
    })
    .await;
}

#[tokio::test]
async fn a_redis_server_reads_its_stepped_back_clock() {
    let clock = MovableClock::new().unwrap();
    let options = RedisOptions {
        clock: Some(clock.clone()),
        ..RedisOptions::default()
    };
    let server = RedisServer::start_with(options).await.unwrap();
    steps_back(&clock, || async {
        // `TIME` answers `*2 $10 <seconds> $6 <micros>`: the seconds will do.
        let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        stream.write_all(b"*1\r\n$4\r\nTIME\r\n").await.unwrap();
        let mut reply = vec![0u8; 64];
        let n = stream.read(&mut reply).await.unwrap();
        let text = String::from_utf8_lossy(&reply[..n]).into_owned();
        text.split("\r\n").nth(2).unwrap_or_default().to_owned()
    })
    .await;
}
