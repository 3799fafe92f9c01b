//! Replicated buckets and nats-server versions: before 2.9.21 a clustered
//! stream checks a write's expected last subject sequence only before proposing
//! it, so two concurrent compare-and-sets on one key can both succeed
//! (nats-io/nats-server#4320) and two clients be granted one lock. Connecting
//! refuses such a bucket rather than warn about it.

use crate::error::BACKEND;
use distlock_core::LockError;

/// Refuses a bucket of `replicas` copies when nats-server `version` (the
/// server the client is connected to) does not serialize a replicated stream's
/// compare-and-set writes; a bucket of one replica is safe on every version.
pub(crate) fn check(bucket: &str, replicas: usize, version: &str) -> Result<(), LockError> {
    if replicas <= 1 || serializes_replicated_cas(version) {
        return Ok(());
    }
    Err(LockError::config(
        BACKEND,
        format!(
            "bucket `{bucket}` has {replicas} replicas on nats-server {version}: before 2.9.21 a \
             clustered stream does not serialize compare-and-set writes (nats-io/nats-server#4320), \
             so two clients could both be granted one lock; use one replica (`replicas=1`, and \
             recreate an existing bucket with one) or upgrade every server to 2.9.21 or later"
        ),
    ))
}

/// Whether nats-server `version` checks a replicated stream's expected last
/// subject sequence as part of the write (2.9.21 and later), rather than only
/// before proposing it, where two concurrent writes can both pass; `false`
/// for a version it cannot read.
fn serializes_replicated_cas(version: &str) -> bool {
    let numbers: Vec<u64> = (version.split(['.', '-']).take(3))
        .map_while(|part| part.parse().ok())
        .collect();
    match numbers[..] {
        [major, minor, patch] => (major, minor, patch) >= (2, 9, 21),
        // Unknown: assume the worst.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{check, serializes_replicated_cas};

    #[test]
    fn servers_before_2_9_21_do_not_serialize_replicated_compare_and_set() {
        for old in ["2.9.10", "2.9.20", "1.4.0", "dev"] {
            assert!(!serializes_replicated_cas(old), "{old}");
        }
        for fixed in ["2.9.21", "2.10.0", "2.11.4-beta", "3.0.0"] {
            assert!(serializes_replicated_cas(fixed), "{fixed}");
        }
    }

    #[test]
    fn only_a_replicated_bucket_on_an_old_server_is_refused() {
        assert!(check("locks", 1, "2.9.10").is_ok());
        assert!(check("locks", 3, "2.9.21").is_ok());
        let refused = check("locks", 3, "2.9.10")
            .expect_err("refused")
            .to_string();
        for named in [
            "`locks`",
            "3 replicas",
            "2.9.10",
            "#4320",
            "replicas=1",
            "2.9.21",
        ] {
            assert!(refused.contains(named), "{named}: {refused}");
        }
    }
}
