//! Bounded state of a crashed holder: its record (a lock's, or the entry of a
//! semaphore or read-write lock whose last member it was), never released,
//! is collected by other clients' acquires once it has gone unrenewed for
//! its ttl plus `state_ttl`, never before, and the name's next token is
//! still higher.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::{AcquireOptions, DistributedLock, FencingToken, LockKey, SingleLease};
use distlock_nats::{NatsConfig, NatsLock};
use distlock_testkit::servers::NatsServer;
use std::time::{Duration, Instant};

const STATE_TTL: Duration = Duration::from_secs(2);
const TTL: Duration = Duration::from_millis(500);

/// What the crashed holder held.
#[derive(Debug, Clone, Copy)]
enum Held {
    Lock,
    Permit,
    ReadShare,
}

impl Held {
    /// Takes it on `lock`, for `key`; its token.
    async fn take(self, lock: &NatsLock, key: &LockKey) -> FencingToken {
        let opts = AcquireOptions::new().ttl(TTL);
        match self {
            Held::Lock => {
                let lease = lock.acquire(key, &opts).await.unwrap();
                let token = lease.token();
                // Neither released nor renewed once the runtime ends.
                std::mem::forget(lease);
                token
            }
            Held::Permit => {
                let semaphore = lock.semaphore().unwrap();
                let permit = semaphore.acquire(key, 2, &opts).await.unwrap();
                let token = permit.token();
                std::mem::forget(permit);
                token
            }
            Held::ReadShare => {
                let read = lock.rwlock().unwrap().read(key, &opts).await.unwrap();
                let token = read.token();
                std::mem::forget(read);
                token
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_record_is_collected_after_ttl_and_state_ttl() {
    crashed_holder_is_collected(Held::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_whose_last_permit_crashed_is_collected() {
    crashed_holder_is_collected(Held::Permit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rwlock_whose_last_reader_crashed_is_collected() {
    crashed_holder_is_collected(Held::ReadShare).await;
}

/// A holder of `held` whose process dies holding it leaves a record that
/// other clients' acquires collect after its ttl plus `state_ttl`; the
/// name's next token of the same kind is higher.
async fn crashed_holder_is_collected(held: Held) {
    let server = NatsServer::start()
        .await
        .expect("nats-server (scripts/install-backends)");
    let config = NatsConfig::new([server.addr().to_string()])
        .bucket("state")
        .state_ttl(STATE_TTL);
    let other = config.clone().connect().await.unwrap();
    let inspect = other.backend();
    let key = LockKey::new("crashed/k").unwrap();
    // A holder whose process dies holding: its runtime ends with the lease
    // neither released nor renewed.
    let crashed_key = key.clone();
    // Taken before the grant: the server measures the record's idle time from later.
    let crashed_at = Instant::now();
    let token = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let lock = config.connect().await.unwrap();
            held.take(&lock, &crashed_key).await
        })
    })
    .join()
    .unwrap();
    let records = || async {
        distlock_core::toolkit::Inspect::state_records(&*inspect, "crashed/")
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(records().await, 1, "{held:?}: the crashed holder's record");
    let opts = AcquireOptions::new().ttl(TTL);
    for round in 0_u32.. {
        // Acquires of other names are what runs the sweeps.
        let name = LockKey::new(format!("elsewhere/{round}")).unwrap();
        other
            .acquire(&name, &opts)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let left = records().await;
        let idle = crashed_at.elapsed();
        if left == 0 {
            assert!(
                idle > TTL + STATE_TTL,
                "{held:?}: collected after only {idle:?}"
            );
            break;
        }
        assert!(
            idle < TTL + STATE_TTL + Duration::from_secs(15),
            "{held:?}: the crashed record is still there after {idle:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let next = held.take(&other, &key).await;
    assert!(next > token, "{held:?}: {next} not above {token}");
}
