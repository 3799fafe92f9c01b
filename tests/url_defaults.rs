//! A lock URL's acquire defaults (`?ttl=…&wait=…`) apply to every acquire
//! option the code leaves unset, on the lock and on each primitive it offers, on every
//! registered backend through the facade's `connect`; an option the code sets
//! still wins. One trial per backend: `cargo test -p distlock-tests
//! --all-features --test url_defaults -- etcd`.

use distlock::{AcquireOptions, DynLock, Held, LockError, LockKey, Wait};
use distlock_tests::{Running, TestBackend};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The URL's ttl: well below the built-in 30 s, a whole number of seconds
/// (etcd's and ZooKeeper's granularity).
const URL_TTL: Duration = Duration::from_secs(7);
/// A ttl the code sets, above the URL's.
const CODE_TTL: Duration = Duration::from_secs(12);

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    let mut args = libtest_mimic::Arguments::from_args();
    // Seven servers starting at once on a small machine is enough load to
    // stretch a JVM's first session past its connect timeout.
    args.test_threads.get_or_insert(2);
    let trials = distlock_tests::backends()
        .into_iter()
        .map(|backend| {
            libtest_mimic::Trial::test(backend.name, move || {
                let runtime = tokio::runtime::Runtime::new()?;
                Ok(runtime
                    .block_on(defaults_apply(&backend))
                    .map_err(|e| format!("{}: {e}", backend.name))?)
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

async fn defaults_apply(backend: &TestBackend) -> Result<(), Error> {
    let (base, _servers): (String, Option<Running>) = match backend.launch {
        Some(launch) => {
            let running = launch().await?;
            (running.url.clone(), Some(running))
        }
        None => (format!("{}://url-defaults", backend.name), None),
    };
    let join = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{join}ttl={}s&wait=no", URL_TTL.as_secs());
    let lock = distlock::connect(&url).await?;
    let unique = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let key = |what: &str| LockKey::new(format!("url-defaults/{what}/{unique}"));

    let lease = lock.acquire(&key("lock")?, &AcquireOptions::new()).await?;
    within_url_ttl("a lock", lease.remaining())?;
    waits_as_the_url_says(&lock, &key("lock")?).await?;
    lease.release().await?;
    let lease = lock
        .acquire(&key("set")?, &AcquireOptions::new().ttl(CODE_TTL))
        .await?;
    if lease.remaining() <= URL_TTL {
        return Err(format!(
            "a lock acquired with ttl {CODE_TTL:?} has {:?} left: the URL's ttl won over the code's",
            lease.remaining()
        )
        .into());
    }
    lease.release().await?;
    primitives(&lock, &key("primitive")?).await
}

/// `key` is held: an acquire that leaves `wait` unset is refused at once
/// (the URL's `wait=no`), one that sets a wait times out.
async fn waits_as_the_url_says(lock: &DynLock, key: &LockKey) -> Result<(), Error> {
    let bound = Duration::from_secs(5);
    let unset = tokio::time::timeout(bound, lock.acquire(key, &AcquireOptions::new())).await;
    if !matches!(unset, Ok(Err(LockError::Busy { .. }))) {
        return Err(format!(
            "a held lock acquired with AcquireOptions::new() on a `wait=no` URL gave {:?}, not Busy at once",
            unset.map(|outcome| outcome.map(|_| "a lease"))
        )
        .into());
    }
    let set = AcquireOptions::new().wait(Wait::For(Duration::from_millis(200)));
    let waited = tokio::time::timeout(bound, lock.acquire(key, &set)).await;
    if !matches!(waited, Ok(Err(LockError::Timeout { .. }))) {
        return Err(format!(
            "a held lock acquired with a 200 ms wait on a `wait=no` URL gave {:?}, not Timeout: the URL's wait won over the code's",
            waited.map(|outcome| outcome.map(|_| "a lease"))
        )
        .into());
    }
    Ok(())
}

/// The semaphore, read-write lock and election the lock offers take the URL's
/// ttl too.
async fn primitives(lock: &DynLock, key: &LockKey) -> Result<(), Error> {
    let opts = AcquireOptions::new();
    if let Some(semaphore) = lock.semaphore() {
        let permit = semaphore.acquire(key, 2, &opts).await?;
        within_url_ttl("a permit", permit.remaining())?;
        permit.release().await?;
    }
    if let Some(rwlock) = lock.rwlock() {
        let share = rwlock.read(key, &opts).await?;
        within_url_ttl("a read share", share.remaining())?;
        share.release().await?;
    }
    if let Some(election) = lock.election() {
        let leadership = election.campaign(key, "url-defaults", &opts).await?;
        within_url_ttl("a leadership", leadership.remaining())?;
        leadership.release().await?;
    }
    Ok(())
}

fn within_url_ttl(what: &str, remaining: Duration) -> Result<(), Error> {
    if remaining.is_zero() || remaining > URL_TTL {
        return Err(format!(
            "{what} taken with AcquireOptions::new() has {remaining:?} left, not at most the URL's {URL_TTL:?}"
        )
        .into());
    }
    Ok(())
}
