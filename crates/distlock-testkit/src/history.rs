//! Records who held which lock when, with which token, and checks the two
//! safety properties: no two holders of one key at once, and tokens that strictly
//! increase from holder to holder.

use distlock_core::{FencingToken, Lease, LockKey};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// One critical section, measured inside the lease: entered after acquire
/// returned, left before release was sent.
#[derive(Debug, Clone)]
pub struct Section {
    /// The key.
    pub key: LockKey,
    /// The holder's token.
    pub token: FencingToken,
    /// The client that held it.
    pub client: usize,
    /// When the holder started working.
    pub entered: Instant,
    /// When the holder stopped working.
    pub left: Instant,
}

/// A thread-safe log of critical sections.
#[derive(Debug, Default)]
pub struct History {
    sections: Mutex<Vec<Section>>,
}

/// A violation found by [`History::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two holders' sections on one key overlapped.
    Overlap {
        /// The key.
        key: LockKey,
        /// The earlier holder's token.
        first: FencingToken,
        /// The overlapping holder's token.
        second: FencingToken,
    },
    /// A later holder had a token not greater than an earlier one.
    TokenNotIncreasing {
        /// The key.
        key: LockKey,
        /// The earlier token.
        earlier: FencingToken,
        /// The later token.
        later: FencingToken,
    },
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one section.
    pub fn record(&self, section: Section) {
        self.sections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(section);
    }

    /// Records `lease`'s section for `client`, from `entered` until now.
    pub fn record_lease(&self, client: usize, lease: &Lease, entered: Instant) {
        self.record(Section {
            key: lease.key().clone(),
            token: lease.token(),
            client,
            entered,
            left: Instant::now(),
        });
    }

    /// Number of sections recorded.
    pub fn len(&self) -> usize {
        self.sections.lock().map_or(0, |s| s.len())
    }

    /// True if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every violation, in key and time order; empty means the history is safe.
    pub fn check(&self) -> Vec<Violation> {
        let sections = self
            .sections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut by_key: HashMap<LockKey, Vec<Section>> = HashMap::new();
        for s in sections {
            by_key.entry(s.key.clone()).or_default().push(s);
        }
        let mut violations = Vec::new();
        let mut keys: Vec<_> = by_key.into_iter().collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, mut sections) in keys {
            sections.sort_by_key(|s| s.entered);
            for pair in sections.windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                if b.entered < a.left {
                    violations.push(Violation::Overlap {
                        key: key.clone(),
                        first: a.token,
                        second: b.token,
                    });
                }
                if b.token <= a.token {
                    violations.push(Violation::TokenNotIncreasing {
                        key: key.clone(),
                        earlier: a.token,
                        later: b.token,
                    });
                }
            }
        }
        violations
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn section(key: &str, token: u64, from_ms: u64, to_ms: u64, base: Instant) -> Section {
        Section {
            key: LockKey::new(key).unwrap(),
            token: FencingToken::new(token),
            client: 0,
            entered: base + Duration::from_millis(from_ms),
            left: base + Duration::from_millis(to_ms),
        }
    }

    #[test]
    fn disjoint_increasing_history_is_clean() {
        let h = History::new();
        let t = Instant::now();
        h.record(section("k", 1, 0, 10, t));
        h.record(section("k", 2, 10, 20, t));
        h.record(section("other", 1, 5, 15, t));
        assert!(h.check().is_empty());
    }

    #[test]
    fn overlap_and_non_increasing_tokens_are_reported() {
        let h = History::new();
        let t = Instant::now();
        h.record(section("k", 5, 0, 10, t));
        h.record(section("k", 5, 9, 20, t));
        let v = h.check();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(matches!(v[0], Violation::Overlap { .. }));
        assert!(matches!(v[1], Violation::TokenNotIncreasing { .. }));
    }
}
