//! The acquire script on one server, and `WAIT` for replicas on the
//! connection that made the write.

use super::{
    ACQUIRE, Attempt, Eval, Invocation, ServerClient, UNDO_GRACE, ttl_ms, undo_on_connection,
};
use crate::command::CommandConn;
use crate::connection::RunId;
use crate::error::CommandError;
use crate::keys::LockKeys;
use crate::replicas::ReplicaAck;
use crate::restart::RestartGuard;
use std::time::Duration;

impl ServerClient {
    /// Runs the acquire script: `SET NX PX` and a fresh token, or the holder's
    /// PTTL, or (with a guard) how long the guard still refuses.
    pub async fn acquire(
        &self,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
        guard: Option<&RestartGuard>,
        budget: Duration,
    ) -> Result<Attempt, CommandError> {
        let (attempt, _) = self
            .acquire_acked(keys, owner, (ttl, guard), budget, None)
            .await?;
        Ok(attempt)
    }

    /// [`ServerClient::acquire`], then, when won and `ack` is set, `WAIT` on the
    /// same connection (`WAIT` counts the writes of its own connection: on
    /// another one it would answer at once). Returns how many replicas
    /// acknowledged, or why `WAIT` failed: the caller must then undo the lock.
    pub async fn acquire_acked(
        &self,
        keys: &LockKeys,
        owner: &str,
        (ttl, guard): (Duration, Option<&RestartGuard>),
        budget: Duration,
        ack: Option<ReplicaAck>,
    ) -> Result<(Attempt, Option<Result<u32, CommandError>>), CommandError> {
        let wait_budget = ack.map_or(Duration::ZERO, |ack| ack.timeout + budget);
        // The inner timeout fires first, so that an unanswered acquire is undone
        // on its own connection: queued behind the acquire, the release cannot
        // overtake it, as it could on a fresh connection.
        let ((reply, acked), run_id): ((Vec<i64>, _), RunId) = self
            .connection
            .call_linked(budget + UNDO_GRACE + wait_budget, |link| {
                let mut conn = link.conn;
                let high_water = self.state.high_water(&keys.lock);
                let mut invocation = match guard {
                    Some(guard) => Eval::new(
                        &ACQUIRE,
                        &[&keys.lock, &keys.fence, &high_water, &guard.marker],
                    ),
                    None => Eval::new(&ACQUIRE, &[&keys.lock, &keys.fence, &high_water]),
                };
                invocation
                    .arg(owner)
                    .arg(ttl_ms(ttl))
                    .arg(self.state.keep_ms(ttl));
                if let Some((ms, run_id)) = RestartGuard::args(guard, &link.run_id) {
                    invocation.arg(ms).arg(run_id);
                }
                let undo = undo_on_connection(conn.clone(), keys, owner);
                async move {
                    let reply = tokio::time::timeout(budget, invocation.call(&mut conn)).await;
                    // Answered: the caller owns the outcome from here.
                    let reply = reply.map_err(|_| CommandError::Timeout(budget))?;
                    undo.disarm();
                    let reply: Vec<i64> = reply?;
                    let acked = match (ack, reply.first()) {
                        (Some(ack), Some(1)) => {
                            match wait_on(&mut conn, ack, wait_budget).await {
                                // A lost reply poisons the connection: report it
                                // as the call's error so the connection is dropped.
                                Err(e) if e.outcome_unknown() => return Err(e),
                                acked => Some(acked),
                            }
                        }
                        _ => None,
                    };
                    Ok((reply, acked))
                }
            })
            .await?;
        let attempt = match reply[..] {
            [1, token] if token > 0 => Attempt::Won(token.unsigned_abs(), run_id),
            [0, pttl] => Attempt::Held(pttl),
            [2, left] if left > 0 => {
                tracing::debug!(endpoint = %self.endpoint, left_ms = left, "the restart guard refused an acquire");
                Attempt::Held(left)
            }
            _ => {
                return Err(CommandError::Reply(format!(
                    "acquire script returned {reply:?}"
                )));
            }
        };
        Ok((attempt, acked))
    }
}

/// `WAIT` for `ack` on `conn`, within `budget`.
pub(crate) async fn wait_on(
    conn: &mut CommandConn,
    ack: ReplicaAck,
    budget: Duration,
) -> Result<u32, CommandError> {
    let mut wait = redis::cmd("WAIT");
    wait.arg(ack.replicas).arg(ttl_ms(ack.timeout));
    let acked: i64 = tokio::time::timeout(budget, wait.query_async(conn))
        .await
        .map_err(|_| CommandError::Timeout(budget))??;
    u32::try_from(acked).map_err(|_| CommandError::Reply(format!("WAIT returned {acked}")))
}
