//! The lock implementations side by side, each behind one trait: distlock
//! (through `distlock::connect`, as users call it), etcd's server-side Lock
//! API (its `Lock`/`Unlock` RPCs, through distlock-etcd's small gRPC client),
//! rslock's Redlock, zookeeper-client's lock recipe and, on PostgreSQL and
//! NATS, the calls a user would write by hand (`postgres.rs`, `nats.rs`), each
//! used the way its documentation shows, with its default settings.

use crate::nats::KvLock;
use crate::postgres::{Advisory, DistlockTx, LeaseTable, XactLock};
use async_trait::async_trait;
use distlock::{AcquireOptions, DynLock, LockKey, Wait};
use std::time::Duration;
use zookeeper_client as zk;

/// The ttl every implementation is asked for (the etcd ones get a lease of it).
pub const TTL: Duration = Duration::from_secs(30);

/// One client of one lock implementation.
#[async_trait]
pub trait Peer: Send {
    /// Takes the lock `name`, waiting as long as it takes, calls `held`, and
    /// releases it the way the implementation releases.
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String>;
}

/// Which implementation, for connecting its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// distlock on the backend of the URL.
    Distlock,
    /// distlock's PostgreSQL lock inside the caller's transaction (`lock_in`).
    DistlockTx,
    /// etcd's `Lock`/`Unlock` RPCs with a lease per client (distlock-etcd's gRPC client).
    EtcdLockApi,
    /// rslock's `LockManager::acquire` and `LockGuard::release`.
    Rslock,
    /// The same with a fencing token: once the lock is held, `INCR` of a
    /// counter key per name on every node at once, the token the largest
    /// (as distlock's Redlock token is): the equal-work row next to rslock's
    /// own (rslock gives no token).
    RslockFenced,
    /// zookeeper-client's `Client::lock` with Curator's node names.
    ZkRecipe,
    /// The same recipe with its release awaited, as distlock awaits its own:
    /// the equal-work row next to the recipe's own.
    ZkRecipeAwaited,
    /// A hand-written lease table on PostgreSQL (sqlx).
    PgLeaseTable,
    /// A hand-written session advisory lock on PostgreSQL (sqlx).
    PgAdvisory,
    /// The same with a fencing token: a counter row raised once the lock is held.
    PgAdvisoryFenced,
    /// A hand-written `pg_advisory_xact_lock` with a token upsert, in one
    /// transaction (sqlx).
    PgXactFenced,
    /// A hand-written lock on a NATS KV bucket (async-nats).
    NatsKv,
    /// distlock's protocol floor: `Inspect::floor_cycle`, the requests of one
    /// cycle sent raw, without the lease around them.
    Floor,
}

impl Kind {
    /// The implementation's name in the table.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Distlock => "distlock",
            Kind::DistlockTx => "distlock lock_in",
            Kind::EtcdLockApi => "etcd Lock API (gRPC)",
            Kind::Rslock => "rslock",
            Kind::RslockFenced => "rslock + INCR token",
            Kind::ZkRecipe => "zookeeper-client lock recipe",
            Kind::ZkRecipeAwaited => "zookeeper-client lock recipe, delete awaited",
            Kind::PgLeaseTable => "hand-written lease table (sqlx)",
            Kind::PgAdvisory => "hand-written pg_advisory_lock (sqlx)",
            Kind::PgAdvisoryFenced => "hand-written pg_advisory_lock + token upsert (sqlx)",
            Kind::PgXactFenced => "hand-written pg_advisory_xact_lock + token upsert (sqlx)",
            Kind::NatsKv => "hand-written KV create + delete (async-nats)",
            Kind::Floor => "protocol floor (distlock's requests raw)",
        }
    }

    /// A new client of the servers `target` names: a distlock URL, `host:port`
    /// for etcd and ZooKeeper, `redis://` URLs separated by commas for rslock,
    /// a `postgres://` URL for the hand-written PostgreSQL locks, a `nats://`
    /// URL for the hand-written KV lock, a distlock URL for the floor and
    /// (of the `advisory` strategy) for `lock_in`.
    pub async fn connect(self, target: &str) -> Result<Box<dyn Peer>, String> {
        Ok(match self {
            Kind::Distlock => Box::new(Distlock {
                lock: distlock::connect(target).await.map_err(|e| e.to_string())?,
            }),
            Kind::EtcdLockApi => {
                let client =
                    distlock::etcd::client::Client::connect([format!("http://{target}")], None)
                        .await
                        .map_err(|e| format!("etcd connect: {e}"))?;
                let ttl = i64::try_from(TTL.as_secs()).unwrap_or(i64::MAX);
                let lease = client.lease_client().grant(ttl).await;
                let lease = lease.map_err(|e| format!("etcd lease grant: {e}"))?;
                // A run lasts seconds, well inside the lease: no keep-alive needed.
                Box::new(EtcdLockApi {
                    client: client.lock_client(),
                    lease: lease.id(),
                })
            }
            Kind::Rslock => {
                let nodes: Vec<String> = target.split(',').map(str::to_owned).collect();
                Box::new(Rslock {
                    manager: rslock::LockManager::new(nodes),
                    tokens: Vec::new(),
                })
            }
            Kind::RslockFenced => {
                let nodes: Vec<String> = target.split(',').map(str::to_owned).collect();
                let mut tokens = Vec::with_capacity(nodes.len());
                for node in &nodes {
                    let client = redis::Client::open(node.as_str()).map_err(|e| e.to_string())?;
                    let conn = client.get_multiplexed_async_connection().await;
                    tokens.push(conn.map_err(|e| format!("redis: {e}"))?);
                }
                Box::new(Rslock {
                    manager: rslock::LockManager::new(nodes),
                    tokens,
                })
            }
            Kind::ZkRecipe | Kind::ZkRecipeAwaited => {
                let client = zk::Client::connector()
                    .with_session_timeout(TTL)
                    .connect(target)
                    .await
                    .map_err(|e| format!("zookeeper connect: {e}"))?;
                Box::new(ZkRecipe {
                    client,
                    awaited: self == Kind::ZkRecipeAwaited,
                })
            }
            Kind::PgLeaseTable => Box::new(LeaseTable::connect(target).await?),
            Kind::PgAdvisory => Box::new(Advisory::connect(target, false).await?),
            Kind::PgAdvisoryFenced => Box::new(Advisory::connect(target, true).await?),
            Kind::DistlockTx => Box::new(DistlockTx::connect(target).await?),
            Kind::PgXactFenced => Box::new(XactLock::connect(target).await?),
            Kind::NatsKv => Box::new(KvLock::connect(target).await?),
            Kind::Floor => Box::new(Floor {
                lock: distlock::connect(target).await.map_err(|e| e.to_string())?,
            }),
        })
    }
}

struct Distlock {
    lock: DynLock,
}

#[async_trait]
impl Peer for Distlock {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        let key = LockKey::new(name).map_err(|e| e.to_string())?;
        let opts = AcquireOptions::new().ttl(TTL).wait(Wait::Forever);
        let lease = self
            .lock
            .acquire(&key, &opts)
            .await
            .map_err(|e| e.to_string())?;
        held();
        lease.release().await.map_err(|e| e.to_string())
    }
}

struct Floor {
    lock: DynLock,
}

#[async_trait]
impl Peer for Floor {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        let key = LockKey::new(name).map_err(|e| e.to_string())?;
        let inspect = self.lock.inspect().ok_or("no server-side inspection")?;
        held();
        inspect
            .floor_cycle(&key, TTL)
            .await
            .map_err(|e| e.to_string())
    }
}

struct EtcdLockApi {
    client: distlock::etcd::client::LockClient,
    lease: i64,
}

#[async_trait]
impl Peer for EtcdLockApi {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        let locked = self.client.lock(name, self.lease).await;
        let locked = locked.map_err(|e| format!("etcd lock: {e}"))?;
        held();
        self.client
            .unlock(locked.key())
            .await
            .map(drop)
            .map_err(|e| format!("etcd unlock: {e}"))
    }
}

struct Rslock {
    manager: rslock::LockManager,
    /// Where `RslockFenced` raises its tokens: one connection per node.
    tokens: Vec<redis::aio::MultiplexedConnection>,
}

#[async_trait]
impl Peer for Rslock {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        // `acquire` retries until it gets the lock: 3 attempts per call with a
        // random pause below 200 ms between them (its defaults), then again.
        let guard = self.manager.acquire(name, TTL).await;
        let guard = guard.map_err(|e| format!("rslock acquire: {e}"))?;
        if !self.tokens.is_empty() {
            let counter = format!("distlock-peers:token:{name}");
            let raised = self.tokens.iter_mut().map(|conn| {
                let incr = redis::cmd("INCR").arg(&counter).clone();
                async move { incr.query_async::<u64>(conn).await }
            });
            let mut token = 0;
            for raised in futures_util::future::join_all(raised).await {
                token = token.max(raised.map_err(|e| format!("redis INCR: {e}"))?);
            }
            std::hint::black_box(token);
        }
        held();
        guard.release().await;
        Ok(())
    }
}

struct ZkRecipe {
    client: zk::Client,
    /// Delete the lock's node and wait for the answer, instead of dropping
    /// the guard.
    awaited: bool,
}

#[async_trait]
impl Peer for ZkRecipe {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        let dir = format!("/distlock-peers/{name}");
        let prefix = zk::LockPrefix::new_curator(&dir, "lock-").map_err(|e| e.to_string())?;
        let parents = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let options = zk::LockOptions::new(zk::Acls::anyone_all())
            .with_ancestor_options(parents)
            .map_err(|e| e.to_string())?;
        let lock = self.client.lock(prefix, b"", options).await;
        let lock = lock.map_err(|e| format!("zookeeper lock: {e}"))?;
        held();
        if !self.awaited {
            // The recipe's release: dropping the lock sends its delete in the
            // background (not awaited; the session's next request queues behind it).
            drop(lock);
            return Ok(());
        }
        // The recipe has no awaited release: delete its node, then forget the
        // guard so that its drop does not send the delete again (forgetting
        // leaks the path's string, about 100 bytes a turn, for a benchmark's
        // few seconds).
        let deleted = self.client.delete(lock.lock_path(), None).await;
        std::mem::forget(lock);
        deleted.map_err(|e| format!("zookeeper delete: {e}"))
    }
}

#[async_trait]
impl Peer for LeaseTable {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        self.take(name, TTL).await?;
        held();
        self.free(name).await
    }
}

#[async_trait]
impl Peer for Advisory {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        self.lock(name).await?;
        held();
        self.unlock(name).await
    }
}

#[async_trait]
impl Peer for XactLock {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        XactLock::turn(self, name, held).await
    }
}

#[async_trait]
impl Peer for DistlockTx {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        DistlockTx::turn(self, name, held).await
    }
}

#[async_trait]
impl Peer for KvLock {
    async fn turn(&mut self, name: &str, held: &mut (dyn FnMut() + Send)) -> Result<(), String> {
        KvLock::turn(self, name, held).await
    }
}
