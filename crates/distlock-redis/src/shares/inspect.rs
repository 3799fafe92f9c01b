//! Inspection of shares, for operators and the conformance suite: the live
//! shares of one primitive, an operator's deletion, and what crashed or
//! cancelled clients left under a prefix.

use super::{ShareClient, ShareKeys, fail};
use crate::keys::lock_key_pattern;
use crate::primaries::scan_keys;
use crate::protocol::{ServerClient, share_script};
use distlock_core::{FencingToken, LockError};
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

static LIVE: LazyLock<Script> = LazyLock::new(|| Script::new(share_script!("share_live.lua")));
static DELETE: LazyLock<Script> = LazyLock::new(|| Script::new(share_script!("share_delete.lua")));

/// The live shares of one primitive, each read by `parse` from its owner value
/// and description; one `parse` cannot read is left out.
pub(crate) async fn live<T>(
    server: &ServerClient,
    (expiry, info): (&str, &str),
    budget: Duration,
    parse: impl Fn(&str, &str) -> Option<T>,
) -> Result<Vec<T>, LockError> {
    let reply: Vec<String> = server
        .invoke(budget, || {
            let mut invocation = LIVE.key(expiry);
            invocation.key(info);
            invocation
        })
        .await
        .map_err(|e| fail(server, e))?;
    Ok((reply.chunks_exact(2))
        .filter_map(|pair| parse(&pair[0], &pair[1]))
        .collect())
}

impl ShareClient {
    /// The live shares of `keys`, in `order`. A share's description is
    /// `<what>:<token>`; `share` makes one of its owner value, `what` and
    /// token (`None`, as for a description of another form: left out).
    pub async fn described<T, O: Ord>(
        &self,
        keys: &ShareKeys,
        share: impl Fn(String, &str, FencingToken) -> Option<T>,
        order: impl FnMut(&T) -> O,
    ) -> Result<Vec<T>, LockError> {
        let parse = |owner: &str, described: &str| {
            let (what, token) = described.split_once(':')?;
            share(
                owner.to_owned(),
                what,
                FencingToken::new(token.parse().ok()?),
            )
        };
        let sets = (keys.expiry.as_str(), keys.info.as_str());
        let mut shares = live(&self.server, sets, self.budget, parse).await?;
        shares.sort_by_key(order);
        Ok(shares)
    }

    /// Deletes the live shares of `owners` (all of them when empty) of `keys`
    /// behind their holders' backs; returns how many there were.
    pub async fn delete(&self, keys: &ShareKeys, owners: &[String]) -> Result<usize, LockError> {
        delete(&self.server, keys, owners, self.budget).await
    }

    /// [`residue`] in this client's namespace, in each set `at` names.
    pub async fn residue(
        &self,
        prefix: &str,
        at: &[(&str, &str)],
    ) -> Result<Vec<String>, LockError> {
        let mut found = Vec::new();
        for &at in at {
            let (server, namespace) = (&self.server, &self.namespace);
            found.extend(residue(server, namespace, prefix, at, self.budget).await?);
        }
        Ok(found)
    }
}

/// Deletes the live shares of `owners` (all of them when empty) behind their
/// holders' backs and wakes waiters; returns how many there were.
async fn delete(
    server: &ServerClient,
    keys: &ShareKeys,
    owners: &[String],
    budget: Duration,
) -> Result<usize, LockError> {
    let deleted: i64 = server
        .invoke_on(budget, |conn| {
            let mut invocation = DELETE.key(&keys.expiry);
            invocation
                .key(&keys.info)
                .arg(&keys.channel)
                .arg(conn.publish_command());
            for owner in owners {
                invocation.arg(owner);
            }
            invocation
        })
        .await
        .map_err(|e| fail(server, e))?;
    Ok(usize::try_from(deleted).unwrap_or(0))
}

/// The live entries of every `kind` primitive whose name starts with `prefix`,
/// in the sorted sets named `<lock key>:<kind>:<suffix>` (`rw:expiry`,
/// `rw:writers`, the fair lock's `queue:timeouts`), as `<set> <owner>`.
pub(crate) async fn residue(
    server: &ServerClient,
    namespace: &str,
    prefix: &str,
    (kind, suffix): (&str, &str),
    budget: Duration,
) -> Result<Vec<String>, LockError> {
    let pattern = format!("{}:{kind}:{suffix}", lock_key_pattern(namespace, prefix));
    let sets = scan_keys(server, &pattern, budget)
        .await
        .map_err(|e| fail(server, e))?;
    let mut found = Vec::new();
    for set in sets {
        let info = format!("{}info", set.trim_end_matches(suffix));
        let owners = live(server, (&set, &info), budget, |owner, _| {
            Some(owner.to_owned())
        });
        found.extend(
            owners
                .await?
                .into_iter()
                .map(|owner| format!("{set} {owner}")),
        );
    }
    Ok(found)
}
