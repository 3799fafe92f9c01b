//! Shared by the etcd adapter tests: real servers from the testkit, raw reads, and
//! etcd's own counters.
// Test helpers: a failed set-up fails the test that called it.
#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use distlock_core::LockKey;
use distlock_core::toolkit::Timeouts;
use distlock_etcd::client::{GetOptions, KeyValue, SortOrder, SortTarget};
use distlock_etcd::{EtcdConfig, EtcdLock, queue_prefix};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::{EtcdCluster, EtcdServer};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A one-member etcd of its own. The launcher's future is not `Send`, so it runs
/// on a blocking thread of the test's runtime.
pub async fn server() -> EtcdServer {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(EtcdServer::start()))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start etcd: {e}"))
}

/// A cluster of `size` members.
pub async fn cluster(size: usize) -> EtcdCluster {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(EtcdCluster::start(size)))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start an etcd cluster: {e}"))
}

/// A lock client on `addrs` under `namespace`.
pub async fn connect(addrs: &[SocketAddr], namespace: &str) -> EtcdLock {
    EtcdConfig::new(addrs.iter().map(ToString::to_string))
        .namespace(namespace)
        .connect()
        .await
        .unwrap()
}

/// A lock client whose traffic goes through `proxy`.
pub async fn through(proxy: &FaultProxy, namespace: &str, timeout: Duration) -> EtcdLock {
    EtcdConfig::new([proxy.addr().to_string()])
        .namespace(namespace)
        .timeouts(Timeouts::new(Duration::from_secs(5), timeout))
        .connect()
        .await
        .unwrap()
}

/// A key nobody else uses.
pub fn unique(name: &str) -> LockKey {
    LockKey::new(format!("{name}-{:08x}", rand::random::<u32>())).unwrap()
}

/// A raw client, as an operator's.
pub async fn raw(addrs: &[SocketAddr]) -> distlock_etcd::client::Client {
    let endpoints: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
    distlock_etcd::client::Client::connect(endpoints, None)
        .await
        .unwrap()
}

/// The keys in `key`'s queue under `namespace`, oldest first.
pub async fn queue(
    raw: &distlock_etcd::client::Client,
    namespace: &str,
    key: &LockKey,
) -> Vec<KeyValue> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let found = raw
        .kv_client()
        .get(queue_prefix(namespace, key), Some(options))
        .await
        .unwrap();
    found.kvs().to_vec()
}

/// Polls `condition` every 10 ms until it holds, failing with `what` after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "{what}: not true within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The server's `/metrics`, as text.
pub async fn metrics(addr: SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

/// The value of every sample of `metric`, by its label set.
pub fn samples(text: &str, metric: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| line.starts_with(metric) && line[metric.len()..].starts_with(['{', ' ']))
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name[metric.len()..].to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// gRPC calls per method (`grpc_service/grpc_method`), summed over codes.
pub fn grpc_calls(text: &str, metric: &str) -> BTreeMap<String, u64> {
    let mut calls = BTreeMap::new();
    for (labels, value) in samples(text, metric) {
        let label = |name: &str| {
            let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
            let rest = &labels[start..];
            Some(rest[..rest.find('"')?].to_owned())
        };
        let method = format!(
            "{}/{}",
            label("grpc_service").unwrap_or_default(),
            label("grpc_method").unwrap_or_default()
        );
        *calls.entry(method).or_insert(0) += value as u64;
    }
    calls.retain(|_, n| *n > 0);
    calls
}

/// What grew between two counts, and by how much.
pub fn delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}
