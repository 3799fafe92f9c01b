//! When this client first saw each holder's record, kept across its acquires.
//!
//! A contender takes over a record it has seen unchanged for the record's ttl
//! plus drift, counted from its first sight (there is no server clock to ask).
//! Counting from the first sight of *any* acquire of this client, not only
//! the current one, lets a `try_acquire` that keeps finding the same crashed
//! record, or an acquire started after earlier ones saw it, take over within a
//! ttl of the first look rather than a ttl after its own; the minimum hold
//! (a record renewed to the time left) relies on it. A first sight is always
//! after the write it saw, so any one is a safe start; forgetting one only
//! starts the count later.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// The most records remembered; past it the memory starts afresh.
const CAPACITY: usize = 4096;

/// Key → (revision, when this client first saw it).
#[derive(Debug, Default)]
pub(crate) struct Sightings(Mutex<HashMap<String, (u64, Instant)>>);

impl Sightings {
    /// When this client first saw `revision` on `key`; `now` if this is the
    /// first time.
    pub(crate) fn first_seen(&self, key: &str, revision: u64, now: Instant) -> Instant {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&(r, at)) = seen.get(key)
            && r == revision
        {
            return at;
        }
        if seen.len() >= CAPACITY {
            seen.clear();
        }
        seen.insert(key.to_owned(), (revision, now));
        now
    }

    /// Forgets `key`, once it was granted: its next holder's record is new.
    /// (Without hashing the key when nothing is remembered, as on every
    /// uncontended grant.)
    pub(crate) fn forget(&self, key: &str) {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !seen.is_empty() {
            seen.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_first_sight_of_a_revision_is_kept_until_it_changes() {
        let sightings = Sightings::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        assert_eq!(sightings.first_seen("k", 5, t0), t0);
        assert_eq!(sightings.first_seen("k", 5, later), t0);
        assert_eq!(
            sightings.first_seen("k", 6, later),
            later,
            "a renewal restarts"
        );
        sightings.forget("k");
        let again = later + Duration::from_secs(1);
        assert_eq!(
            sightings.first_seen("k", 6, again),
            again,
            "forgotten once granted"
        );
    }
}
