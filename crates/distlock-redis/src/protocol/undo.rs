//! Undoing acquires whose outcome nobody will use: a request cancelled in
//! flight, or whose reply was lost, may still have taken the lock. Every undo is
//! the compare-owner release, so it can only ever delete that attempt's own key.

use super::{Eval, Invocation, RELEASE, ServerClient};
use crate::command::CommandConn;
use crate::keys::LockKeys;
use distlock_core::toolkit::{CancelGuard, UndoFuture};
use std::sync::Arc;
use std::time::Duration;

/// How much longer than its own timeout an acquire may take before the
/// connection-level timeout gives up on it.
pub(super) const UNDO_GRACE: Duration = Duration::from_millis(50);

pub(super) fn release_invocation(keys: &LockKeys, owner: &str, conn: &CommandConn) -> Eval {
    let mut invocation = Eval::new(&RELEASE, &[&keys.lock]);
    invocation
        .arg(owner)
        .arg(&keys.channel)
        .arg(conn.publish_command());
    invocation
}

/// The connection an unanswered acquire went out on, its keys and owner value.
type Unanswered<'a> = (CommandConn, &'a LockKeys, &'a str);

/// Undoes an acquire request that was cancelled or timed out before its reply,
/// by queueing the compare-owner release on the same connection, behind it.
/// The release is built only if it is needed.
pub(super) fn undo_on_connection<'a>(
    conn: CommandConn,
    keys: &'a LockKeys,
    owner: &'a str,
) -> CancelGuard<Unanswered<'a>, impl FnOnce(Unanswered<'a>) -> Option<UndoFuture>> {
    CancelGuard::new((conn, keys, owner), |(mut conn, keys, owner)| {
        let invocation = release_invocation(keys, owner, &conn);
        Some(Box::pin(async move {
            let undone: redis::RedisResult<i64> = invocation.call(&mut conn).await;
            if let Err(e) = undone {
                tracing::debug!(error = %e, "undoing an unanswered acquire failed; the ttl frees the key");
            }
        }) as UndoFuture)
    })
}

/// The servers an abandoned attempt may hold, its keys and its owner value,
/// borrowed: they are copied only if the undo runs.
type Abandoned<'a> = (&'a [Arc<ServerClient>], &'a LockKeys, &'a str);

/// Releases an acquisition whose outcome the caller will never use: a request
/// whose reply was lost, or that was cancelled mid-flight, may still have taken
/// the lock on the servers. The release compares the owner value, so it can only
/// ever delete this attempt's own key.
pub(crate) fn release_on_drop<'a>(
    servers: &'a [Arc<ServerClient>],
    keys: &'a LockKeys,
    owner: &'a str,
    budget: Duration,
) -> CancelGuard<Abandoned<'a>, impl FnOnce(Abandoned<'a>) -> Option<UndoFuture>> {
    CancelGuard::new((servers, keys, owner), move |(servers, keys, owner)| {
        let (servers, keys, owner) = (servers.to_vec(), keys.clone(), owner.to_owned());
        Some(Box::pin(async move {
            let mut releases = tokio::task::JoinSet::new();
            for server in servers {
                let (keys, owner) = (keys.clone(), owner.clone());
                releases.spawn(async move {
                    if let Err(e) = server.release(&keys, &owner, budget).await {
                        tracing::debug!(endpoint = %server.endpoint, error = %e, "undoing an abandoned acquire failed; the ttl frees the key");
                    }
                });
            }
            while releases.join_next().await.is_some() {}
        }) as UndoFuture)
    })
}
