//! distlock's metrics in Prometheus' text format:
//! `cargo run -p distlock --example prometheus --features metrics`.
//!
//! It installs `metrics-exporter-prometheus` as the global recorder, takes a
//! lock, fails to take it again, releases it, and prints what a scrape would
//! see. In a service, serve the same text on `/metrics` instead: with the
//! exporter's `http-listener` feature,
//! `PrometheusBuilder::new().with_http_listener(([0, 0, 0, 0], 9000)).install()`.

use distlock::{AcquireOptions, LockKey, Wait};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use std::time::Duration;

/// Bucket bounds in seconds for both histograms: lock waits and holds range
/// from a round trip (sub-millisecond) to a long job (minutes).
const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0,
];

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without buckets the exporter renders histograms as summaries, which
    // cannot be aggregated across instances.
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Prefix("distlock_".into()), BUCKETS)?
        .install_recorder()?;

    let lock = distlock::connect("memory://example").await?;
    let key = LockKey::new("reports/nightly")?;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let lease = lock.acquire(&key, &opts).await?;
    let busy = lock.try_acquire(&key, &opts.clone().wait(Wait::No)).await?;
    assert!(busy.is_none(), "a second acquire of a held key is busy");
    lease.release().await?;

    print!("{}", prometheus.render());
    Ok(())
}
