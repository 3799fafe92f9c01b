//! What one acquire reports: the `distlock.acquire` span's `outcome` and
//! `token`, an event per outcome, and the same outcome to the client's
//! counters (`counters.rs`) and to the `metrics` feature (`metrics.rs`).

use crate::counters::Metrics;
use crate::metrics::Waiting;
use crate::outcome::Outcome;
use crate::{Lease, LockError};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;
use tracing::Span;

/// One acquire that goes to the backend, from its start to its outcome. Dropped
/// unfinished, because the caller dropped the acquire future, it records
/// `cancelled`, so waits given up by `tokio::time::timeout` stay visible.
pub(crate) struct Attempt<'a> {
    metrics: &'a Metrics,
    span: Span,
    waiting: Waiting,
    finished: bool,
}

impl<'a> Attempt<'a> {
    pub fn start(metrics: &'a Metrics, span: Span, started: Instant) -> Self {
        Attempt {
            metrics,
            span,
            waiting: metrics.acquire_started(started),
            finished: false,
        }
    }

    /// The acquire, polled inside the span as `Instrumented` would poll it,
    /// but with the one span this attempt holds and the acquire pinned where
    /// the caller made it: the boxed acquire future grows by little more than
    /// this attempt.
    pub fn run<'f, F>(self, acquire: Pin<&'f mut F>) -> Observed<'a, 'f, F> {
        Observed {
            attempt: self,
            acquire,
        }
    }

    fn finish(&mut self, result: &Result<Lease, LockError>) {
        self.finished = true;
        let outcome = Outcome::of(result);
        let (span, backend) = (&self.span, self.metrics.backend);
        span.record("outcome", outcome.as_str());
        match result {
            Ok(lease) => {
                span.record("token", lease.token().get());
                tracing::debug!(parent: span, backend, key = %lease.key(), token = %lease.token(), "acquired");
            }
            // The span carries the key; the events add only what is new.
            Err(LockError::Busy { .. }) => {
                tracing::debug!(parent: span, backend, "lock busy");
            }
            Err(LockError::Timeout { waited, .. }) => {
                tracing::debug!(parent: span, backend, ?waited, "acquire timed out");
            }
            Err(error) => {
                tracing::debug!(parent: span, backend, %error, "acquire failed");
            }
        }
        self.metrics.acquire_ended(outcome, &self.waiting);
    }
}

/// The future [`Attempt::run`] returns.
pub(crate) struct Observed<'a, 'f, F> {
    attempt: Attempt<'a>,
    acquire: Pin<&'f mut F>,
}

impl<F: Future<Output = Result<Lease, LockError>>> Future for Observed<'_, '_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let result = {
            let _entered = this.attempt.span.enter();
            ready!(this.acquire.as_mut().poll(cx))
        };
        this.attempt.finish(&result);
        Poll::Ready(result)
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let outcome = Outcome::Cancelled;
        self.span.record("outcome", outcome.as_str());
        tracing::debug!(parent: &self.span, backend = self.metrics.backend, "acquire cancelled");
        self.metrics.acquire_ended(outcome, &self.waiting);
    }
}
