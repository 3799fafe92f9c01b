//! Shared by the adapter's tests: real ZooKeeper servers from the testkit, clients,
//! and an admin session that plays the operator.
// Helpers of tests: a failure is the test failing, with the reason.
#![allow(dead_code, clippy::expect_used, clippy::panic)]

use distlock_testkit::servers::{ZooKeeperOptions, ZooKeeperServer};
use distlock_zookeeper::{ZkConfig, ZkLock};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;
use zookeeper_client as zk;

/// One server shared by the tests of a binary that do not disturb it.
pub async fn shared_server() -> &'static ZooKeeperServer {
    static SERVER: OnceCell<ZooKeeperServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            ZooKeeperServer::start()
                .await
                .expect("start ZooKeeper (install: sudo scripts/install-backends)")
        })
        .await
}

/// A server of the test's own, for kills, restarts and exact counters.
pub async fn dedicated_server(options: ZooKeeperOptions) -> ZooKeeperServer {
    ZooKeeperServer::start_with(options)
        .await
        .expect("start ZooKeeper (install: sudo scripts/install-backends)")
}

/// A namespace no other test uses.
pub fn namespace(test: &str) -> String {
    format!("t-{test}-{:08x}", rand_u32())
}

fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos ^ std::process::id().rotate_left(16)
}

/// A config for `endpoint` under `namespace`.
pub fn config(endpoint: &str, namespace: &str) -> ZkConfig {
    ZkConfig {
        endpoints: vec![endpoint.to_owned()],
        namespace: namespace.to_owned(),
        ..ZkConfig::default()
    }
}

/// A connected lock client.
pub async fn client(endpoint: &str, namespace: &str) -> ZkLock {
    config(endpoint, namespace)
        .connect()
        .await
        .expect("connect a lock client")
}

/// A plain ZooKeeper session, optionally with digest credentials.
pub async fn admin(endpoint: &str, digest: Option<&str>) -> zk::Client {
    let mut connector = zk::Client::connector().with_session_timeout(Duration::from_secs(30));
    if let Some(digest) = digest {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    connector
        .connect(endpoint)
        .await
        .expect("connect an admin session")
}

/// The children of `dir`, in queue order.
pub async fn queue(admin: &zk::Client, dir: &str) -> Vec<String> {
    distlock_zookeeper::keys::sort_queue(
        admin
            .list_children(dir)
            .await
            .expect("list the lock directory"),
    )
}

/// The server's `mntr` counter `name` as a number.
pub async fn counter(server: &ZooKeeperServer, name: &str) -> i64 {
    counters(server)
        .await
        .get(name)
        .copied()
        .unwrap_or_else(|| panic!("mntr has no {name}"))
}

/// Every numeric `mntr` counter.
pub async fn counters(server: &ZooKeeperServer) -> BTreeMap<String, i64> {
    server
        .mntr()
        .await
        .expect("mntr")
        .into_iter()
        .filter_map(|(k, v)| v.parse::<i64>().ok().map(|v| (k, v)))
        .collect()
}

/// Polls `condition` every 20 ms until it holds, failing with `what` after
/// `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "{what}: not true within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
