//! The reads of one restart check: does the server still have each lease?
//!
//! A lock is a string key holding its owner value: one `MGET` per [`CHUNK`]
//! locks (a cluster connection splits it by slot and puts the answers back in
//! order, where a pipeline of `GET`s would be refused for crossing slots). A
//! permit or a share is its owner value as a member of its primitive's expiry
//! set: one `ZMSCORE` per set (per [`CHUNK`] members), which stays in the
//! set's slot. The reads go out together on one multiplexed connection, so the
//! check costs about one round trip however many names it covers.

use super::Place;
use crate::command::CommandConn;
use crate::error::CommandError;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Leases per command when many must be checked at once.
const CHUNK: usize = 500;

/// One command of a check and the leases it answers for, in reply order.
#[derive(Clone)]
pub(super) struct Read {
    command: redis::Cmd,
    /// (registration id, owner value).
    leases: Vec<(u64, String)>,
    of: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    /// `MGET`: the key must still hold the owner value.
    Owners,
    /// `ZMSCORE`: the owner value must still be a member.
    Members,
}

/// The commands that check `suspects` (registration id, place, owner value).
pub(super) fn plan(suspects: Vec<(u64, Place, String)>) -> Vec<Read> {
    let mut keys = Vec::new();
    let mut sets: BTreeMap<Arc<str>, Vec<(u64, String)>> = BTreeMap::new();
    for (id, place, owner) in suspects {
        match place {
            Place::Key(key) => keys.push((key, (id, owner))),
            Place::Member(set) => sets.entry(set).or_default().push((id, owner)),
        }
    }
    let mut reads = Vec::new();
    for chunk in keys.chunks(CHUNK) {
        let mut mget = redis::cmd("MGET");
        for (key, _) in chunk {
            mget.arg(&**key);
        }
        let leases = chunk.iter().map(|(_, lease)| lease.clone()).collect();
        reads.push(Read::new(mget, leases, Kind::Owners));
    }
    for (set, members) in sets {
        for chunk in members.chunks(CHUNK) {
            let mut zmscore = redis::cmd("ZMSCORE");
            zmscore.arg(&*set);
            for (_, owner) in chunk {
                zmscore.arg(owner);
            }
            reads.push(Read::new(zmscore, chunk.to_vec(), Kind::Members));
        }
    }
    reads
}

impl Read {
    fn new(command: redis::Cmd, leases: Vec<(u64, String)>, of: Kind) -> Self {
        Read {
            command,
            leases,
            of,
        }
    }

    /// Sends the read: for each lease, whether the server still has it.
    async fn send(self, mut conn: CommandConn) -> Result<Vec<(u64, bool)>, CommandError> {
        let held: Vec<bool> = match self.of {
            Kind::Owners => {
                let found: Vec<Option<String>> = self.command.query_async(&mut conn).await?;
                (found.iter().zip(&self.leases))
                    .map(|(found, (_, owner))| found.as_deref() == Some(owner.as_str()))
                    .collect()
            }
            Kind::Members => {
                let scores: Vec<Option<f64>> = self.command.query_async(&mut conn).await?;
                scores.iter().map(Option::is_some).collect()
            }
        };
        if held.len() != self.leases.len() {
            return Err(CommandError::Reply(format!(
                "{} answers for {} leases",
                held.len(),
                self.leases.len()
            )));
        }
        Ok(self
            .leases
            .into_iter()
            .map(|(id, _)| id)
            .zip(held)
            .collect())
    }
}

/// Sends every read at once on `conn`: whether the server still has each
/// lease, for the leases of every read it did not refuse.
pub(super) async fn send_all(
    conn: CommandConn,
    reads: Vec<Read>,
) -> Result<Vec<(u64, bool)>, CommandError> {
    let mut sent = tokio::task::JoinSet::new();
    for read in reads {
        sent.spawn(read.send(conn.clone()));
    }
    let mut answers = Vec::new();
    while let Some(answer) = sent.join_next().await {
        match answer.map_err(|e| CommandError::Reply(format!("restart check: {e}")))? {
            Ok(answer) => answers.extend(answer),
            // Its leases are left to their renewals; the other reads still count.
            Err(e) if e.refused() => {
                tracing::warn!(error = %e, "a restart check read was refused; the leases it covers are checked at their next renewal");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(answers)
}
