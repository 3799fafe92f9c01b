//! The `distlock.acquire` span's fields and the lifecycle's events, seen by a
//! small capturing `tracing` layer installed for one test at a time.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests stop loudly")]

use distlock_core::memory::{MemoryFault, MemoryStore};
use distlock_core::{AcquireOptions, DistributedLock, LockKey, LossReason, Renewal, Wait};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug, Default, Clone)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
}

impl Fields {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

#[derive(Debug, Clone)]
struct Captured {
    level: Level,
    message: String,
    fields: Fields,
    /// The name of the span the event belongs to, if any.
    span: Option<&'static str>,
}

#[derive(Debug, Default)]
struct Log {
    open: HashMap<Id, (&'static str, Fields)>,
    closed: Vec<(&'static str, Fields)>,
    events: Vec<Captured>,
}

#[derive(Debug, Clone, Default)]
struct Capture(Arc<Mutex<Log>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let name = attrs.metadata().name();
        self.0
            .lock()
            .unwrap()
            .open
            .insert(id.clone(), (name, fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some((_, fields)) = self.0.lock().unwrap().open.get_mut(id) {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        self.0.lock().unwrap().events.push(Captured {
            level: *event.metadata().level(),
            message,
            fields,
            span: ctx.event_span(event).map(|s| s.name()),
        });
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut log = self.0.lock().unwrap();
        if let Some(span) = log.open.remove(&id) {
            log.closed.push(span);
        }
    }
}

impl Capture {
    /// Captures this thread's spans and events (the whole current-thread
    /// runtime of a `#[tokio::test]`, spawned tasks included) until the guard drops.
    fn install() -> (Capture, tracing::subscriber::DefaultGuard) {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        (capture, tracing::subscriber::set_default(subscriber))
    }

    fn acquire_spans(&self) -> Vec<Fields> {
        let log = self.0.lock().unwrap();
        let closed = log
            .closed
            .iter()
            .filter(|(name, _)| *name == "distlock.acquire");
        closed.map(|(_, fields)| fields.clone()).collect()
    }

    fn events(&self, message: &str) -> Vec<Captured> {
        let log = self.0.lock().unwrap();
        let events = log.events.iter().filter(|e| e.message == message);
        events.cloned().collect()
    }
}

fn key() -> LockKey {
    LockKey::new("tracing/sku-42").unwrap()
}

#[tokio::test]
async fn the_acquire_span_records_outcome_and_token_and_busy_and_timeout_are_events() {
    let (capture, _guard) = Capture::install();
    let store = MemoryStore::new();
    let (a, b) = (store.client(), store.client());
    let lease = a.acquire(&key(), &AcquireOptions::new()).await.unwrap();
    assert!(
        b.try_acquire(&key(), &AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    let short = AcquireOptions::new().wait(Wait::For(Duration::from_millis(20)));
    assert!(b.acquire(&key(), &short).await.is_err());
    let token = lease.token().get().to_string();
    lease.release().await.unwrap();

    let spans = capture.acquire_spans();
    let outcomes: Vec<_> = spans.iter().map(|s| s.get("outcome")).collect();
    assert_eq!(outcomes, [Some("acquired"), Some("busy"), Some("timeout")]);
    assert_eq!(spans[0].get("token"), Some(token.as_str()));
    assert_eq!(spans[1].get("token"), None, "no token without a lease");
    assert!(spans.iter().all(|s| s.get("backend") == Some("memory")));

    for message in ["lock busy", "acquire timed out"] {
        let events = capture.events(message);
        assert_eq!(events.len(), 1, "{message}: {events:?}");
        assert_eq!(events[0].level, Level::DEBUG);
        assert_eq!(events[0].span, Some("distlock.acquire"));
        assert_eq!(events[0].fields.get("backend"), Some("memory"));
    }
}

#[tokio::test]
async fn a_dropped_acquire_is_recorded_as_cancelled() {
    let (capture, _guard) = Capture::install();
    let store = MemoryStore::new();
    let (a, b) = (store.client(), store.client());
    let lease = a.acquire(&key(), &AcquireOptions::new()).await.unwrap();
    let forever = AcquireOptions::new().wait(Wait::Forever);
    let key = key();
    let waiting = b.acquire(&key, &forever);
    assert!(
        tokio::time::timeout(Duration::from_millis(20), waiting)
            .await
            .is_err()
    );
    lease.release().await.unwrap();
    let spans = capture.acquire_spans();
    assert_eq!(spans.last().unwrap().get("outcome"), Some("cancelled"));
    assert_eq!(capture.events("acquire cancelled").len(), 1);
}

#[tokio::test]
async fn a_failing_renewal_warns_once_then_the_loss_warns_with_its_reason() {
    let (capture, _guard) = Capture::install();
    let store = MemoryStore::new();
    let a = store.client();
    let opts = AcquireOptions::new().ttl(Duration::from_millis(600));
    let lease = a.acquire(&key(), &opts).await.unwrap();
    a.backend().set_fault(MemoryFault::Refused);
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost()).await;
    assert_eq!(reason.unwrap(), LossReason::Expired);

    let failures = capture.events("renewal failed; retrying until the deadline");
    let (first, rest) = failures.split_first().unwrap();
    assert_eq!(first.level, Level::WARN);
    assert_eq!(first.fields.get("failures"), Some("1"));
    assert!(
        first
            .fields
            .get("error")
            .unwrap()
            .contains("connection refused")
    );
    // Retries every ttl/20 until the deadline: a dozen here, all quiet.
    assert!(!rest.is_empty());
    assert!(rest.iter().all(|e| e.level == Level::DEBUG), "{rest:?}");

    let lost = capture.events("lease lost");
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].level, Level::WARN);
    let expected = LossReason::Expired.to_string();
    assert_eq!(lost[0].fields.get("reason"), Some(expected.as_str()));
    assert_eq!(
        lost[0].fields.get("token"),
        Some(lease.token().to_string().as_str())
    );
}

#[tokio::test]
async fn a_revoked_lease_and_a_failed_release_warn() {
    let (capture, _guard) = Capture::install();
    let store = MemoryStore::new();
    let a = store.client();
    let manual = AcquireOptions::new().renewal(Renewal::Manual);
    let revoked = a.acquire(&key(), &manual).await.unwrap();
    assert!(store.delete(&key()));
    let reason = tokio::time::timeout(Duration::from_secs(1), revoked.lost()).await;
    assert_eq!(reason.unwrap(), LossReason::Revoked);
    let lost = capture.events("lease lost");
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].level, Level::WARN);
    let expected = LossReason::Revoked.to_string();
    assert_eq!(lost[0].fields.get("reason"), Some(expected.as_str()));

    let lease = a.acquire(&key(), &manual).await.unwrap();
    a.backend().set_fault(MemoryFault::Refused);
    assert!(lease.release().await.is_err());
    let failed = capture.events("release failed; the ttl frees the lock");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].level, Level::WARN);
    assert!(
        failed[0]
            .fields
            .get("error")
            .unwrap()
            .contains("connection refused")
    );
}
