//! Reentrancy, in one place: a client remembers which (key, owner) pairs it
//! holds, so the same owner acquiring again gets another handle on the same
//! lease (same token) at once, and only the last handle's release frees the lock.

use crate::{LockKey, Owner};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// (key, owner) → the shared lease state `T` and how many `Lease` values refer
/// to it.
type Held<T> = HashMap<(LockKey, Owner), (Weak<T>, usize)>;

/// The reentrant holders of one lock client.
pub(crate) struct Registry<T> {
    held: Mutex<Held<T>>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            held: Mutex::default(),
        }
    }
}

/// A lease's entry in its client's registry.
pub(crate) struct Reentry<T> {
    pub registry: Arc<Registry<T>>,
    pub owner: Owner,
}

impl<T> Registry<T> {
    fn held(&self) -> MutexGuard<'_, Held<T>> {
        // A panic elsewhere cannot leave this small map half-written.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Another handle on the lease `owner` holds on `key`, if `still_held` says
    /// it is.
    pub fn enter(
        &self,
        key: &LockKey,
        owner: &Owner,
        still_held: impl FnOnce(&T) -> bool,
    ) -> Option<Arc<T>> {
        let mut held = self.held();
        let (weak, count) = held.get_mut(&(key.clone(), owner.clone()))?;
        let shared = weak.upgrade().filter(|s| still_held(s))?;
        *count += 1;
        Some(shared)
    }

    /// Records a fresh acquisition as the first handle of `owner` on `key`.
    pub fn insert(&self, key: &LockKey, owner: &Owner, shared: &Arc<T>) {
        self.held()
            .insert((key.clone(), owner.clone()), (Arc::downgrade(shared), 1));
    }

    /// One handle of `shared` goes away. True if it was the last one, so the lock
    /// itself must be released.
    pub fn leave(&self, key: &LockKey, owner: &Owner, shared: &Arc<T>) -> bool {
        let mut held = self.held();
        let slot = (key.clone(), owner.clone());
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
