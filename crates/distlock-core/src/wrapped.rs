//! What core keeps beside the adapter of a semaphore, a read-write lock or an
//! election: the adapter, its counters, and the acquire defaults it shares
//! with its lock.

use crate::counters::Metrics;
use crate::options::Defaults;
use std::fmt;
use std::sync::Arc;

/// An adapter with what its wrapper keeps beside it.
pub(crate) struct Wrapped<X> {
    pub backend: Arc<X>,
    pub metrics: Arc<Metrics>,
    pub defaults: Defaults,
}

impl<X> Wrapped<X> {
    /// `backend`, counted under its `name`, with the built-in defaults.
    pub fn new(backend: X, name: &'static str) -> Self {
        Wrapped {
            backend: Arc::new(backend),
            metrics: Arc::new(Metrics::new(name)),
            defaults: Defaults::default(),
        }
    }

    /// The `Debug` of the wrapper `kind` around the backend `name`.
    pub fn debug(&self, f: &mut fmt::Formatter<'_>, kind: &str, name: &str) -> fmt::Result {
        f.debug_struct(kind)
            .field("backend", &name)
            .finish_non_exhaustive()
    }
}
