//! Every launcher starts a real server that its real client can use, controls it
//! (pause, restart, kill, and a cluster member cut off its peers), and leaves no
//! process behind.

// Helpers fail the test by panicking, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_etcd::client::{Client, ConnectOptions, KvClient};
use distlock_testkit::servers::zookeeper::Mode;
use distlock_testkit::servers::{
    EtcdCluster, EtcdServer, MariaDbServer, RedisOptions, RedisServer, ZooKeeperEnsemble,
    ZooKeeperOptions, ZooKeeperServer,
};
use std::future::Future;
use std::time::Duration;
use tokio::time::{Instant, timeout};

/// Long enough for any healthy answer on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(20);
/// How long a paused server must stay silent.
const SILENCE: Duration = Duration::from_millis(700);

fn assert_gone(pid: u32) {
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} is still there"
    );
}

/// Polls `check` until it is true, failing the test after `PATIENCE`.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------- redis

async fn redis_conn(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

async fn redis_get(url: &str, key: &str) -> redis::RedisResult<Option<String>> {
    let mut conn = redis_conn(url).await?;
    redis::cmd("GET").arg(key).query_async(&mut conn).await
}

async fn redis_set(url: &str, key: &str, value: &str) -> redis::RedisResult<()> {
    let mut conn = redis_conn(url).await?;
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut conn)
        .await
}

#[tokio::test]
async fn redis_serves_pauses_restarts_and_stops() {
    let server = RedisServer::start().await.unwrap();
    let url = server.url();
    let port = server.port();
    redis_set(&url, "k", "v").await.unwrap();
    assert_eq!(redis_get(&url, "k").await.unwrap().as_deref(), Some("v"));

    let mut conn = redis_conn(&url).await.unwrap();
    server.pause().unwrap();
    let ping = redis::cmd("PING");
    let paused = timeout(SILENCE, ping.query_async::<String>(&mut conn)).await;
    assert!(
        !matches!(paused, Ok(Ok(_))),
        "paused server answered: {paused:?}"
    );
    server.resume().unwrap();
    eventually("redis to answer after resume", || async {
        redis_get(&url, "k").await.is_ok()
    })
    .await;

    // Without AOF nothing is persisted: a restart is empty, on the same port.
    let old_pid = server.pid().unwrap();
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    assert_gone(old_pid);
    assert_eq!(redis_get(&url, "k").await.unwrap(), None);

    let pid = server.pid().unwrap();
    server.stop().await;
    assert_eq!(server.pid(), None);
    assert_gone(pid);
    assert!(redis_get(&url, "k").await.is_err());
}

#[tokio::test]
async fn redis_with_aof_keeps_data_across_kill_and_restart_empty_wipes_it() {
    let options = RedisOptions {
        aof: true,
        ..RedisOptions::default()
    };
    let server = RedisServer::start_with(options).await.unwrap();
    let url = server.url();
    redis_set(&url, "durable", "yes").await.unwrap();
    server.kill();
    server.restart().await.unwrap();
    assert_eq!(
        redis_get(&url, "durable").await.unwrap().as_deref(),
        Some("yes")
    );
    server.restart_empty().await.unwrap();
    assert_eq!(redis_get(&url, "durable").await.unwrap(), None);
}

#[tokio::test]
async fn redis_password_is_required_and_hidden_from_debug() {
    let options = RedisOptions {
        password: Some("s3cret pass".into()),
        ..RedisOptions::default()
    };
    let server = RedisServer::start_with(options).await.unwrap();
    redis_set(&server.url(), "k", "v").await.unwrap();
    let anonymous = format!("redis://127.0.0.1:{}/", server.port());
    let refused = redis_get(&anonymous, "k").await;
    assert!(
        refused.is_err(),
        "unauthenticated GET answered: {refused:?}"
    );
    assert!(!format!("{server:?}").contains("s3cret"));
}

#[tokio::test]
async fn redis_start_many_gives_independent_nodes_and_drop_kills_them() {
    let servers = RedisServer::start_many(3).await.unwrap();
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.dedup();
    assert_eq!(ports.len(), 3);
    redis_set(&servers[0].url(), "only-here", "1")
        .await
        .unwrap();
    assert_eq!(
        redis_get(&servers[1].url(), "only-here").await.unwrap(),
        None
    );
    let pids: Vec<u32> = servers.iter().map(|s| s.pid().unwrap()).collect();
    servers[2].pause().unwrap();
    drop(servers);
    pids.into_iter().for_each(assert_gone);
}

// ---------------------------------------------------------------- etcd

async fn etcd_client(urls: &[String]) -> KvClient {
    let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
    Client::connect(urls, Some(options))
        .await
        .unwrap()
        .kv_client()
}

async fn etcd_value(client: &KvClient, key: &str) -> Option<String> {
    let response = client.get(key.to_owned(), None).await.ok()?;
    let kv = response.kvs().first()?;
    Some(String::from_utf8_lossy(kv.value()).into_owned())
}

#[tokio::test]
async fn etcd_serves_pauses_restarts_keeping_data_and_stops() {
    let server = EtcdServer::start().await.unwrap();
    let client = etcd_client(&[server.url()]).await;
    client.put("k", "v", None).await.unwrap();

    server.pause().unwrap();
    let paused = timeout(SILENCE, client.get("k", None)).await;
    assert!(!matches!(paused, Ok(Ok(_))), "paused etcd answered");
    server.resume().unwrap();
    assert_eq!(etcd_value(&client, "k").await.as_deref(), Some("v"));

    let port = server.port();
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    let client = etcd_client(&[server.url()]).await;
    assert_eq!(etcd_value(&client, "k").await.as_deref(), Some("v"));

    let status = server.status().await.unwrap();
    assert_eq!(status.leader, server.member_id());
    let pid = server.pid().unwrap();
    drop(server);
    assert_gone(pid);
}

#[tokio::test]
async fn etcd_auth_refuses_anonymous_clients() {
    let server = EtcdServer::start().await.unwrap();
    server.enable_auth("rootpw").await.unwrap();
    let anonymous = etcd_client(&[server.url()]).await.put("k", "v", None).await;
    assert!(anonymous.is_err(), "anonymous put succeeded");
    let options = ConnectOptions::new().with_user("root", "rootpw");
    let root = Client::connect([server.url()], Some(options))
        .await
        .unwrap();
    root.kv_client().put("k", "v", None).await.unwrap();
    assert_eq!(server.credentials().unwrap().0, "root");
    assert!(!format!("{server:?}").contains("rootpw"));
    let listed = server
        .etcdctl_run(&["get", "k", "--print-value-only"])
        .await
        .unwrap();
    assert_eq!(listed.trim(), "v");
}

#[tokio::test]
async fn etcd_cluster_elects_a_new_leader_when_the_leader_is_killed() {
    let cluster = EtcdCluster::start(3).await.unwrap();
    let first = cluster.wait_for_leader(PATIENCE).await.unwrap();
    let client = etcd_client(&cluster.urls()).await;
    client.put("k", "before", None).await.unwrap();

    let old_leader = cluster.member(first).unwrap();
    old_leader.kill();
    assert_eq!(old_leader.pid(), None);
    let second = cluster.wait_for_leader(PATIENCE).await.unwrap();
    assert_ne!(second, first);

    let survivors: Vec<String> = (0..3)
        .filter(|&i| i != first)
        .map(|i| cluster.member(i).unwrap().url())
        .collect();
    let client = etcd_client(&survivors).await;
    client.put("k", "after", None).await.unwrap();

    old_leader.restart().await.unwrap();
    let rejoined = etcd_client(&[old_leader.url()]).await;
    eventually("the restarted member to catch up", || {
        let rejoined = rejoined.clone();
        async move { etcd_value(&rejoined, "k").await.as_deref() == Some("after") }
    })
    .await;
    let pids: Vec<u32> = cluster.members().iter().map(|m| m.pid().unwrap()).collect();
    drop(cluster);
    pids.into_iter().for_each(assert_gone);
}

// A member cut off its peers on loopback, through the peer links: the cut
// leader loses its quorum (etcd's other members elect one of their own);
// healed, it rejoins. The chaos trials' partitions rest on this.

#[tokio::test]
async fn a_partitioned_etcd_leader_is_replaced_and_rejoins_when_healed() {
    let cluster = EtcdCluster::start_partitionable(3).await.unwrap();
    let first = cluster.wait_for_leader(PATIENCE).await.unwrap();
    cluster.partition(first).unwrap();
    // The majority elects one of its own; the cut member, still running and
    // reachable by clients, follows no one it can hear.
    eventually("a leader among the other two", || async {
        let mut led_by = Vec::new();
        for index in (0..3).filter(|i| *i != first) {
            let status = cluster.member(index).unwrap().status().await;
            led_by.extend(status.ok().map(|s| s.leader));
        }
        let old = cluster.member(first).unwrap().member_id();
        led_by.len() == 2 && led_by[0] == led_by[1] && led_by[0] != old && led_by[0] != 0
    })
    .await;
    cluster.heal(first).unwrap();
    eventually("the healed member to follow the new leader", || async {
        let new = cluster.leader().await;
        let own = cluster.member(first).unwrap().status().await;
        matches!((new, own), (Some(leader), Ok(status))
            if leader != first && status.leader == cluster.member(leader).unwrap().member_id())
    })
    .await;
}

#[tokio::test]
async fn a_partitioned_zookeeper_leader_stops_leading_and_rejoins_when_healed() {
    let ensemble = ZooKeeperEnsemble::start_partitionable(3, &ZooKeeperOptions::default())
        .await
        .unwrap();
    let first = ensemble.leader(PATIENCE).await.unwrap();
    ensemble.partition(first).unwrap();
    // Its followers cannot reach it, so it loses its quorum. Natively its
    // election channel may bypass the relays, so it may still win votes the
    // others cannot act on: the majority need not elect a leader meanwhile.
    eventually("the cut leader to stop leading", || async {
        ensemble.mode(first).await != Mode::Leader
    })
    .await;
    ensemble.heal(first).unwrap();
    eventually("one leader again, every server serving", || async {
        let mut leaders = 0;
        for index in 0..3 {
            match ensemble.mode(index).await {
                Mode::Leader => leaders += 1,
                Mode::Follower => {}
                Mode::NotServing => return false,
            }
        }
        leaders == 1
    })
    .await;
}

// ---------------------------------------------------------------- zookeeper

async fn zk_client(server: &ZooKeeperServer) -> zookeeper_client::Client {
    zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(&server.url())
        .await
        .unwrap()
}

#[tokio::test]
async fn zookeeper_serves_pauses_restarts_keeping_znodes_and_stops() {
    use zookeeper_client::{Acls, CreateMode};
    let server = ZooKeeperServer::start().await.unwrap();
    let client = zk_client(&server).await;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.create("/k", b"v", &persistent).await.unwrap();
    assert_eq!(client.get_data("/k").await.unwrap().0, b"v");
    let mntr = server.mntr().await.unwrap();
    assert_eq!(
        mntr.get("zk_server_state").map(String::as_str),
        Some("standalone")
    );
    assert!(mntr.contains_key("zk_packets_received"));

    server.pause().unwrap();
    let paused = timeout(SILENCE, client.get_data("/k")).await;
    assert!(!matches!(paused, Ok(Ok(_))), "paused zookeeper answered");
    server.resume().unwrap();
    assert_eq!(server.four_letter_word("ruok").await.unwrap(), "imok");

    let port = server.port();
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    let client = zk_client(&server).await;
    assert_eq!(client.get_data("/k").await.unwrap().0, b"v");

    let pid = server.pid().unwrap();
    server.stop().await;
    assert_gone(pid);
}

#[tokio::test]
async fn zookeeper_super_user_reads_what_acls_hide() {
    use zookeeper_client::{Acls, CreateMode};
    let options = ZooKeeperOptions {
        super_password: Some("superpw".into()),
        ..ZooKeeperOptions::default()
    };
    let server = ZooKeeperServer::start_with(options).await.unwrap();
    let alice = zk_client(&server).await;
    alice.auth("digest", b"alice:alicepw").await.unwrap();
    let private = CreateMode::Persistent.with_acls(Acls::creator_all());
    alice.create("/private", b"secret", &private).await.unwrap();

    let stranger = zk_client(&server).await;
    assert!(stranger.get_data("/private").await.is_err());
    let admin = zookeeper_client::Client::connector()
        .with_auth("digest", b"super:superpw")
        .connect(&server.url())
        .await
        .unwrap();
    assert_eq!(admin.get_data("/private").await.unwrap().0, b"secret");
}

// ---------------------------------------------------------------- mariadb

async fn mysql(url: &str) -> sqlx::MySqlConnection {
    use sqlx::Connection;
    timeout(PATIENCE, sqlx::MySqlConnection::connect(url))
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn mariadb_serves_pauses_restarts_keeping_rows_and_stops() {
    let server = MariaDbServer::start().await.unwrap();
    assert!(!format!("{server:?}").contains(server.password()));
    let mut conn = mysql(&server.url()).await;
    sqlx::query("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO t VALUES (1, 'hello')")
        .execute(&mut conn)
        .await
        .unwrap();
    let rows = server.exec_root("SELECT v FROM distlock.t").await.unwrap();
    assert_eq!(rows.trim(), "hello");
    let status = server
        .exec_root("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
        .await
        .unwrap();
    assert!(status.starts_with("Threads_connected\t"), "{status}");

    server.pause().unwrap();
    let paused = timeout(SILENCE, sqlx::query("SELECT 1").execute(&mut conn)).await;
    assert!(!matches!(paused, Ok(Ok(_))), "paused mariadb answered");
    server.resume().unwrap();
    drop(conn);

    let port = server.port();
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    let mut conn = mysql(&server.url()).await;
    let value: String = sqlx::query_scalar("SELECT v FROM t WHERE id = 1")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, "hello");

    let pid = server.pid().unwrap();
    drop(server);
    assert_gone(pid);
}
