//! With feature `metrics`: what the lifecycle exports through the `metrics`
//! facade, seen by a small recorder installed for one test thread.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests stop loudly"
)]

use distlock_core::memory::MemoryStore;
use distlock_core::{AcquireOptions, DistributedLock, LockKey, LossReason, Wait};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A metric's name and its labels, sorted.
type Id = (String, Vec<(String, String)>);

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(Vec<f64>),
}

/// Keeps every value as it stands (the `metrics-util` debugging recorder resets
/// counters and gauges on each snapshot, which hides a gauge's level).
#[derive(Debug, Default, Clone)]
struct Store(Arc<Mutex<HashMap<Id, Value>>>);

struct Handle {
    store: Store,
    id: Id,
}

impl Handle {
    fn update(&self, empty: Value, f: impl FnOnce(&mut Value)) {
        let mut values = self.store.0.lock().unwrap();
        f(values.entry(self.id.clone()).or_insert(empty));
    }
}

impl CounterFn for Handle {
    fn increment(&self, by: u64) {
        self.update(Value::Counter(0), |v| {
            if let Value::Counter(n) = v {
                *n += by;
            }
        });
    }
    fn absolute(&self, to: u64) {
        self.update(Value::Counter(0), |v| *v = Value::Counter(to));
    }
}

impl GaugeFn for Handle {
    fn increment(&self, by: f64) {
        self.update(Value::Gauge(0.0), |v| {
            if let Value::Gauge(x) = v {
                *x += by;
            }
        });
    }
    fn decrement(&self, by: f64) {
        GaugeFn::increment(self, -by);
    }
    fn set(&self, to: f64) {
        self.update(Value::Gauge(0.0), |v| *v = Value::Gauge(to));
    }
}

impl HistogramFn for Handle {
    fn record(&self, value: f64) {
        self.update(Value::Histogram(Vec::new()), |v| {
            if let Value::Histogram(xs) = v {
                xs.push(value);
            }
        });
    }
}

impl Store {
    fn handle(&self, key: &Key) -> Arc<Handle> {
        let mut labels: Vec<_> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let id = (key.name().to_owned(), labels);
        Arc::new(Handle {
            store: self.clone(),
            id,
        })
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<Value> {
        let mut labels: Vec<_> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        labels.push(("backend".into(), "memory".into()));
        labels.sort();
        self.0.lock().unwrap().get(&(name.into(), labels)).cloned()
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.get(name, labels) {
            Some(Value::Counter(n)) => n,
            other => panic!("{name} {labels:?}: {other:?}"),
        }
    }

    fn gauge(&self, name: &str) -> f64 {
        match self.get(name, &[]) {
            Some(Value::Gauge(x)) => x,
            other => panic!("{name}: {other:?}"),
        }
    }

    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.get(name, labels) {
            Some(Value::Histogram(xs)) => xs,
            other => panic!("{name} {labels:?}: {other:?}"),
        }
    }
}

impl Recorder for Store {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.handle(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key))
    }
}

const KEY: &str = "metrics/sku-42";

#[tokio::test]
async fn acquire_hold_and_loss_are_exported_labelled_by_backend_never_by_key() {
    let store = Store::default();
    // Thread-local: the current-thread runtime runs every task of this test here.
    let _guard = metrics::set_default_local_recorder(&store);
    let memory = MemoryStore::new();
    let (a, b) = (memory.client(), memory.client());
    let key = LockKey::new(KEY).unwrap();
    let acquire_total = "distlock_acquire_total";

    let first = a.acquire(&key, &AcquireOptions::new()).await.unwrap();
    assert_eq!(store.counter(acquire_total, &[("outcome", "acquired")]), 1);
    assert_eq!(store.gauge("distlock_leases_held"), 1.0);
    assert_eq!(store.gauge("distlock_waiters"), 0.0);

    assert!(
        b.try_acquire(&key, &AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(store.counter(acquire_total, &[("outcome", "busy")]), 1);
    let short = AcquireOptions::new().wait(Wait::For(Duration::from_millis(30)));
    assert!(b.acquire(&key, &short).await.is_err());
    assert_eq!(store.counter(acquire_total, &[("outcome", "timeout")]), 1);
    let waited = store.histogram("distlock_acquire_wait_seconds", &[("outcome", "timeout")]);
    assert!(matches!(waited[..], [s] if s >= 0.03), "{waited:?}");

    // A caller that gives up leaves the gauge, and the wait is counted.
    let forever = AcquireOptions::new().wait(Wait::Forever);
    let gave_up = tokio::time::timeout(Duration::from_millis(20), b.acquire(&key, &forever));
    assert!(gave_up.await.is_err());
    assert_eq!(store.counter(acquire_total, &[("outcome", "cancelled")]), 1);
    assert_eq!(store.gauge("distlock_waiters"), 0.0);

    // A waiter shows in the gauge while it waits, and leaves it with the lock.
    let waiter = tokio::spawn({
        let key = key.clone();
        async move {
            b.acquire(&key, &AcquireOptions::new())
                .await
                .map(|l| (b, l))
        }
    });
    let waiting = async {
        while store.get("distlock_waiters", &[]) != Some(Value::Gauge(1.0)) {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter never showed in distlock_waiters");
    first.release().await.unwrap();
    let (_b, second) = waiter.await.unwrap().unwrap();
    assert_eq!(store.gauge("distlock_waiters"), 0.0);
    assert_eq!(store.counter("distlock_releases_total", &[]), 1);
    assert_eq!(store.counter(acquire_total, &[("outcome", "acquired")]), 2);
    assert_eq!(store.gauge("distlock_leases_held"), 1.0);
    assert_eq!(store.histogram("distlock_hold_seconds", &[]).len(), 1);

    assert!(memory.delete(&key));
    let reason = tokio::time::timeout(Duration::from_secs(1), second.lost()).await;
    assert_eq!(reason.unwrap(), LossReason::Revoked);
    let lost = [("reason", "revoked")];
    assert_eq!(store.counter("distlock_leases_lost_total", &lost), 1);
    assert_eq!(store.gauge("distlock_leases_held"), 0.0);
    assert_eq!(store.histogram("distlock_hold_seconds", &[]).len(), 2);

    let values = store.0.lock().unwrap();
    for ((name, labels), _) in values.iter() {
        assert!(name.starts_with("distlock_"), "{name}");
        assert!(
            labels.contains(&("backend".into(), "memory".into())),
            "{name}"
        );
        assert!(
            labels.iter().all(|(k, v)| k != "key" && !v.contains(KEY)),
            "{name} {labels:?}"
        );
    }
}

#[tokio::test]
async fn renewal_failures_and_expiry_are_counted() {
    let store = Store::default();
    let _guard = metrics::set_default_local_recorder(&store);
    let memory = MemoryStore::new();
    let a = memory.client();
    let key = LockKey::new(KEY).unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_millis(300));
    let lease = a.acquire(&key, &opts).await.unwrap();
    a.backend()
        .set_fault(distlock_core::memory::MemoryFault::Refused);
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost()).await;
    assert_eq!(reason.unwrap(), LossReason::Expired);
    let failures = store.counter("distlock_renewal_failures_total", &[]);
    assert_eq!(failures, a.metrics().renewal_failures);
    assert!(failures >= 1);
    let lost = [("reason", "expired")];
    assert_eq!(store.counter("distlock_leases_lost_total", &lost), 1);
    assert_eq!(store.gauge("distlock_leases_held"), 0.0);
}
