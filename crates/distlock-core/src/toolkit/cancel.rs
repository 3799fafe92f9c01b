//! One guard for every cancel-safety path: undo a half-done acquire when the
//! acquiring future is dropped.

use std::future::Future;
use std::pin::Pin;

/// The background part of an undo: a release whose reply nobody awaits.
pub type UndoFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Undoes a half-done acquire if it is dropped while armed.
///
/// An acquire that is cancelled (its future dropped, `tokio::time::timeout`
/// included) after it sent a request that may have taken the lock, queued a
/// waiter or created a node must not leave that behind. Arm the guard with what
/// the undo needs *before* the request goes out, update it as the acquire
/// progresses ([`CancelGuard::state_mut`]), and [`CancelGuard::disarm`] it once
/// the outcome is handed to the caller.
///
/// On drop the undo runs at once, synchronously, so it can queue its request on
/// a connection ahead of anything sent later (or undo in-process state); a
/// future it returns (the awaited reply) is spawned on the current tokio
/// runtime. Without a runtime that future is dropped and the backend's ttl is the
/// backstop.
///
/// ```
/// use distlock_core::toolkit::CancelGuard;
/// use std::sync::{Arc, atomic::{AtomicBool, Ordering}};
/// let undone = Arc::new(AtomicBool::new(false));
/// let flag = undone.clone();
/// let guard = CancelGuard::new("lock-key", move |key: &str| {
///     assert_eq!(key, "lock-key");
///     flag.store(true, Ordering::SeqCst);
///     None
/// });
/// drop(guard); // as if the acquire were cancelled
/// assert!(undone.load(Ordering::SeqCst));
/// ```
pub struct CancelGuard<T, U>
where
    U: FnOnce(T) -> Option<UndoFuture>,
{
    armed: Option<(T, U)>,
}

impl<T, U> CancelGuard<T, U>
where
    U: FnOnce(T) -> Option<UndoFuture>,
{
    /// Arms the guard: if dropped before [`CancelGuard::disarm`], `undo(state)`
    /// runs.
    pub fn new(state: T, undo: U) -> Self {
        CancelGuard {
            armed: Some((state, undo)),
        }
    }

    /// What the undo will be given; update it as the acquire progresses. `None`
    /// once disarmed.
    pub fn state_mut(&mut self) -> Option<&mut T> {
        self.armed.as_mut().map(|(state, _)| state)
    }

    /// The outcome is known and handed over: nothing to undo. Returns the state.
    pub fn disarm(mut self) -> Option<T> {
        self.armed.take().map(|(state, _)| state)
    }
}

impl<T, U> Drop for CancelGuard<T, U>
where
    U: FnOnce(T) -> Option<UndoFuture>,
{
    fn drop(&mut self) {
        let Some((state, undo)) = self.armed.take() else {
            return;
        };
        let Some(background) = undo(state) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(background)),
            Err(_) => tracing::debug!(
                "an acquire was abandoned with no runtime to finish its undo; the ttl frees it"
            ),
        }
    }
}

impl<T: std::fmt::Debug, U> std::fmt::Debug for CancelGuard<T, U>
where
    U: FnOnce(T) -> Option<UndoFuture>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelGuard")
            .field("armed", &self.armed.as_ref().map(|(state, _)| state))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting(count: &Arc<AtomicUsize>) -> impl FnOnce(u32) -> Option<UndoFuture> + use<> {
        let count = count.clone();
        move |state| {
            count.fetch_add(state as usize, Ordering::SeqCst);
            None
        }
    }

    #[tokio::test]
    async fn a_dropped_guard_undoes_with_its_latest_state() {
        let count = Arc::new(AtomicUsize::new(0));
        let mut guard = CancelGuard::new(1, counting(&count));
        if let Some(state) = guard.state_mut() {
            *state = 5;
        }
        drop(guard);
        assert_eq!(count.load(Ordering::SeqCst), 5);
    }

    #[tokio::test]
    async fn a_disarmed_guard_does_nothing() {
        let count = Arc::new(AtomicUsize::new(0));
        let guard = CancelGuard::new(7, counting(&count));
        assert_eq!(guard.disarm(), Some(7));
        assert_eq!(count.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn the_background_part_runs_on_the_runtime() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let guard = CancelGuard::new(tx, |tx: tokio::sync::oneshot::Sender<()>| {
            Some(Box::pin(async move {
                let _ = tx.send(());
            }) as UndoFuture)
        });
        drop(guard);
        rx.await.expect("the undo ran in the background");
    }

    #[test]
    fn without_a_runtime_the_synchronous_part_still_runs() {
        let count = Arc::new(AtomicUsize::new(0));
        drop(CancelGuard::new(3, counting(&count)));
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }
}
