//! The leases of a history: each successful acquire with what followed it,
//! the material every check works on.

use super::history::{Event, History, Op, Outcome, RenewalMode};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// One successful acquisition and what followed it.
#[derive(Debug)]
pub(crate) struct Lease<'h> {
    pub id: u64,
    pub acquire: usize,
    pub event: &'h Event,
    pub token: u64,
    pub ttl: Duration,
    pub renewal: RenewalMode,
    /// The end of the admitted span, if any checked write was admitted.
    pub last_admitted: Option<u64>,
    /// The latest checked write, admitted or not: the holder saw `is_held()`
    /// true at that instant or later.
    pub last_believed: Option<u64>,
    /// When the holder stopped believing: release sent, `lost()` seen, or an
    /// operation that reported the loss.
    pub ended: Option<u64>,
    /// (invoked, deadline) of each event that sampled the deadline.
    pub samples: Vec<(u64, u64)>,
}

/// The leases of a history by key, each key's in acquire-completion order.
pub(crate) fn leases(history: &History) -> BTreeMap<&str, Vec<Lease<'_>>> {
    let mut by_id: HashMap<u64, Lease<'_>> = HashMap::new();
    for (index, e) in history.events.iter().enumerate() {
        if let (Op::Acquire { ttl, renewal }, Outcome::Ok, Some(token)) =
            (&e.op, &e.outcome, e.token)
        {
            by_id.insert(
                e.lease,
                Lease {
                    id: e.lease,
                    acquire: index,
                    event: e,
                    token,
                    ttl: *ttl,
                    renewal: *renewal,
                    last_admitted: None,
                    last_believed: None,
                    ended: None,
                    samples: e.deadline.map(|d| (e.completed, d)).into_iter().collect(),
                },
            );
        }
    }
    for e in &history.events {
        let Some(lease) = by_id.get_mut(&e.lease) else {
            continue;
        };
        let end = match (&e.op, &e.outcome) {
            (Op::Release, _) => Some(e.invoked),
            (Op::Lost, _) | (_, Outcome::Lost(_)) => Some(e.completed),
            _ => None,
        };
        if let Some(end) = end {
            lease.ended = Some(lease.ended.map_or(end, |t| t.min(end)));
        }
        if let Op::Write { checked: true } = e.op {
            let later = |t: Option<u64>| Some(t.map_or(e.invoked, |t| t.max(e.invoked)));
            lease.last_believed = later(lease.last_believed);
            if let Outcome::Admitted(_) = e.outcome {
                lease.last_admitted = later(lease.last_admitted);
            }
        }
        if let (Op::Write { .. } | Op::Renew, Some(deadline)) = (&e.op, e.deadline) {
            lease.samples.push((e.invoked, deadline));
        }
    }
    let mut by_key: BTreeMap<&str, Vec<Lease<'_>>> = BTreeMap::new();
    for lease in by_id.into_values() {
        by_key
            .entry(lease.event.key.as_str())
            .or_default()
            .push(lease);
    }
    for leases in by_key.values_mut() {
        leases.sort_by_key(|l| (l.event.completed, l.id));
    }
    by_key
}
