//! A connection to one server that is made again whenever it may be broken.
//!
//! Like the `redis` crate's `ConnectionManager` it reconnects after the server
//! restarts, but it also drops the connection after a timeout: the crate keeps a
//! timed-out request's slot in its pipeline, so if that reply never arrives (the
//! request was lost) every later reply would be matched to the wrong request.
//! Timeouts are per call, so `WAIT` can be given longer than a script.

use crate::error::NodeError;
use redis::aio::MultiplexedConnection;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// One server's command connection.
pub(crate) struct Link {
    client: redis::Client,
    connect_timeout: Duration,
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Serialises connection attempts, so a burst of calls makes one connection.
    connecting: tokio::sync::Mutex<u64>,
}

impl Link {
    pub fn new(client: redis::Client, connect_timeout: Duration) -> Self {
        Link {
            client,
            connect_timeout,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(0),
        }
    }

    fn cached(&self) -> Option<(u64, MultiplexedConnection)> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The current connection, or a new one; the flag says it is new.
    async fn connection(&self) -> Result<(u64, MultiplexedConnection, bool), NodeError> {
        if let Some((generation, conn)) = self.cached() {
            return Ok((generation, conn, false));
        }
        let mut generation = self.connecting.lock().await;
        if let Some((generation, conn)) = self.cached() {
            return Ok((generation, conn, false));
        }
        // Our own timeouts apply per call; the crate's would leave poisoned slots.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let connect = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let conn = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| NodeError::Timeout(self.connect_timeout))??;
        *generation += 1;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((*generation, conn.clone()));
        Ok((*generation, conn, true))
    }

    /// Forgets the connection of `generation` (if it is still the current one), so
    /// that the next call connects afresh.
    fn discard(&self, generation: u64) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|(g, _)| *g == generation) {
            *current = None;
        }
    }

    /// Runs `request` on the connection, connecting first if needed, and gives up
    /// after `budget` (connecting has its own timeout on top).
    ///
    /// A connection that died while idle (server restart, the server's idle
    /// `timeout`, a proxy) fails its next request at once; that request is tried
    /// once more on a new connection. Every request of the protocol is safe to
    /// repeat even if the first one did reach the server: the acquire script
    /// recognises its own owner value, renew and the fence raise are idempotent,
    /// and a repeated release can only report the lock as not held.
    pub async fn call<T, F, Fut>(&self, budget: Duration, request: F) -> Result<T, NodeError>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, NodeError>>,
    {
        let (generation, conn, fresh) = self.connection().await?;
        match self.run(budget, generation, conn, &request).await {
            Err(NodeError::Redis(e)) if !fresh && e.is_connection_dropped() => {
                let (generation, conn, _) = self.connection().await?;
                self.run(budget, generation, conn, &request).await
            }
            outcome => outcome,
        }
    }

    async fn run<T, F, Fut>(
        &self,
        budget: Duration,
        generation: u64,
        conn: MultiplexedConnection,
        request: &F,
    ) -> Result<T, NodeError>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, NodeError>>,
    {
        // A caller that gives up mid-request leaves the same dangling slot.
        let mut unfinished = Unfinished {
            link: self,
            generation: Some(generation),
        };
        let outcome = match tokio::time::timeout(budget, request(conn)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(NodeError::Timeout(budget)),
        };
        if !outcome.as_ref().is_err_and(NodeError::poisons_connection) {
            unfinished.generation = None;
        }
        outcome
    }
}

/// Discards the connection unless the request finished cleanly.
struct Unfinished<'a> {
    link: &'a Link,
    generation: Option<u64>,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(generation) = self.generation {
            self.link.discard(generation);
        }
    }
}
