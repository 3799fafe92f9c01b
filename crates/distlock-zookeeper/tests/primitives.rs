//! The node layouts of the semaphore, the election and the read-write lock, as
//! Curator's recipes read them: read back with a plain client (the operator's
//! view), what the conformance cases do not look at.

mod common;

use distlock_core::{AcquireOptions, DistributedLock, Held, LockKey, SingleLease};
use std::time::Duration;

fn opts() -> AcquireOptions {
    AcquireOptions::new().ttl(Duration::from_secs(10))
}

/// True for `_c_{36-char uuid}-{base}{10 digits}`, Curator's protected name.
fn curator_name(name: &str, base: &str) -> bool {
    let Some(rest) = name.strip_prefix("_c_") else {
        return false;
    };
    let (Some(uuid), Some(tail)) = (rest.get(..36), rest.get(36..)) else {
        return false;
    };
    let Some(sequence) = tail.strip_prefix(&format!("-{base}")) else {
        return false;
    };
    uuid::Uuid::try_parse(uuid).is_ok()
        && sequence.len() == 10
        && sequence.bytes().all(|b| b.is_ascii_digit())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_curator_leases_with_their_slot_in_the_data() {
    let server = common::shared_server().await;
    let ns = common::namespace("sem-layout");
    let lock = common::client(&server.url(), &ns).await;
    let admin = common::admin(&server.url(), None).await;
    let semaphore = lock.semaphore().expect("a semaphore");
    let key = LockKey::new("workers/ids").unwrap();
    let first = semaphore.acquire(&key, 2, &opts()).await.unwrap();
    let second = semaphore.acquire(&key, 2, &opts()).await.unwrap();

    let leases = format!("/{ns}/%semaphore/workers%2Fids/leases");
    let mut names = admin.list_children(&leases).await.unwrap();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    let mut seen = Vec::new();
    for name in &names {
        assert!(
            curator_name(name, "lease-"),
            "{name} is not a Curator lease name"
        );
        let (data, stat) = admin.get_data(&format!("{leases}/{name}")).await.unwrap();
        assert_ne!(stat.ephemeral_owner, 0, "{name} is not ephemeral");
        seen.push((String::from_utf8(data).unwrap(), stat.czxid as u64));
    }
    seen.sort();
    let expected = [
        (
            format!("distlock slot={} limit=2", first.slot()),
            first.token().get(),
        ),
        (
            format!("distlock slot={} limit=2", second.slot()),
            second.token().get(),
        ),
    ];
    let mut expected = expected.to_vec();
    expected.sort();
    assert_eq!(seen, expected);
    // No guard lock node is left behind by an uncontended acquire.
    let guards = admin
        .list_children(&format!("/{ns}/%semaphore/workers%2Fids/locks"))
        .await;
    assert!(guards.as_ref().map_or(true, |g| g.is_empty()), "{guards:?}");
    first.release().await.unwrap();
    second.release().await.unwrap();
    assert!(
        admin
            .list_children(&leases)
            .await
            .map_or(true, |l| l.is_empty())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_are_latch_nodes_holding_their_proposal() {
    let server = common::shared_server().await;
    let ns = common::namespace("latch-layout");
    let lock = common::client(&server.url(), &ns).await;
    let admin = common::admin(&server.url(), None).await;
    let election = lock.election().expect("an election");
    let key = LockKey::new("scheduler").unwrap();
    let leading = election.campaign(&key, "node-a", &opts()).await.unwrap();

    let dir = format!("/{ns}/%election/scheduler");
    let names = admin.list_children(&dir).await.unwrap();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(curator_name(&names[0], "latch-"), "{names:?}");
    let (data, stat) = admin
        .get_data(&format!("{dir}/{}", names[0]))
        .await
        .unwrap();
    assert_eq!(data, b"node-a");
    assert_eq!(stat.czxid as u64, leading.token().get());
    let leader = election.leader(&key).await.unwrap().expect("a leader");
    assert_eq!(leader.owner, "node-a");
    assert_eq!(leader.token, Some(leading.token()));
    leading.release().await.unwrap();
    assert_eq!(election.leader(&key).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_share_one_queue_with_curator_markers() {
    let server = common::shared_server().await;
    let ns = common::namespace("rw-layout");
    let lock = common::client(&server.url(), &ns).await;
    let admin = common::admin(&server.url(), None).await;
    let rwlock = lock.rwlock().expect("a read-write lock");
    let key = LockKey::new("catalog").unwrap();
    let reader = rwlock.read(&key, &opts()).await.unwrap();

    let dir = format!("/{ns}/%rw/catalog");
    let names = admin.list_children(&dir).await.unwrap();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(curator_name(&names[0], "__READ__"), "{names:?}");
    // A writer queues behind the reader in the same directory.
    let waiting = tokio::spawn({
        let (rwlock, key) = (rwlock.clone(), key.clone());
        async move { rwlock.write(&key, &opts()).await }
    });
    common::eventually(Duration::from_secs(5), "the writer's node", || {
        let (admin, dir) = (admin.clone(), dir.clone());
        async move {
            let names = admin.list_children(&dir).await.unwrap_or_default();
            names.iter().any(|n| curator_name(n, "__WRIT__"))
        }
    })
    .await;
    assert!(
        !waiting.is_finished(),
        "a writer got in while a reader held"
    );
    let read_token = reader.token();
    reader.release().await.unwrap();
    let writer = waiting.await.unwrap().unwrap();
    assert!(writer.token() > read_token);
    writer.release().await.unwrap();
}

/// An uncontended permit costs four requests: list the leases, create + list
/// (one round trip), and the release's delete; no guard lock is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_permit_cycle_costs_four_requests() {
    const CYCLES: u64 = 10;
    let server = common::shared_server().await;
    let lock = common::client(&server.url(), &common::namespace("sem-rtt")).await;
    let semaphore = lock.semaphore().expect("a semaphore");
    let key = LockKey::new("hot").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    // The first cycle also creates the directories.
    semaphore
        .acquire(&key, 3, &opts)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = lock.backend().requests_sent();
    for _ in 0..CYCLES {
        let permit = semaphore.acquire(&key, 3, &opts).await.unwrap();
        assert_eq!(permit.slot(), 0);
        permit.release().await.unwrap();
    }
    assert_eq!(lock.backend().requests_sent() - before, 4 * CYCLES);
}
