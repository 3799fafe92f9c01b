//! The option checks, without a backend.

use super::*;
use crate::{FencingGuarantee, TokenDurability, Wake};

fn caps(min_ttl: Duration, granularity: Duration) -> Capabilities {
    Capabilities::new()
        .fencing(FencingGuarantee::Strict)
        .fifo(true)
        .wake(Wake::Push)
        .token_durability(TokenDurability::Persisted)
        .min_ttl(min_ttl)
        .ttl_granularity(granularity)
        .primitives(crate::Primitives::ALL)
}

fn reason(r: Result<(), LockError>) -> String {
    match r {
        Err(LockError::InvalidOptions { reason }) => reason,
        other => panic!("expected InvalidOptions, got {other:?}"),
    }
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn zero_ttl_is_rejected() {
    let opts = AcquireOptions::new().ttl(Duration::ZERO);
    assert!(reason(opts.validate(&caps(MS, MS))).contains("zero"));
}

#[test]
fn ttl_below_backend_minimum_is_rejected_not_clamped() {
    let opts = AcquireOptions::new().ttl(Duration::from_millis(500));
    let r = reason(opts.validate(&caps(Duration::from_secs(1), Duration::from_secs(1))));
    assert!(r.contains("minimum of 1s"), "{r}");
}

#[test]
fn ttl_must_match_granularity() {
    let opts = AcquireOptions::new().ttl(Duration::from_millis(1500));
    let r = reason(opts.validate(&caps(Duration::from_secs(1), Duration::from_secs(1))));
    assert!(r.contains("whole multiple"), "{r}");
    let ok = AcquireOptions::new().ttl(Duration::from_secs(2));
    assert!(
        ok.validate(&caps(Duration::from_secs(1), Duration::from_secs(1)))
            .is_ok()
    );
}

#[test]
fn renew_interval_must_be_below_ttl() {
    let ttl = Duration::from_secs(3);
    for every in [Duration::ZERO, ttl, ttl * 2] {
        let opts = AcquireOptions::new()
            .ttl(ttl)
            .renewal(Renewal::Every(every));
        assert!(reason(opts.validate(&caps(MS, MS))).contains("renew interval"));
    }
    let ok = AcquireOptions::new()
        .ttl(ttl)
        .renewal(Renewal::Every(ttl / 2));
    assert!(ok.validate(&caps(MS, MS)).is_ok());
}

#[test]
fn zero_max_hold_and_bad_owner_are_rejected() {
    let opts = AcquireOptions::new().max_hold(Duration::ZERO);
    assert!(reason(opts.validate(&caps(MS, MS))).contains("max_hold"));
    assert!(Owner::new("").is_err());
    assert!(Owner::new("x".repeat(129)).is_err());
    assert!(Owner::new("a\tb").is_err());
    assert_eq!(Owner::new("worker-1").unwrap().as_str(), "worker-1");
}

#[test]
fn defaults_are_thirty_seconds_auto_forever() {
    let opts = AcquireOptions::default();
    assert_eq!(opts.get_ttl(), Duration::from_secs(30));
    assert_eq!(opts.get_wait(), Wait::Forever);
    assert_eq!(opts.renew_interval(), Some(Duration::from_secs(10)));
}
