//! A script that takes something (a permit, a share, a place in a queue) with
//! its undo queued on the same connection if its reply never comes, as the
//! lock's acquire does: behind the script on its own connection, the undo
//! cannot overtake it, as it could on a fresh one.

use super::{ServerClient, UNDO_GRACE};
use crate::command::CommandConn;
use crate::connection::{Link, RunId};
use crate::error::CommandError;
use distlock_core::toolkit::{CancelGuard, UndoFuture};
use redis::ScriptInvocation;
use std::time::Duration;

impl ServerClient {
    /// Runs `script` within `budget`; if it is cut off or unanswered, the
    /// `undo` scripts are sent after it on the same connection. Both are built
    /// for that connection (a script that publishes takes
    /// [`CommandConn::publish_command`]; one the restart guard checks takes the
    /// link's `run_id`). Returns the reply and the `run_id` of the server that
    /// gave it.
    pub(crate) async fn invoke_or_undo<T>(
        &self,
        budget: Duration,
        script: impl Fn(&Link) -> ScriptInvocation<'static>,
        undo: impl Fn(&CommandConn) -> Vec<ScriptInvocation<'static>>,
    ) -> Result<(T, RunId), CommandError>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        // The inner timeout fires first, so that the undo goes out on this
        // connection before the connection-level timeout drops it.
        self.connection
            .call_linked(budget + UNDO_GRACE, |link| {
                let invocation = script(&link);
                let mut conn = link.conn;
                let mut behind = conn.clone();
                let guard = CancelGuard::new(undo(&conn), move |undo| {
                    Some(Box::pin(async move {
                        for invocation in undo {
                            let undone: redis::RedisResult<redis::Value> =
                                invocation.invoke_async(&mut behind).await;
                            if let Err(e) = undone {
                                tracing::debug!(error = %e, "undoing an unanswered script failed; its ttl frees what it took");
                            }
                        }
                    }) as UndoFuture)
                });
                async move {
                    let reply =
                        tokio::time::timeout(budget, invocation.invoke_async(&mut conn)).await;
                    // Answered: the caller owns the outcome from here.
                    let reply = reply.map_err(|_| CommandError::Timeout(budget))?;
                    guard.disarm();
                    Ok(reply?)
                }
            })
            .await
    }
}
