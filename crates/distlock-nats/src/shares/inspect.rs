//! What an operator sees of the semaphores and read-write locks: the holders
//! of one entry with their tokens, and every member left under a prefix.

use super::{Place, Read};
use crate::backend::NatsBackend;
use crate::keys::{escape, unescape};
use crate::protocol;
use crate::share_entry::{Kind, Member};
use distlock_core::{FencingToken, LockError};
use std::sync::Arc;

impl Place {
    /// The holders of the entry, each with its token.
    pub(crate) async fn holders(&self) -> Result<Vec<(Member, FencingToken)>, LockError> {
        let Read { entry, .. } = self.read().await?;
        let holders: Vec<Member> = entry.holders().cloned().collect();
        if holders.is_empty() {
            return Ok(Vec::new());
        }
        let b = &self.backend;
        let epoch = protocol::epoch(&b.kv.stream, &b.servers).await?;
        let mut out = Vec::with_capacity(holders.len());
        for holder in holders {
            // `None`: a grant of a bucket since recreated, which holds nothing.
            if let Some(token) = protocol::token(epoch, holder.granted)? {
                out.push((holder, token));
            }
        }
        Ok(out)
    }
}

/// Every holder and queued place of `kind` whose name starts with `prefix`,
/// one line each.
pub(crate) async fn residue(
    backend: &Arc<NatsBackend>,
    kind: Kind,
    prefix: &str,
) -> Result<Vec<String>, LockError> {
    let word = kind.word();
    let mut left = Vec::new();
    for key in (backend.keys_under(word, &format!("{word}.{}", escape(prefix)))).await? {
        let escaped = key
            .strip_prefix(word)
            .unwrap_or(&key)
            .trim_start_matches('.');
        let name = unescape(escaped).unwrap_or_else(|| key.clone());
        let place = Place {
            backend: Arc::clone(backend),
            kind,
            key: key.clone(),
        };
        let Read { revision, entry } = place.read().await?;
        for m in entry.members {
            let role = if m.holds { "holds" } else { "waits" };
            left.push(format!(
                "{name} ({word}): {} {role} {:?}, revision {revision}",
                m.owner, m.mode
            ));
        }
    }
    Ok(left)
}
