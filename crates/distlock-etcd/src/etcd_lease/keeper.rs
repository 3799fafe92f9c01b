//! The task that keeps one lease alive on its keep-alive stream, and notices when
//! it ends: the server says it is gone, no answer came for a whole ttl, or nobody
//! needs it any more.

use super::{LeaseEnd, LeaseState, Refresh, lock};
use crate::client::{LeaseClient, LeaseKeepAliveStream, LeaseKeeper};
use crate::error::Failure;
use crate::rpc::Rpc;
use distlock_core::toolkit::Backoff;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::time::sleep_until;

/// How long an unused, untainted lease is kept alive for the next acquire.
const IDLE_KEEP: Duration = Duration::from_secs(60);
/// First delay before reopening a broken keep-alive stream.
const RECONNECT_DELAY: Duration = Duration::from_millis(50);

/// The task that keeps one lease alive. It exits when the lease ends.
pub(super) struct Keeper {
    pub(super) state: Arc<LeaseState>,
    pub(super) client: LeaseClient,
    pub(super) rpc: Rpc,
    pub(super) link: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    /// Keep-alives sent and not yet answered, oldest first: the stream answers in order.
    pub(super) pending: VecDeque<(Instant, Option<Refresh>)>,
    pub(super) ttl_secs: i64,
}

enum Wake {
    Answer(Result<Option<crate::client::LeaseTtlResponse>, crate::client::Error>),
    Refresh(Option<Refresh>),
    Beat,
    Reconnect,
    Lapse,
    UsesChanged,
}

impl Keeper {
    pub(super) async fn run(mut self, mut refreshes: mpsc::UnboundedReceiver<Refresh>) {
        let ttl = self.state.ttl;
        let every = ttl / 3;
        let mut next_beat = Instant::now() + every;
        let mut reconnect_at = Instant::now();
        // Never slower than a keep-alive beat: the lease must hear from us in time.
        let mut reconnect = Backoff::new(RECONNECT_DELAY, every.max(RECONNECT_DELAY));
        loop {
            let lapse_at = self.state.health.borrow().acked_at + ttl;
            let connected = self.link.is_some();
            let wake = tokio::select! {
                answer = next_answer(&mut self.link), if connected => Wake::Answer(answer),
                refresh = refreshes.recv() => Wake::Refresh(refresh),
                _ = sleep_until(next_beat.into()) => Wake::Beat,
                _ = sleep_until(reconnect_at.into()), if !connected => Wake::Reconnect,
                _ = sleep_until(lapse_at.into()) => Wake::Lapse,
                _ = self.state.uses_changed.notified() => Wake::UsesChanged,
            };
            match wake {
                Wake::Answer(Ok(Some(answer))) => {
                    let Some((sent_at, reply)) = self.pending.pop_front() else {
                        continue;
                    };
                    if answer.ttl() <= 0 {
                        return self.end(LeaseEnd::Expired);
                    }
                    self.state
                        .health
                        .send_modify(|h| h.acked_at = h.acked_at.max(sent_at));
                    reconnect.reset();
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(sent_at));
                    }
                }
                Wake::Answer(_) => {
                    // The stream broke; its unanswered keep-alives will never be answered.
                    self.link = None;
                    self.pending.clear();
                    reconnect_at = Instant::now() + reconnect.next_delay();
                }
                Wake::Refresh(None) => return self.end(LeaseEnd::Retired),
                Wake::Refresh(Some(reply)) => self.beat(Some(reply)).await,
                Wake::Beat => {
                    if self.retire_if_unused().await {
                        return;
                    }
                    // Renewals of held locks send keep-alives too; skip a beat they covered.
                    if Instant::now() >= self.state.health.borrow().acked_at + every {
                        self.beat(None).await;
                    }
                    next_beat = Instant::now() + every;
                }
                Wake::Reconnect => {
                    let sent_at = Instant::now();
                    // Not past the lapse: a waiter must hear of it on time.
                    let budget = lapse_at.saturating_duration_since(sent_at);
                    let reopen = self.rpc.call(
                        "lease keep-alive stream",
                        self.client.keep_alive(self.state.id),
                    );
                    match tokio::time::timeout(budget, reopen).await {
                        Ok(Ok(link)) => {
                            // Opening the stream sent a keep-alive, and it was answered.
                            self.link = Some(link);
                            self.state
                                .health
                                .send_modify(|h| h.acked_at = h.acked_at.max(sent_at));
                        }
                        Ok(Err(Failure::LeaseNotFound)) => return self.end(LeaseEnd::Expired),
                        Ok(Err(Failure::Other(e))) => {
                            tracing::debug!(lease = self.state.id, error = %e, "reopening the keep-alive stream failed");
                            reconnect_at = Instant::now() + reconnect.next_delay();
                        }
                        Err(_) => reconnect_at = Instant::now(),
                    }
                }
                Wake::Lapse => {
                    if Instant::now() >= self.state.health.borrow().acked_at + ttl {
                        return self.end(LeaseEnd::Lapsed);
                    }
                }
                Wake::UsesChanged => {
                    if self.retire_if_unused().await {
                        return;
                    }
                }
            }
        }
    }

    /// Sends one keep-alive; `reply` hears when it is answered.
    async fn beat(&mut self, reply: Option<Refresh>) {
        let Some((keeper, _)) = self.link.as_mut() else {
            if let Some(reply) = reply {
                // Not connected: the caller fails now rather than at its timeout.
                drop(reply);
            }
            return;
        };
        let sent_at = Instant::now();
        match tokio::time::timeout(self.rpc.timeout, keeper.keep_alive()).await {
            Ok(Ok(())) => self.pending.push_back((sent_at, reply)),
            _ => {
                self.link = None;
                self.pending.clear();
            }
        }
    }

    /// Stops keeping the lease if nobody uses it and it is tainted or idle too long.
    /// A tainted lease is left to expire: it may carry an abandoned key, which must
    /// live out its ttl. An idle clean one carries no key and is revoked.
    async fn retire_if_unused(&mut self) -> bool {
        let Some(pool) = self.state.pool.upgrade() else {
            let unused = lock(&self.state.uses).count == 0;
            if unused {
                self.end(LeaseEnd::Retired);
            }
            return unused;
        };
        let mut pool = pool.lock().await;
        let revoke = {
            let mut uses = lock(&self.state.uses);
            if uses.count > 0 || !(uses.tainted || uses.idle_since.elapsed() >= IDLE_KEEP) {
                return false;
            }
            uses.retired = true;
            !uses.tainted
        };
        if pool
            .get(&self.ttl_secs)
            .is_some_and(|l| Arc::ptr_eq(&l.state, &self.state))
        {
            pool.remove(&self.ttl_secs);
        }
        drop(pool);
        if revoke {
            let _ = self
                .rpc
                .call("lease revoke", self.client.revoke(self.state.id))
                .await;
        }
        self.end(LeaseEnd::Retired);
        true
    }

    fn end(&mut self, how: LeaseEnd) {
        lock(&self.state.uses).retired = true;
        self.state
            .health
            .send_modify(|h| h.ended = Some(h.ended.unwrap_or(how)));
        for (_, reply) in self.pending.drain(..) {
            if let Some(reply) = reply {
                let _ = reply.send(Err(how));
            }
        }
        tracing::debug!(lease = self.state.id, end = ?how, "etcd lease ended");
    }
}

async fn next_answer(
    link: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
) -> Result<Option<crate::client::LeaseTtlResponse>, crate::client::Error> {
    match link {
        Some((_, stream)) => stream.message().await,
        None => std::future::pending().await,
    }
}
