//! The names of the primitives' keys: one slot per name, apart from the lock's.

use super::*;
use crate::keys::hash_tag;
use crate::protocol::fair::{FairQueue, turn_channel};

#[test]
fn every_key_and_channel_of_a_primitive_shares_the_lock_hash_tag() {
    for name in ["a", "{x}", "a}b{c", "orders/42", "%7B"] {
        let key = LockKey::new(name).unwrap();
        let lock = LockKeys::new("ns:", &key);
        let tag = hash_tag(&lock.lock);
        for kind in ["sem", "rw"] {
            let keys = ShareKeys::new("ns:", &key, kind);
            let names = [
                keys.expiry.clone(),
                keys.info.clone(),
                keys.fence.clone(),
                keys.channel.clone(),
                keys.sibling("limit"),
                keys.sibling("queue"),
                format!("{}:owner", keys.channel),
            ];
            for each in names {
                assert_eq!(hash_tag(&each), tag, "{each}");
                assert_ne!(each, lock.lock);
                assert_ne!(each, lock.fence);
            }
        }
        let queue = FairQueue::of(&lock);
        for each in [queue.list, queue.timeouts, turn_channel(&lock, "owner")] {
            assert_eq!(hash_tag(&each), tag, "{each}");
        }
    }
}

#[test]
fn the_two_primitives_of_a_name_never_share_a_key() {
    let key = LockKey::new("jobs").unwrap();
    let (sem, rw) = (
        ShareKeys::new("ns:", &key, "sem"),
        ShareKeys::new("ns:", &key, "rw"),
    );
    assert_eq!(sem.expiry, "ns:{jobs}:sem:expiry");
    assert_eq!(rw.sibling("places"), "ns:{jobs}:rw:places");
    assert_ne!(sem.fence, rw.fence);
    assert_ne!(sem.channel, rw.channel);
}
