//! Reentrancy, in one place: a client remembers which (key, owner) pairs it
//! holds, so the same owner acquiring again gets another handle on the same
//! lease (same token) at once, and only the last handle's release frees the lock.

use crate::lease::Shared;
use crate::{LockKey, Owner};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// (key, owner) → the shared lease and how many `Lease` values refer to it.
type Held = HashMap<(LockKey, Owner), (Weak<Shared>, usize)>;

/// The reentrant holders of one lock client.
#[derive(Default)]
pub(crate) struct Registry {
    held: Mutex<Held>,
}

/// A lease's entry in its client's registry.
pub(crate) struct Reentry {
    pub registry: Arc<Registry>,
    pub owner: Owner,
}

impl Registry {
    fn held(&self) -> MutexGuard<'_, Held> {
        // A panic elsewhere cannot leave this small map half-written.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Another handle on the lease `owner` holds on `key`, if it is still held.
    pub fn enter(&self, key: &LockKey, owner: &Owner) -> Option<Arc<Shared>> {
        let mut held = self.held();
        let (weak, count) = held.get_mut(&(key.clone(), owner.clone()))?;
        let shared = weak.upgrade().filter(|s| s.is_held())?;
        *count += 1;
        Some(shared)
    }

    /// Records a fresh acquisition as the first handle of `owner` on `key`.
    pub fn insert(&self, key: &LockKey, owner: &Owner, shared: &Arc<Shared>) {
        self.held()
            .insert((key.clone(), owner.clone()), (Arc::downgrade(shared), 1));
    }

    /// One handle of `shared` goes away. True if it was the last one, so the lock
    /// itself must be released.
    pub fn leave(&self, owner: &Owner, shared: &Arc<Shared>) -> bool {
        let mut held = self.held();
        let slot = (shared.key.clone(), owner.clone());
        match held.get_mut(&slot) {
            Some((weak, count)) if std::ptr::eq(weak.as_ptr(), Arc::as_ptr(shared)) => {
                *count -= 1;
                if *count > 0 {
                    return false;
                }
                held.remove(&slot);
                true
            }
            // The registry moved on to a newer acquisition: this one ended already.
            _ => true,
        }
    }
}
