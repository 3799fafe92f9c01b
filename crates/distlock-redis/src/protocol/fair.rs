//! The fair (FIFO) lock's two scripts: acquire in queue order, and leave (a
//! release, or a waiter giving up its place), which tells the next waiter.

use super::{Attempt, ServerClient, flag, share_script, ttl_ms};
use crate::command::CommandConn;
use crate::error::CommandError;
use crate::keys::LockKeys;
use redis::{Script, ScriptInvocation};
use std::sync::LazyLock;
use std::time::Duration;

static FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(share_script!("fair_acquire.lua")));
static FAIR_LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/fair_leave.lua")));

/// The queue of a fair lock beside its lock key: `<lock key>:queue` (a list of
/// owner values in arrival order) and `<lock key>:queue:timeouts` (owner →
/// expiry in server ms of its place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FairQueue {
    pub list: String,
    pub timeouts: String,
}

impl FairQueue {
    pub fn of(keys: &LockKeys) -> Self {
        FairQueue {
            list: format!("{}:queue", keys.lock),
            timeouts: format!("{}:queue:timeouts", keys.lock),
        }
    }
}

fn leave_invocation(
    keys: &LockKeys,
    queue: &FairQueue,
    owner: &str,
    conn: &CommandConn,
) -> ScriptInvocation<'static> {
    let mut invocation = FAIR_LEAVE.key(&keys.lock);
    invocation.key(&queue.list).key(&queue.timeouts);
    invocation
        .arg(owner)
        .arg(&keys.channel)
        .arg(conn.publish_command());
    invocation
}

/// The channel on which the waiter `owner` hears that it is its turn.
pub(crate) fn turn_channel(keys: &LockKeys, owner: &str) -> String {
    format!("{}:{owner}", keys.channel)
}

impl ServerClient {
    /// Runs the fair acquire script: the lock and a fresh token when the caller
    /// is first in line and the lock is free; otherwise its place is kept for
    /// `place` (none for a try) and the reply says how long to sleep at most.
    pub async fn fair_acquire(
        &self,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
        place: Duration,
        budget: Duration,
    ) -> Result<Attempt, CommandError> {
        let queue = FairQueue::of(keys);
        // Cut off or unanswered, the attempt is followed on its connection by
        // the leave script: nothing it took (the lock, a place) stays behind.
        let (reply, run_id): (Vec<i64>, _) = self
            .invoke_or_undo(
                budget,
                |link| {
                    let mut invocation = FAIR_ACQUIRE.key(&keys.lock);
                    invocation
                        .key(&keys.fence)
                        .key(&queue.list)
                        .key(&queue.timeouts)
                        .key(self.state.high_water(&keys.lock));
                    invocation
                        .arg(owner)
                        .arg(ttl_ms(ttl))
                        .arg(ttl_ms(place))
                        .arg(&keys.channel)
                        .arg(link.conn.publish_command())
                        .arg(self.state.keep_ms(ttl));
                    invocation
                },
                |conn| vec![leave_invocation(keys, &queue, owner, conn)],
            )
            .await?;
        match reply[..] {
            [1, token] if token > 0 => Ok(Attempt::Won(token.unsigned_abs(), run_id)),
            [0, wait] => Ok(Attempt::Held(wait)),
            _ => Err(CommandError::Reply(format!(
                "fair acquire script returned {reply:?}"
            ))),
        }
    }

    /// Releases the fair lock if `owner` holds it, takes `owner` out of the
    /// queue, and wakes the waiter whose turn it now is. Returns whether
    /// `owner` held the lock.
    pub async fn fair_leave(
        &self,
        keys: &LockKeys,
        owner: &str,
        budget: Duration,
    ) -> Result<bool, CommandError> {
        let queue = FairQueue::of(keys);
        let reply = self
            .invoke_on(budget, |conn| leave_invocation(keys, &queue, owner, conn))
            .await;
        flag(reply, "fair leave")
    }
}
