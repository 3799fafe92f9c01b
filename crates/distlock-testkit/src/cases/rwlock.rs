//! Read-write lock cases: readers share, a writer excludes everyone, a waiting
//! writer is not starved by later readers.

use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::harness::Harness;
use distlock_core::{DynRwLock, FencingToken, Held, LockError, RwLease, RwMode, SingleLease, Wait};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Three readers on three clients hold at once; while they do, a writer and
/// (once the writer is out) more readers behave per the policy: the write try
/// fails, and after the readers leave a writer gets in with a token above all
/// of theirs and then blocks readers. Owners are refused.
pub async fn rwlock_readers_share(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "rwlock_readers_share");
    let key = s.key("rw")?;
    let (a, b, c) = (s.rwlock().await?, s.rwlock().await?, s.rwlock().await?);
    let mut readers = Vec::new();
    for client in [&a, &b, &c] {
        let lease = within(s.handoff_bound(), "a reader joining readers", async {
            client.read(&key, &s.long()).await
        })
        .await??;
        ensure!(
            lease.mode() == RwMode::Read,
            "a read gave a {} lease",
            lease.mode()
        );
        readers.push(lease);
    }
    let tokens: Vec<FencingToken> = readers.iter().map(RwLease::token).collect();
    ensure!(
        tokens.windows(2).all(|t| t[0] < t[1]),
        "readers' tokens {tokens:?} are not distinct and rising"
    );
    ensure!(
        a.try_write(&key, &s.long()).await?.is_none(),
        "a writer got in while three readers held"
    );
    let shares = s.rwlock_shares(&key).await?;
    ensure!(shares == 3, "inspection shows {shares} shares, not 3");
    for lease in readers {
        lease.release().await?;
    }
    let writer = b.write(&key, &s.long()).await?;
    ensure!(
        tokens.iter().all(|t| writer.token() > *t),
        "write token {} not above the readers' {tokens:?}",
        writer.token()
    );
    ensure!(
        c.try_read(&key, &s.long()).await?.is_none(),
        "a reader got in while a writer held"
    );
    ensure!(
        a.try_write(&key, &s.long()).await?.is_none(),
        "a second writer got in"
    );
    let plain = s.client().await?.try_acquire(&key, &s.long()).await?;
    let plain = plain.ok_or_else(|| {
        CaseError::msg(
            "the plain lock of the name was held: it must be independent of its read-write lock",
        )
    })?;
    plain.release().await?;
    let owned = a
        .read(&key, &s.long().owner(distlock_core::Owner::new("me")?))
        .await;
    ensure!(
        matches!(owned, Err(LockError::InvalidOptions { .. })),
        "a read with an owner gave {owned:?}, not InvalidOptions"
    );
    let after = writer.token();
    writer.release().await?;
    let reader = c.read(&key, &s.long()).await?;
    ensure!(
        reader.token() > after,
        "read token {} not above the earlier write's {after}",
        reader.token()
    );
    reader.release().await?;
    s.expect_rwlock_residue(0, Duration::from_secs(5)).await
}

/// K clients × M rounds, one in three a write: in-test counters never see a
/// writer together with anyone, and each write's token is above every token
/// seen in the section before it.
pub async fn rwlock_writer_excludes_under_contention(h: &dyn Harness) -> CaseResult {
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 9;
    let s = Scope::new(h, "rwlock_writer_excludes_under_contention");
    let key = s.key("rw")?;
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let highest = Arc::new(Mutex::new(None::<FencingToken>));
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let rw = s.rwlock().await?;
        let (key, opts) = (
            key.clone(),
            s.long().wait(Wait::For(Duration::from_secs(90))),
        );
        let (readers, writers, highest) = (readers.clone(), writers.clone(), highest.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let write = (client + round) % 3 == 0;
                let lease = if write {
                    rw.write(&key, &opts).await?
                } else {
                    rw.read(&key, &opts).await?
                };
                let seen = highest.lock().ok().and_then(|mut h| {
                    let before = *h;
                    *h = (*h).max(Some(lease.token()));
                    before
                });
                let (r, w) = if write {
                    (readers.load(SeqCst), writers.fetch_add(1, SeqCst) + 1)
                } else {
                    (readers.fetch_add(1, SeqCst) + 1, writers.load(SeqCst))
                };
                if (write && (r != 0 || w != 1)) || (!write && w != 0) {
                    return Err(CaseError::msg(format!(
                        "a {} lease inside with {r} readers and {w} writers",
                        lease.mode()
                    )));
                }
                if write && seen.is_some_and(|seen| lease.token() <= seen) {
                    return Err(CaseError::msg(format!(
                        "write token {} not above {seen:?}, seen earlier",
                        lease.token()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                if write {
                    writers.fetch_sub(1, SeqCst);
                } else {
                    readers.fetch_sub(1, SeqCst);
                }
                lease.release().await?;
            }
            Ok::<_, CaseError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    s.expect_rwlock_residue(0, Duration::from_secs(5)).await
}

/// A writer waiting behind a reader is served before readers that arrive
/// after it (they neither get in by `try_read` nor overtake it), and under a
/// steady stream of overlapping readers a writer still gets in promptly.
pub async fn rwlock_nobody_starved(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "rwlock_nobody_starved");
    let key = s.key("rw")?;
    let (a, b, c) = (s.rwlock().await?, s.rwlock().await?, s.rwlock().await?);
    let first = a.read(&key, &s.long()).await?;
    let writer = spawn_acquire(b.clone(), RwMode::Write, &key, &s);
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!writer.is_finished(), "a writer got in while a reader held");
    ensure!(
        c.try_read(&key, &s.long()).await?.is_none(),
        "a reader overtook a waiting writer"
    );
    let late_reader = spawn_acquire(c.clone(), RwMode::Read, &key, &s);
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !late_reader.is_finished(),
        "a reader overtook a waiting writer by waiting"
    );
    first.release().await?;
    let (_, write) = within(s.handoff_bound(), "the waiting writer", writer).await??;
    let write = write?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    ensure!(
        !late_reader.is_finished(),
        "a reader got in while the writer held"
    );
    let write_token = write.token();
    write.release().await?;
    let (_, read) = within(s.handoff_bound(), "the late reader", late_reader).await??;
    let read = read?;
    ensure!(
        read.token() > write_token,
        "the late reader's token {} is not above the writer's {write_token}",
        read.token()
    );
    read.release().await?;
    a_stream_lets_in(&s, RwMode::Read, RwMode::Write).await?;
    a_stream_lets_in(&s, RwMode::Write, RwMode::Read).await?;
    s.expect_rwlock_residue(0, Duration::from_secs(5)).await
}

/// Four clients take turns at `stream` so that at every moment one of them
/// holds and (for writers) others wait: a newcomer of the other mode must
/// still get in, behind only those who came before it. Readers that always
/// overlap would keep a writer out of a reader-preferring lock forever, and
/// writers that always queue would keep a reader out of a lock that lets any
/// waiting writer go first.
async fn a_stream_lets_in(s: &Scope<'_>, stream: RwMode, newcomer: RwMode) -> CaseResult {
    let key = s.key(&format!("{stream}-stream"))?;
    let hold = match stream {
        RwMode::Read => Duration::from_millis(240),
        RwMode::Write => Duration::from_millis(100),
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut members = Vec::new();
    for i in 0..4u64 {
        let (rw, key, opts, stop) = (s.rwlock().await?, key.clone(), s.long(), stop.clone());
        members.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(60 * i)).await;
            while !stop.load(SeqCst) {
                let lease = acquire(&rw, &key, stream, &opts).await?;
                tokio::time::sleep(hold).await;
                lease.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = s.rwlock().await?;
    // Behind at most the four members (one holding, the others queued first),
    // each a hold and a hand-off.
    let bound = s.handoff_bound() * 2 + hold * 4;
    let what = format!("a {newcomer} amid a stream of {stream}s");
    let got = within(bound, &what, acquire(&late, &key, newcomer, &s.long())).await;
    stop.store(true, SeqCst);
    let got = got??;
    got.release().await?;
    for member in members {
        within(Duration::from_secs(10), "a member of the stream", member).await???;
    }
    Ok(())
}

type Acquiring = tokio::task::JoinHandle<(Instant, Result<RwLease, LockError>)>;

/// Acquires `mode` on `key` in a task, recording when it was granted.
fn spawn_acquire(
    rw: DynRwLock,
    mode: RwMode,
    key: &distlock_core::LockKey,
    s: &Scope<'_>,
) -> Acquiring {
    let (key, opts) = (key.clone(), s.long());
    tokio::spawn(async move {
        let lease = acquire(&rw, &key, mode, &opts).await;
        (Instant::now(), lease)
    })
}

/// A read or a write, as `mode` says.
async fn acquire(
    rw: &DynRwLock,
    key: &distlock_core::LockKey,
    mode: RwMode,
    opts: &distlock_core::AcquireOptions,
) -> Result<RwLease, LockError> {
    match mode {
        RwMode::Read => rw.read(key, opts).await,
        RwMode::Write => rw.write(key, opts).await,
    }
}

impl Scope<'_> {
    /// A new independent read-write lock client (the backend offers them).
    pub async fn rwlock(&self) -> Result<DynRwLock, CaseError> {
        let client = self.client().await?;
        client
            .rwlock()
            .ok_or_else(|| CaseError::msg(format!("{} offers no read-write lock", client.name())))
    }

    /// How many live shares `key` has, by the backend's inspection.
    pub async fn rwlock_shares(&self, key: &distlock_core::LockKey) -> Result<usize, CaseError> {
        let rw = self.rwlock().await?;
        let inspect = rw.inspect().ok_or_else(|| {
            CaseError::msg(format!(
                "{} read-write lock offers no inspection",
                rw.name()
            ))
        })?;
        Ok(inspect.shares(key).await?.len())
    }

    /// Waits until the read-write lock residue (shares and queue entries)
    /// under this case's prefix is `expected`, failing at `within`.
    pub async fn expect_rwlock_residue(&self, expected: usize, within: Duration) -> CaseResult {
        let rw = self.rwlock().await?;
        let Some(inspect) = rw.inspect() else {
            return Err(CaseError::msg(format!(
                "{} read-write lock offers no inspection",
                rw.name()
            )));
        };
        self.poll_residue("read-write lock", expected, within, || {
            inspect.residue(self.prefix())
        })
        .await
    }
}
