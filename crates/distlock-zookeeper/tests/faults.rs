//! Server faults while a lock is held and another client waits: the server
//! frozen (SIGSTOP) for less and for more than the session timeout, and killed
//! and restarted on the same data. Every critical section goes into a
//! `History`, which checks that no two ever overlapped and tokens only rose.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test set-up: a failure here fails the test"
)]

mod common;

use distlock_core::toolkit::Inspect;
use distlock_core::{
    AcquireOptions, DistributedLock, FencingToken, Lease, LockError, LockKey, LossReason, Wait,
};
use distlock_testkit::servers::{ZooKeeperOptions, ZooKeeperServer};
use distlock_testkit::{History, Section};
use distlock_zookeeper::ZkLock;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const HOLDER: usize = 0;
const WAITER: usize = 1;

fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(ttl)
        .wait(Wait::For(Duration::from_secs(60)))
}

/// A server of the test's own; a holder of `key`; a waiter in line behind it,
/// which acquires, records its section and releases; and a note of when the
/// holder's `lost()` fired.
struct Scene {
    server: ZooKeeperServer,
    holder: ZkLock,
    waiter: Arc<ZkLock>,
    inspector: ZkLock,
    key: LockKey,
    history: Arc<History>,
    /// Until the holder releases.
    lease: Option<Lease>,
    token: FencingToken,
    entered: Instant,
    /// The waiter's token and when it got the lock.
    waiting: JoinHandle<Result<(FencingToken, Instant), LockError>>,
    lost: JoinHandle<(LossReason, Instant)>,
}

impl Scene {
    async fn start(test: &str, holder_ttl: Duration, waiter_ttl: Duration) -> Scene {
        let server = common::dedicated_server(ZooKeeperOptions::default()).await;
        let (namespace, url) = (common::namespace(test), server.url());
        let connect = || common::client(&url, &namespace);
        let (holder, waiter, inspector) = (connect().await, connect().await, connect().await);
        let waiter = Arc::new(waiter);
        let (key, history) = (LockKey::new("k").unwrap(), Arc::new(History::new()));
        let lease = holder.acquire(&key, &opts(holder_ttl)).await.unwrap();
        let (entered, token) = (Instant::now(), lease.token());
        let lost = lease.lost();
        let lost = tokio::spawn(async move { (lost.await, Instant::now()) });
        let (task_waiter, task_key, task_history) = (waiter.clone(), key.clone(), history.clone());
        let waiting = tokio::spawn(async move {
            let lease = task_waiter.acquire(&task_key, &opts(waiter_ttl)).await?;
            let granted = Instant::now();
            task_history.record_lease(WAITER, &lease, granted);
            let token = lease.token();
            lease.release().await?;
            Ok((token, granted))
        });
        let inspect = inspector.inspect().unwrap();
        common::eventually(Duration::from_secs(10), "the waiter queues", || async {
            inspect.residue("").await.unwrap().len() == 2
        })
        .await;
        Scene {
            server,
            holder,
            waiter,
            inspector,
            key,
            history,
            lease: Some(lease),
            token,
            entered,
            waiting,
            lost,
        }
    }

    fn lease(&self) -> &Lease {
        self.lease.as_ref().expect("the holder has released")
    }

    fn inspect(&self) -> &dyn Inspect {
        self.inspector.inspect().unwrap()
    }

    /// The holder still holds: the server's queue has its node first, and the
    /// waiter is still waiting. Then it releases, recording its section.
    async fn holder_releases(&mut self) {
        let found = self.inspect().holder(&self.key).await.unwrap().unwrap();
        assert_eq!(found.token, Some(self.token));
        assert!(
            !self.waiting.is_finished(),
            "the waiter got in while the holder held"
        );
        let lease = self.lease.take().expect("the holder has released");
        self.history.record_lease(HOLDER, &lease, self.entered);
        lease.release().await.unwrap();
    }

    /// Records the holder's section as ending when `lost()` fired.
    fn holder_lost_at(&self, lost_at: Instant) {
        self.history.record(Section {
            key: self.key.clone(),
            token: self.token,
            client: HOLDER,
            entered: self.entered,
            left: lost_at,
        });
    }

    /// The waiter's token and when it got the lock, within `within`.
    async fn waiter_got_in(&mut self, within: Duration) -> (FencingToken, Instant) {
        tokio::time::timeout(within, &mut self.waiting)
            .await
            .expect("the waiter is still waiting")
            .unwrap()
            .unwrap()
    }
}

/// The server freezes for 5 s, under half the 12 s session timeout but longer
/// than the client's 4.8 s connection timeout, so the client drops the
/// connection and reconnects (to a server that cannot answer yet). The holder
/// keeps its lock, proven by a renewal after the thaw and by the server's queue;
/// the waiter stays in line, and gets the lock once the holder releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_pause_keeps_the_holder_and_the_waiter_in_line() {
    let ttl = Duration::from_secs(12);
    let mut scene = Scene::start("pause-short", ttl, ttl).await;

    scene.server.pause().unwrap();
    // The fault itself: frozen for 5 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !scene.waiting.is_finished(),
        "the waiter got in during the pause"
    );
    scene.server.resume().unwrap();

    // A renewal succeeds once the client has reconnected: the node and the
    // session are still ours.
    let thawed = Instant::now();
    while let Err(e) = scene.lease().renew().await {
        let lost = matches!(e, LockError::Lost { .. });
        assert!(
            !lost && thawed.elapsed() < ttl,
            "no renewal after the thaw: {e}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        scene.lease().is_held(),
        "lost after a pause shorter than the ttl"
    );
    scene.holder_releases().await;
    let (waiter_token, _) = scene.waiter_got_in(Duration::from_secs(10)).await;
    assert!(waiter_token > scene.token);
    assert_eq!(scene.history.check(), Vec::new());
}

/// The server freezes for 3 s, three times the holder's 1 s session timeout;
/// the waiter's session is 20 s, so it survives. The holder stops believing at
/// its local deadline (`lost()` with `Expired`, no later than 1 s after the
/// freeze, since nothing renewed it after) while the server still cannot hand
/// the lock on; after the thaw the server expires the holder's session and the
/// waiter gets the lock, strictly after the holder's section ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_pause_ends_the_holder_at_its_deadline_then_the_waiter_gets_in() {
    let ttl = Duration::from_secs(1);
    let mut scene = Scene::start("pause-long", ttl, Duration::from_secs(20)).await;

    scene.server.pause().unwrap();
    // No renewal sent after this instant can succeed before the thaw, and
    // earlier ones only move the deadline to their send time + ttl.
    let latest_deadline = Instant::now() + ttl;
    // The fault itself: frozen for 3 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        scene.lost.is_finished(),
        "the holder still believes it holds the lock"
    );
    assert!(
        !scene.waiting.is_finished(),
        "the waiter got in during the pause"
    );
    scene.server.resume().unwrap();

    let (reason, lost_at) = (&mut scene.lost).await.unwrap();
    assert_eq!(reason, LossReason::Expired);
    // Slack for a loaded machine to run the deadline's timer; the server can
    // hand the lock on only after the thaw, 2 s later.
    assert!(
        lost_at <= latest_deadline + Duration::from_millis(500),
        "lost() fired {:?} after the latest possible deadline",
        lost_at.saturating_duration_since(latest_deadline)
    );
    assert!(!scene.lease().is_held());
    scene.holder_lost_at(lost_at);
    let (waiter_token, granted) = scene.waiter_got_in(Duration::from_secs(20)).await;
    assert!(granted > lost_at);
    assert!(waiter_token > scene.token);
    assert_eq!(scene.history.check(), Vec::new());
}

/// The server is killed (SIGKILL) and restarted on the same data dir while a
/// lock is held and another client waits, all with 10 s sessions. The server
/// reloads the sessions, so the holder usually keeps its lock (a renewal and the
/// server's queue prove it); on a machine so slow that the restart outlasts the
/// session, `lost()` fires instead. Either way there is never a second holder at
/// once, and locks taken after the restart get higher tokens than every earlier
/// one (czxid).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_restart_keeps_one_holder_at_a_time_and_tokens_rising() {
    let ttl = Duration::from_secs(10);
    let mut scene = Scene::start("restart", ttl, ttl).await;

    scene.server.kill();
    scene.server.restart().await.unwrap();
    // Renew until the holder reaches the restarted server or learns it lost.
    let started = Instant::now();
    let survived = loop {
        match scene.lease().renew().await {
            Ok(()) => break true,
            Err(LockError::Lost { .. }) => break false,
            Err(e) => assert!(started.elapsed() < ttl * 3, "no verdict: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let verdict = if survived { "kept" } else { "lost" };
    println!("after the restart the holder {verdict} its lock");
    if survived {
        // The inspector's session reconnects on its own schedule: while the
        // server is down the client library backs off exponentially.
        let reconnecting = Instant::now();
        while let Err(e) = scene.inspect().ping().await {
            let waited = reconnecting.elapsed();
            assert!(waited < ttl * 3, "inspector not back after {waited:?}: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        scene.holder_releases().await;
    } else {
        let (_, lost_at) = (&mut scene.lost).await.unwrap();
        scene.holder_lost_at(lost_at);
    }
    let mut newest = scene.token;
    let waited = tokio::time::timeout(ttl * 3, &mut scene.waiting).await;
    match waited.expect("the waiter is still waiting").unwrap() {
        Ok((token, _)) => newest = newest.max(token),
        // Its session may have expired with the holder's: it was told so.
        Err(e) => assert!(!survived && e.is_transient(), "waiter failed: {e}"),
    }

    for (client, lock) in [(HOLDER, &scene.holder), (WAITER, &*scene.waiter)] {
        let lease = lock.acquire(&scene.key, &opts(ttl)).await.unwrap();
        let token = lease.token();
        println!(
            "token {:#x} after the restart, {:#x} before",
            u64::from(token),
            u64::from(newest)
        );
        assert!(token > newest, "token {token} after {newest}");
        scene.history.record_lease(client, &lease, Instant::now());
        lease.release().await.unwrap();
    }
    assert_eq!(scene.history.check(), Vec::new());
}
