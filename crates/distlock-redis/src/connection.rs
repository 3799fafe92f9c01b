//! Reaching one Redis server: its address and credentials, and a command
//! connection that is made again whenever it may be broken.
//!
//! Like the `redis` crate's `ConnectionManager` the connection reconnects after
//! the server restarts, but it also drops the connection after a timeout: the
//! crate keeps a timed-out request's slot in its pipeline, so if that reply never
//! arrives (the request was lost) every later reply would be matched to the
//! wrong request. Timeouts are per call, so `WAIT` can be given longer than a
//! script.
//!
//! Each new connection reads the server's `run_id` (`INFO server`): a
//! connection never outlives the process it reached, so a lease acquired on it
//! was granted by that process, and a later connection with another `run_id`
//! means a restarted server or a failover, which the leases must hear about.

use crate::command::CommandConn;
use crate::error::CommandError;
use crate::sentinel::{Target, is_primary};
use distlock_core::toolkit::CancelGuard;
use redis::aio::MultiplexedConnection;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// The server process a connection reached, as `INFO server` names it; `None`
/// when the server does not say (an ACL without `INFO`).
pub(crate) type RunId = Option<Arc<str>>;

/// One live connection and the server process it reached.
#[derive(Clone)]
pub(crate) struct Link {
    pub conn: CommandConn,
    pub run_id: RunId,
    generation: u64,
}

/// One server's command connection.
pub(crate) struct Connection {
    target: Target,
    connect_timeout: Duration,
    current: Mutex<Option<Link>>,
    /// Serialises connection attempts, so a burst of calls makes one connection.
    connecting: tokio::sync::Mutex<u64>,
    /// The `run_id` of the newest connection; notifies when the server changed.
    run_ids: watch::Sender<RunId>,
}

impl Connection {
    pub fn new(target: Target, connect_timeout: Duration) -> Self {
        Connection {
            target,
            connect_timeout,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(0),
            run_ids: watch::Sender::new(None),
        }
    }

    /// Follows the `run_id` of the newest connection.
    pub fn run_ids(&self) -> watch::Receiver<RunId> {
        self.run_ids.subscribe()
    }

    fn cached(&self) -> Option<Link> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The current connection, or a new one; the flag says it is new.
    async fn connection(&self) -> Result<(Link, bool), CommandError> {
        if let Some(link) = self.cached() {
            return Ok((link, false));
        }
        let mut generation = self.connecting.lock().await;
        if let Some(link) = self.cached() {
            return Ok((link, false));
        }
        // Our own timeouts apply per call; the crate's would leave poisoned slots.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let connect = async {
            if let Target::Cluster(cluster) = &self.target {
                // No run_id: the connection reaches every primary.
                let conn = cluster.connect(self.connect_timeout).await?;
                return Ok((CommandConn::Cluster(conn), None));
            }
            let client = self.target.client(self.connect_timeout).await?;
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            // Sentinel may still name a primary that was just demoted.
            if self.target.checks_role() && !is_primary(&mut conn).await? {
                return Err(CommandError::Sentinel(
                    "the node Sentinel named is not a primary (a failover is under way)".into(),
                ));
            }
            let run_id = read_run_id(&mut conn).await?;
            Ok::<_, CommandError>((CommandConn::Single(conn), run_id))
        };
        let (conn, run_id) = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| CommandError::Timeout(self.connect_timeout))??;
        *generation += 1;
        let link = Link {
            conn,
            run_id,
            generation: *generation,
        };
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(link.clone());
        // Watchers hear of a server that differs from the previous connection's;
        // the first connection has nothing to differ from.
        let first = *generation == 1;
        self.run_ids.send_if_modified(|seen| {
            let changed = !first && *seen != link.run_id;
            seen.clone_from(&link.run_id);
            changed
        });
        Ok((link, true))
    }

    /// Forgets the connection of `generation` (if it is still the current one), so
    /// that the next call connects afresh.
    fn discard(&self, generation: u64) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current
            .as_ref()
            .is_some_and(|link| link.generation == generation)
        {
            *current = None;
        }
    }

    /// Runs `request` on the connection, as [`Connection::call_linked`] does.
    pub async fn call<T, F, Fut>(&self, budget: Duration, request: F) -> Result<T, CommandError>
    where
        F: Fn(CommandConn) -> Fut,
        Fut: Future<Output = Result<T, CommandError>>,
    {
        let (value, _) = self.call_linked(budget, |link| request(link.conn)).await?;
        Ok(value)
    }

    /// Runs `request` on the connection, connecting first if needed, and gives up
    /// after `budget` (connecting has its own timeout on top). Returns the answer
    /// with the `run_id` of the server that gave it.
    ///
    /// A connection that died while idle (server restart, the server's idle
    /// `timeout`, a proxy) fails its next request at once; that request is tried
    /// once more on a new connection. Every request of the protocol is safe to
    /// repeat even if the first one did reach the server: the acquire script
    /// recognises its own owner value, renew and the fence raise are idempotent,
    /// and a repeated release can only report the lock as not held.
    pub async fn call_linked<T, F, Fut>(
        &self,
        budget: Duration,
        request: F,
    ) -> Result<(T, RunId), CommandError>
    where
        F: Fn(Link) -> Fut,
        Fut: Future<Output = Result<T, CommandError>>,
    {
        let (link, fresh) = self.connection().await?;
        let run_id = link.run_id.clone();
        match self.run(budget, link, &request).await {
            Err(CommandError::Redis(e)) if !fresh && e.is_connection_dropped() => {
                // Boxed: the rare retry's state would otherwise double every
                // call's future.
                let retry = Box::pin(async {
                    let (link, _) = self.connection().await?;
                    let run_id = link.run_id.clone();
                    Ok((self.run(budget, link, &request).await?, run_id))
                });
                retry.await
            }
            outcome => Ok((outcome?, run_id)),
        }
    }

    async fn run<T, F, Fut>(
        &self,
        budget: Duration,
        link: Link,
        request: &F,
    ) -> Result<T, CommandError>
    where
        F: Fn(Link) -> Fut,
        Fut: Future<Output = Result<T, CommandError>>,
    {
        // A caller that gives up mid-request leaves the same dangling slot as a
        // timeout: the connection is discarded unless the request finished cleanly.
        let unfinished = CancelGuard::new(link.generation, |generation| {
            self.discard(generation);
            None
        });
        let outcome = match tokio::time::timeout(budget, request(link)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(CommandError::Timeout(budget)),
        };
        if !outcome
            .as_ref()
            .is_err_and(CommandError::poisons_connection)
        {
            unfinished.disarm();
        }
        outcome
    }
}

/// The `run_id` in `INFO server`. A server that refuses `INFO` (an ACL) is not an
/// error: with no `run_id` to compare, every lease is checked after a reconnect.
async fn read_run_id(conn: &mut MultiplexedConnection) -> Result<RunId, CommandError> {
    let info: redis::RedisResult<String> = redis::cmd("INFO").arg("server").query_async(conn).await;
    match info {
        Ok(info) => Ok(info_field(&info, "run_id").map(Arc::from)),
        Err(e) if e.is_io_error() || e.is_unrecoverable_error() => Err(e.into()),
        Err(e) => {
            tracing::debug!(error = %e, "INFO server refused: after a reconnect every lease is checked");
            Ok(None)
        }
    }
}

/// `name:value` from an `INFO` reply.
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::info_field;

    #[test]
    fn info_fields_are_read_by_name() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n";
        assert_eq!(info_field(info, "role"), Some("master"));
        assert_eq!(info_field(info, "connected_slaves"), Some("2"));
        assert_eq!(info_field(info, "connected"), None);
    }
}
