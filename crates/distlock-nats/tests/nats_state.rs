//! Bounded state of a crashed holder: its record, never released, is collected
//! by other clients' acquires once it has gone unrenewed for its ttl plus
//! `state_ttl`, never before, and the name's next token is still higher.

use distlock_core::{AcquireOptions, DistributedLock, LockKey};
use distlock_nats::NatsConfig;
use distlock_testkit::servers::NatsServer;
use std::time::{Duration, Instant};

const STATE_TTL: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_record_is_collected_after_ttl_and_state_ttl() {
    let server = NatsServer::start()
        .await
        .expect("nats-server (scripts/install-backends)");
    let config = NatsConfig::new([server.addr().to_string()])
        .bucket("state")
        .state_ttl(STATE_TTL);
    let other = config.clone().connect().await.unwrap();
    let inspect = other.backend();
    let ttl = Duration::from_millis(500);
    let opts = AcquireOptions::new().ttl(ttl);
    let key = LockKey::new("crashed/k").unwrap();
    // A holder whose process dies holding the lock: its runtime ends with the
    // lease neither released nor renewed.
    let (crashed_config, crashed_key, crashed_opts) = (config, key.clone(), opts.clone());
    // Taken before the grant: the server measures the record's idle time from later.
    let crashed_at = Instant::now();
    let token = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let lock = crashed_config.connect().await.unwrap();
            let lease = lock.acquire(&crashed_key, &crashed_opts).await.unwrap();
            let token = lease.token();
            std::mem::forget(lease);
            token
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
            assert!(idle > ttl + STATE_TTL, "collected after only {idle:?}");
            break;
        }
        assert!(
            idle < ttl + STATE_TTL + Duration::from_secs(15),
            "the crashed record is still there after {idle:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let next = other.acquire(&key, &opts).await.unwrap();
    assert!(next.token() > token, "{} not above {token}", next.token());
    next.release().await.unwrap();
}
