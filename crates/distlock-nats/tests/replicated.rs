//! Replicated buckets on a real 3-server JetStream cluster. Before nats-server
//! 2.9.21 a clustered stream does not serialize compare-and-set writes
//! (nats-io/nats-server#4320), so connecting refuses a bucket of more than one
//! replica there, whether this client would create it or it exists already; a
//! bucket of one replica works on the cluster. On 2.9.21 or later the same
//! connects must succeed.
#![allow(clippy::panic)] // test code: failing loudly is the point

use async_nats::jetstream::stream::{Config as StreamConfig, StorageType};
use distlock_core::{AcquireOptions, DistributedLock, Fence, LockError, LockKey};
use distlock_nats::NatsConfig;
use distlock_testkit::servers::NatsCluster;

/// Whether nats-server `version` serializes a replicated stream's compare-and-set.
fn fixed(version: &str) -> bool {
    let numbers: Vec<u64> = (version.split(['.', '-']).take(3))
        .map_while(|part| part.parse().ok())
        .collect();
    numbers >= vec![2, 9, 21]
}

fn assert_refused<T: std::fmt::Debug>(result: Result<T, LockError>, what: &str) {
    match result {
        Err(LockError::Config { reason, .. }) => {
            for named in ["3 replicas", "#4320", "replicas=1", "2.9.21"] {
                assert!(reason.contains(named), "{what}: {named}: {reason}");
            }
        }
        other => panic!("{what}: expected the replicated bucket refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_buckets_are_refused_before_2_9_21() {
    let cluster = NatsCluster::start(3)
        .await
        .expect("a 3-server nats-server cluster (scripts/install-backends)");
    let servers: Vec<String> = (cluster.servers().iter())
        .map(|server| server.addr().to_string())
        .collect();
    let client = async_nats::connect(servers[0].as_str()).await.unwrap();
    let version = client.server_info().version;
    let js = async_nats::jetstream::new(client);
    let config = |bucket: &str| NatsConfig::new(servers.clone()).bucket(bucket);

    // This client would create an R3 bucket.
    let created = config("r3-new").replicas(3).connect().await;
    // An R3 bucket created by someone else, then used with the default of one replica.
    js.create_stream(StreamConfig {
        name: "KV_r3-old".to_owned(),
        subjects: vec!["$KV.r3-old.>".to_owned()],
        max_messages_per_subject: 1,
        storage: StorageType::File,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        num_replicas: 3,
        ..StreamConfig::default()
    })
    .await
    .unwrap();
    let existing = config("r3-old").connect().await;
    let fence = config("r3-old").connect_fence().await;
    if fixed(&version) {
        created.unwrap();
        existing.unwrap();
        fence.unwrap();
        return;
    }
    assert_refused(created, "replicas(3)");
    assert!(
        js.get_stream("KV_r3-new").await.is_err(),
        "the refused R3 bucket was created"
    );
    assert_refused(existing, "an existing R3 bucket");
    assert_refused(fence, "a fence on an existing R3 bucket");

    // One replica is safe on every version, and works on the cluster.
    let locks = config("r1").connect().await.unwrap();
    let fence = config("r1").connect_fence().await.unwrap();
    let key = LockKey::new("replicated/one").unwrap();
    let lease = locks.acquire(&key, &AcquireOptions::new()).await.unwrap();
    let write = distlock_core::FencedWrite::set("v");
    fence.write("resource", lease.token(), write).await.unwrap();
    let token = lease.token();
    lease.release().await.unwrap();
    let next = locks.acquire(&key, &AcquireOptions::new()).await.unwrap();
    assert!(next.token() > token, "{} after {token}", next.token());
    next.release().await.unwrap();
}
