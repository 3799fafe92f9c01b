//! [`Bound`]: a lock backend and one of its handles seen as a [`Holding`], the
//! one shape the lease machinery renews and releases. Apart from the lease
//! because it is the adapter side of that seam, not the lifecycle.

use crate::LockError;
use crate::backend::{Acquired, Backend, Holding, LossSignal, Ownership};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// A lock backend and one of its handles, as a [`Holding`]: what lets the lock
/// (and primitives built on the lock, such as election on backends without a
/// native layout) share the lease machinery with every other primitive.
pub struct Bound<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) handle: B::Handle,
}

impl<B: Backend> std::fmt::Debug for Bound<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Bound<B> {
    /// Pairs a backend with a handle it returned.
    pub fn new(backend: Arc<B>, handle: B::Handle) -> Self {
        Bound { backend, handle }
    }

    /// What `backend` acquired, with its handle paired with it: the share,
    /// permit or leadership of a primitive whose holdings are the lock's own.
    pub fn acquired(backend: &Arc<B>, won: Acquired<B::Handle>) -> Acquired<Self> {
        Acquired {
            handle: Bound::new(backend.clone(), won.handle),
            token: won.token,
            sent_at: won.sent_at,
        }
    }
}

#[async_trait]
impl<B: Backend> Holding for Bound<B> {
    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError> {
        self.backend.renew(&self.handle, ttl).await
    }
    async fn release(&self) -> Result<Ownership, LockError> {
        self.backend.release(&self.handle).await
    }
    fn backend_name(&self) -> &'static str {
        self.backend.name()
    }
    fn loss_signal(&self) -> Option<LossSignal> {
        self.backend.loss_signal(&self.handle)
    }
    fn abandoned(&self) {
        self.backend.abandoned(&self.handle)
    }
}
