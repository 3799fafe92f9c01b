//! The wire protocol on one Redis server, shared by `RedisLock` (one server) and
//! `Redlock` (N of them): the Lua scripts in `scripts/`, `WAIT`, and the
//! operator's view of a lock.
//!
//! Every script takes its keys through `KEYS` (so Redis Cluster can route it) and
//! is sent with `EVALSHA`; the `redis` crate's [`Script`] reloads it on `NOSCRIPT`
//! (after a server restart or `SCRIPT FLUSH`).

use crate::address::ServerAddress;
use crate::command::CommandConn;
use crate::connection::{Connection, RunId};
use crate::error::CommandError;
use crate::keys::LockKeys;
use crate::restart::{self, LossSender, Place, Restarts, Watch};
use crate::sentinel::Target;
use crate::state::State;
use crate::subscriber::{Hold, Subscriber};
use distlock_core::LockError;
use distlock_core::adapter::LossSignal;
use distlock_core::toolkit::Timeouts;
use redis::Script;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::sync::mpsc;
use undo::{UNDO_GRACE, release_invocation, undo_on_connection};

mod acquire;
mod eval;
pub(crate) mod fair;
mod recorded;
mod share_lib;
mod undo;
mod undone;
pub(crate) use acquire::wait_on;
use eval::{Eval, Invocation};
pub(crate) use share_lib::{share_script, token_script};
pub(crate) use undo::release_on_drop;

/// `SET NX PX` + `INCR` of the fence counter, or the holder's `PTTL`; with a
/// restart guard, first the guard's marker (`restart_guard.lua`, shared with
/// the semaphore's and the read-write lock's acquire).
const ACQUIRE_LUA: &str = token_script!("restart_guard.lua", "acquire.lua");
/// Compare-owner `PEXPIRE`, keeping the fence counter.
const RENEW_LUA: &str = token_script!("renew.lua");
/// Compare-owner `DEL` + `PUBLISH`.
const RELEASE_LUA: &str = include_str!("scripts/release.lua");
/// Raises a fence counter and the high-water to at least a token (Redlock's
/// fence round).
const RAISE_FENCE_LUA: &str = token_script!("raise_fence.lua");
/// An operator's `DEL` + `PUBLISH`, whoever holds the lock.
const DELETE_HOLDER_LUA: &str = include_str!("scripts/delete_holder.lua");

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(RAISE_FENCE_LUA));
static DELETE_HOLDER: LazyLock<Script> = LazyLock::new(|| Script::new(DELETE_HOLDER_LUA));

/// The scripts every acquisition needs, with their sources, loaded when a
/// client connects.
fn lock_scripts() -> [(&'static str, &'static Script); 4] {
    [
        (ACQUIRE_LUA, &ACQUIRE),
        (RENEW_LUA, &RENEW),
        (RELEASE_LUA, &RELEASE),
        (RAISE_FENCE_LUA, &RAISE_FENCE),
    ]
}

/// The acquire script's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Won, with this server's fencing token, on the server with this `run_id`.
    Won(u64, RunId),
    /// Held elsewhere, or refused by the restart guard: how long in ms until it
    /// may be free (-1: the holder's key has no expiry).
    Held(i64),
}

/// One Redis server as the lock protocol sees it: its command connection, the
/// shared subscriber that wakes this client's waiters, and the restart check of
/// the leases held on it.
pub(crate) struct ServerClient {
    /// The server's address without credentials, for errors and logs.
    pub endpoint: Arc<str>,
    connection: Arc<Connection>,
    /// Release notifications for this client's waiters.
    pub subscriber: Subscriber,
    /// A Redis Cluster (`redis+cluster://`), whose nodes are asked one by one
    /// where a question is about every key or every server.
    pub cluster: bool,
    /// How long a name's counter outlives its leases, and its high-water key.
    pub state: State,
    restarts: Restarts,
}

/// A lease watched for a server that lost it; dropping it stops watching.
pub(crate) struct LeaseWatch {
    _watch: Watch,
    _hold: Hold,
}

impl std::fmt::Debug for ServerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerClient")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// `lost()` of a lease at `place` granted by `granted` (each server with the
/// `run_id` that granted it): it fires as soon as fewer than `needed` of them
/// still hold it.
///
/// The lease is registered with each server's restart check at the signal's
/// first poll, not before: the lease's watchdog polls it once the lease has
/// lived 10 to 20 ms, so a lease released sooner never registers (that
/// registration and its removal were 4 % of an uncontended cycle's client
/// instructions). A server that restarted or failed over in between is
/// still found: a registration whose `run_id` is no longer the server's
/// starts a check at once (`Restarts::watch`).
pub(crate) fn loss_signal(
    granted: Vec<(Arc<ServerClient>, RunId)>,
    place: Place,
    owner: String,
    needed: usize,
) -> LossSignal {
    Box::pin(async move {
        let (report, lost) = mpsc::unbounded_channel();
        let watches: Vec<LeaseWatch> = granted
            .iter()
            .enumerate()
            .map(|(tag, (server, run_id))| {
                server.watch_lease(&place, &owner, run_id.clone(), (report.clone(), tag))
            })
            .collect();
        drop(report);
        restart::wait_for_loss(watches, lost, needed).await
    })
}

/// A compare-owner script's 1/0 answer.
pub(crate) fn flag(reply: Result<i64, CommandError>, what: &str) -> Result<bool, CommandError> {
    match reply? {
        1 => Ok(true),
        0 => Ok(false),
        other => Err(CommandError::Reply(format!(
            "{what} script returned {other}"
        ))),
    }
}

pub(crate) fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

impl ServerClient {
    /// A client of `address`; connects on first use.
    pub fn new(
        address: &ServerAddress,
        backend: &'static str,
        timeouts: Timeouts,
        state_ttl: Duration,
    ) -> Result<Self, LockError> {
        let endpoint: Arc<str> = address.endpoint().into();
        let subscriber = Subscriber::start(
            Target::of(address, backend, true)?,
            endpoint.clone(),
            timeouts,
        );
        let connection = Arc::new(Connection::new(
            Target::of(address, backend, false)?,
            timeouts.connect,
        ));
        let restarts = Restarts::start(
            connection.clone(),
            subscriber.connects(),
            endpoint.clone(),
            timeouts.reply,
        );
        Ok(ServerClient {
            cluster: address.cluster.is_some(),
            state: State::new(state_ttl, address.cluster.is_some()),
            endpoint,
            connection,
            subscriber,
            restarts,
        })
    }

    /// Watches a lease acquired on the server with `run_id`: if the server loses
    /// it (a restart, a failover), `report` is told at once.
    fn watch_lease(
        &self,
        place: &Place,
        owner: &str,
        run_id: RunId,
        report: LossSender,
    ) -> LeaseWatch {
        LeaseWatch {
            _watch: self.restarts.watch(place, owner, run_id, report),
            // The subscriber connection sees a dead server first.
            _hold: self.subscriber.hold(),
        }
    }

    /// Connects, authenticates and loads the lock scripts in one round trip, so
    /// that a wrong password or a server without scripting is reported at connect
    /// time.
    pub async fn load_scripts(&self, budget: Duration) -> Result<(), CommandError> {
        let mut pipe = redis::pipe();
        for (source, _) in lock_scripts() {
            pipe.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        self.connection
            .call(budget, |mut conn| {
                let pipe = pipe.clone();
                async move {
                    let hashes: Vec<String> = pipe.query_async(&mut conn).await?;
                    let expected: Vec<&str> =
                        lock_scripts().iter().map(|(_, s)| s.get_hash()).collect();
                    if hashes != expected {
                        return Err(CommandError::Reply(format!(
                            "SCRIPT LOAD gave {hashes:?}, expected {expected:?}"
                        )));
                    }
                    Ok(())
                }
            })
            .await
    }

    /// Extends the lock if `owner` still holds it.
    pub async fn renew(
        &self,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
        budget: Duration,
    ) -> Result<bool, CommandError> {
        let reply = self
            .invoke(budget, || {
                let mut invocation = Eval::new(&RENEW, &[&keys.lock, &keys.fence]);
                invocation.arg(owner).arg(ttl_ms(ttl));
                invocation.arg(self.state.keep_ms(ttl));
                invocation
            })
            .await;
        flag(reply, "renew")
    }

    /// Deletes the lock and publishes on its channel if `owner` still holds it.
    pub async fn release(
        &self,
        keys: &LockKeys,
        owner: &str,
        budget: Duration,
    ) -> Result<bool, CommandError> {
        let reply = self
            .invoke_on(budget, |conn| release_invocation(keys, owner, conn))
            .await;
        flag(reply, "release")
    }

    /// Raises the fence counter and the high-water to at least `token`, and
    /// keeps the counter as long as a lease of `ttl`.
    pub async fn raise_fence(
        &self,
        keys: &LockKeys,
        (token, ttl): (u64, Duration),
        budget: Duration,
    ) -> Result<(), CommandError> {
        let reply = self
            .invoke(budget, || {
                let mut invocation = RAISE_FENCE.key(&keys.fence);
                invocation.key(self.state.high_water(&keys.lock));
                invocation.arg(token).arg(self.state.keep_ms(ttl));
                invocation
            })
            .await;
        match flag(reply, "raise_fence")? {
            true => Ok(()),
            false => Err(CommandError::Reply("raise_fence script returned 0".into())),
        }
    }

    /// Deletes the lock whoever holds it and wakes its waiters, as an operator's
    /// force-unlock. Returns whether there was a lock key.
    pub async fn delete_holder(
        &self,
        keys: &LockKeys,
        budget: Duration,
    ) -> Result<bool, CommandError> {
        let reply = self
            .invoke_on(budget, |conn| {
                let mut invocation = DELETE_HOLDER.key(&keys.lock);
                invocation.arg(&keys.channel).arg(conn.publish_command());
                invocation
            })
            .await;
        flag(reply, "delete_holder")
    }

    /// `WAIT replicas timeout`: how many replicas acknowledged this connection's
    /// writes so far. The server blocks up to `timeout`, so the budget covers it.
    pub async fn wait_replicas(
        &self,
        replicas: u32,
        timeout: Duration,
        budget: Duration,
    ) -> Result<u32, CommandError> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(ttl_ms(timeout));
        let acked: i64 = self.query(timeout + budget, wait.into()).await?;
        u32::try_from(acked).map_err(|_| CommandError::Reply(format!("WAIT returned {acked}")))
    }

    /// Sends one command (or an atomic pipeline) and reads its reply.
    pub async fn query<T>(&self, budget: Duration, command: Command) -> Result<T, CommandError>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        self.connection
            .call(budget, |mut conn| {
                let command = command.clone();
                async move {
                    Ok(match command {
                        Command::One(cmd) => cmd.query_async(&mut conn).await?,
                        Command::Pipeline(pipe) => pipe.query_async(&mut conn).await?,
                        Command::OnNode(cmd, node) => {
                            let value = crate::cluster::on_node(&mut conn, cmd, &node).await?;
                            T::from_redis_value(value)
                                .map_err(|e| CommandError::Reply(e.to_string()))?
                        }
                    })
                }
            })
            .await
    }

    /// Sends a script invocation (`EVALSHA`, loading the script on `NOSCRIPT`).
    pub(crate) async fn invoke<T, I: Invocation>(
        &self,
        budget: Duration,
        build: impl Fn() -> I,
    ) -> Result<T, CommandError>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        self.invoke_on(budget, |_| build()).await
    }

    /// [`ServerClient::invoke`] with an invocation built for the connection it
    /// goes out on (a script that publishes takes
    /// [`CommandConn::publish_command`]).
    pub(crate) async fn invoke_on<T, I: Invocation>(
        &self,
        budget: Duration,
        build: impl Fn(&CommandConn) -> I,
    ) -> Result<T, CommandError>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        self.connection
            .call(budget, |mut conn| {
                let invocation = build(&conn);
                async move { Ok(invocation.call(&mut conn).await?) }
            })
            .await
    }
}

/// A command or a pipeline, for [`ServerClient::query`].
#[derive(Clone)]
pub(crate) enum Command {
    One(redis::Cmd),
    Pipeline(redis::Pipeline),
    /// A command for one node of a Redis Cluster (a `SCAN`, an `INFO`).
    OnNode(redis::Cmd, crate::cluster::Node),
}

impl From<redis::Cmd> for Command {
    fn from(cmd: redis::Cmd) -> Self {
        Command::One(cmd)
    }
}
