//! MariaDB in a container, killed (`docker kill`) while a `for_update` holder
//! holds: the holder's `lost()` fires, and once the server is back the next
//! holder gets in with a higher token.

use super::{Case, check_history};
use distlock_core::{AcquireOptions, BoxError, DynLock, LockKey, Wait};
use distlock_mysql::{MySqlConfig, Strategy};
use distlock_testkit::history::History;
use distlock_testkit::servers::MariaDbServer;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(3);

pub(super) fn cases() -> Vec<Case> {
    vec![(
        "kill_under_for_update",
        || Box::pin(kill_under_for_update()),
    )]
}

async fn client(server: &MariaDbServer) -> Result<DynLock, BoxError> {
    Ok(MySqlConfig::from_url(&server.url())?
        .table("topology_locks")
        .strategy(Strategy::ForUpdate)
        .connect()
        .await?)
}

async fn kill_under_for_update() -> Result<(), BoxError> {
    let server = MariaDbServer::start().await?;
    let holder = client(&server).await?;
    let next_client = client(&server).await?;
    let key = LockKey::new(format!("killed-{:08x}", rand::random::<u32>()))?;
    let history = History::new();
    let lease = holder
        .acquire(&key, &AcquireOptions::new().ttl(TTL))
        .await?;
    let entered = Instant::now();
    // A contender sees the lock held before the kill.
    let busy = next_client
        .try_acquire(&key, &AcquireOptions::new().ttl(TTL).wait(Wait::No))
        .await?;
    if busy.is_some() {
        return Err("a contender got the held lock".into());
    }
    server.kill();
    let killed = Instant::now();
    let reason = tokio::time::timeout(TTL * 2, lease.lost())
        .await
        .map_err(|_| "lost() did not fire after the server was killed")?;
    let lost_after = killed.elapsed();
    history.record_lease(0, &lease, entered);
    server.restart().await?;
    let restarted_after = killed.elapsed();
    // The next holder gets in once the server is back (its pool reconnects).
    let deadline = Instant::now() + Duration::from_secs(60);
    let options = AcquireOptions::new()
        .ttl(TTL)
        .wait(Wait::For(Duration::from_secs(5)));
    let (next, granted) = loop {
        match next_client.acquire(&key, &options).await {
            Ok(next) => break (next, Instant::now()),
            Err(error) if Instant::now() >= deadline => {
                return Err(format!("no next holder after the restart: {error}").into());
            }
            // The pool's connections died with the server; it reconnects.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    history.record_lease(1, &next, granted);
    check_history(&history)?;
    if next.token() <= lease.token() {
        return Err(format!(
            "token {} after {} did not rise",
            next.token(),
            lease.token()
        )
        .into());
    }
    println!(
        "lost() ({reason:?}) {lost_after:?} after the kill; server back after {restarted_after:?}"
    );
    next.release().await?;
    Ok(())
}
