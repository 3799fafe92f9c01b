//! The operator's view through `Inspect`, against a real etcd: the holder with its
//! token and lease, residue, a forced unlock that wakes the next waiter, the
//! pitfalls of a one-member cluster, and the raw round trip.

mod common;

use common::{connect, eventually, server, unique};
use distlock_core::{AcquireOptions, DistributedLock, LossReason, Wait};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_sees_deletes_and_cleans_what_the_protocol_wrote() {
    let etcd = server().await;
    let lock = connect(&[etcd.addr()], "inspect/").await;
    let other = connect(&[etcd.addr()], "inspect/").await;
    let inspect = lock.inspect().expect("the etcd adapter offers Inspect");
    let key = unique("inspected");
    let prefix = key.as_str();
    assert_eq!(inspect.holder(&key).await.unwrap(), None);
    assert!(inspect.residue(prefix).await.unwrap().is_empty());

    let ttl = Duration::from_secs(10);
    let held = lock
        .acquire(&key, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let holder = inspect.holder(&key).await.unwrap().expect("a holder");
    assert_eq!(holder.token, Some(held.token()));
    assert!(
        !holder.owner.is_empty() && holder.owner.chars().all(|c| c.is_ascii_hexdigit()),
        "the owner is the contender's lease id: {holder:?}"
    );
    assert!(
        holder.expires_in.is_some_and(|left| left <= ttl),
        "{holder:?}"
    );

    let waiter = {
        let key = key.clone();
        tokio::spawn(async move {
            let opts = AcquireOptions::new().ttl(ttl).wait(Wait::Forever);
            let lease = other.acquire(&key, &opts).await?;
            let token = lease.token();
            lease.release().await?;
            Ok::<_, distlock_core::LockError>(token)
        })
    };
    eventually(Duration::from_secs(10), "the waiter queued", || async {
        inspect.residue(prefix).await.unwrap().len() == 2
    })
    .await;
    let residue = inspect.residue(prefix).await.unwrap();
    assert!(
        residue.iter().all(|line| line.starts_with("inspect/")),
        "{residue:?}"
    );

    // A forced unlock: the holder hears of it, the waiter gets the lock.
    assert!(inspect.delete_holder(&key).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(5), held.lost())
        .await
        .expect("lost() fired");
    assert_eq!(reason, LossReason::Revoked);
    let token = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter woke")
        .unwrap()
        .unwrap();
    assert!(token > holder.token.unwrap());
    drop(held);
    eventually(Duration::from_secs(5), "nothing left", || async {
        inspect.residue(prefix).await.unwrap().is_empty()
    })
    .await;
    assert!(!inspect.delete_holder(&key).await.unwrap());

    let pitfalls = inspect.pitfalls().await.unwrap();
    assert!(
        pitfalls.iter().any(|p| p.contains("single member")),
        "{pitfalls:?}"
    );
    assert_eq!(inspect.ping_name(), Some("linearizable GET"));
    inspect.ping().await.unwrap();
}
