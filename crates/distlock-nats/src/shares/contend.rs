//! One acquire of a permit or a share: read the entry, drop the members this
//! contender has seen expire, and either write its grant (a compare-and-set
//! on the revision read) or wait on the entry's KV watch.
//!
//! Expiry without a server clock, member by member: a contender notes when it
//! first saw each member's renewal count; once that count is unchanged for
//! the member's ttl plus drift on the contender's monotonic clock, the member's
//! own deadline has passed (it measured from before the write that set the
//! count, the contender from after it), and the next write leaves it out. A
//! renewal raises the count and the observation starts again. A queued waiter
//! keeps its place the same way, raising its count every third of its place's
//! lifetime.

use super::{NatsShare, Place, Read};
use crate::error::Written;
use crate::share_entry::{Entry, Member, Mode};
use distlock_core::adapter::{AcquireRequest, Acquired, WaitUntil, clock_drift};
use distlock_core::toolkit::CancelGuard;
use distlock_core::{FencingToken, LockError};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What a primitive's rule says of one attempt.
pub(crate) enum Verdict {
    /// Grant: the new holder's mode and slot.
    Grant(Mode, u32),
    /// Not now; queue a place of this mode while waiting (`None`: no queue).
    Wait(Option<Mode>),
}

/// When this contender first saw each member at its renewal count.
#[derive(Default)]
struct Sightings(HashMap<String, (u64, Instant)>);

impl Sightings {
    /// Drops from `entry` every member other than `me` seen unchanged for its
    /// ttl plus drift; returns the earliest instant another may expire.
    fn prune(&mut self, entry: &mut Entry, me: &str, now: Instant) -> Option<Instant> {
        let mut seen = HashMap::with_capacity(entry.members.len());
        let mut earliest: Option<Instant> = None;
        entry.members.retain(|m| {
            if m.owner == me {
                return true;
            }
            let first = match self.0.get(&m.owner) {
                Some(&(renews, at)) if renews == m.renews => at,
                _ => now,
            };
            seen.insert(m.owner.clone(), (m.renews, first));
            let expires = first + m.ttl + clock_drift(m.ttl);
            if expires <= now {
                return false;
            }
            earliest = Some(earliest.map_or(expires, |e| e.min(expires)));
            true
        });
        self.0 = seen;
        earliest
    }
}

/// How long a waiter's place lives without a refresh: its ttl (a vanished
/// waiter holds the queue no longer than a crashed holder), within 300 ms
/// (short ttls do not make waiters spin) and 5 s (a long ttl does not let a
/// vanished waiter stall the queue).
fn place_lifetime(ttl: Duration) -> Duration {
    ttl.clamp(Duration::from_millis(300), Duration::from_secs(5))
}

/// Acquires a holding on `place` for `owner` by `rule` (given the pruned entry
/// and `owner`), waiting per `req.wait`. Cancel-safe: once it has written, an
/// acquire that ends without a grant removes `owner` in the background.
pub(crate) async fn acquire(
    place: &Place,
    req: &AcquireRequest<'_>,
    owner: String,
    rule: impl Fn(&mut Entry, &str) -> Result<Verdict, LockError>,
) -> Result<(Acquired<NatsShare>, u32), LockError> {
    let mut guard = CancelGuard::new(false, |wrote| wrote.then(|| place.undo(owner.clone())));
    let lifetime = place_lifetime(req.ttl);
    let mut sightings = Sightings::default();
    let mut refreshed = Instant::now();
    let mut watch = None;
    loop {
        let Read {
            revision,
            mut entry,
        } = place.read().await?;
        let now = Instant::now();
        let expiry = sightings.prune(&mut entry, &owner, now);
        let verdict = rule(&mut entry, &owner)?;
        let mine = entry.member(&owner).cloned();
        let write = match &verdict {
            Verdict::Grant(mode, slot) => {
                entry.remove(&owner);
                entry.members.push(Member {
                    holds: true,
                    mode: *mode,
                    slot: *slot,
                    ttl: req.ttl,
                    renews: 0,
                    granted: 0,
                    owner: owner.clone(),
                });
                true
            }
            Verdict::Wait(Some(mode)) if req.wait != WaitUntil::No => match mine {
                None => {
                    entry.members.push(Member {
                        holds: false,
                        mode: *mode,
                        slot: 0,
                        ttl: lifetime,
                        renews: 0,
                        granted: 0,
                        owner: owner.clone(),
                    });
                    true
                }
                Some(_) if now >= refreshed + lifetime / 3 => {
                    if let Some(me) = entry.members.iter_mut().find(|m| m.owner == owner) {
                        me.renews += 1;
                    }
                    true
                }
                Some(_) => false,
            },
            Verdict::Wait(_) => false,
        };
        let deadline = req.wait.instant();
        let granting = matches!(verdict, Verdict::Grant(..));
        if !granting && deadline.is_some_and(|at| at <= Instant::now()) {
            return Err(req.not_acquired());
        }
        if write {
            if let Some(wrote) = guard.state_mut() {
                *wrote = true;
            }
            let sent_at = Instant::now();
            let written = match place.write(&entry, revision).await {
                Written::At(revision) => Some(revision),
                Written::Conflict => None,
                // Applied or not? Our member in the entry says.
                Written::Unknown(e) => match place.read().await {
                    Ok(read) => match read.entry.member(&owner) {
                        Some(m) if m.holds == granting => {
                            Some(if granting { m.granted } else { read.revision })
                        }
                        _ => None,
                    },
                    Err(_) => return Err(e),
                },
            };
            let Some(written) = written else { continue };
            if !granting {
                refreshed = sent_at;
                continue;
            }
            let Some(token) = place.token(written).await? else {
                continue;
            };
            guard.disarm();
            let slot = match verdict {
                Verdict::Grant(_, slot) => slot,
                Verdict::Wait(_) => 0,
            };
            let share = NatsShare::new(place.clone(), owner, written);
            return Ok((grant(share, token, sent_at), slot));
        }
        // Subscribe before the next read, so no change after it is missed.
        let Some(changes) = watch.as_mut() else {
            let b = &place.backend;
            let subscribed = b.kv.watch(&place.key).await;
            watch =
                Some(subscribed.map_err(|e| b.servers.unavailable("watching a share entry", &e))?);
            continue;
        };
        let refresh = mine.map(|_| refreshed + lifetime / 3);
        let until = [expiry, deadline, refresh].into_iter().flatten().min();
        if !crate::protocol::next_change(changes, until).await {
            watch = None;
        }
    }
}

fn grant(handle: NatsShare, token: FencingToken, sent_at: Instant) -> Acquired<NatsShare> {
    Acquired {
        handle,
        token,
        sent_at,
    }
}
