//! `distlock bench --names N`: bounded state, measured. Locks N distinct names
//! once each (every client takes the next unused name), then prints what the
//! server uses (`Inspect::server_memory`) and how many per-name records it
//! keeps under the run's prefix (`Inspect::state_records`) before, at the peak
//! and once `state_ttl` has passed, so a change that leaks per-name state
//! shows as an "after" well above "before".

use crate::args::{UrlArg, no_inspect, parse_duration, run_prefix, short_ttl, show};
use crate::exit::{self, Failure};
use distlock::toolkit::{DEFAULT_STATE_TTL, Inspect};
use distlock::{AcquireOptions, DynLock, LockError, LockKey, Renewal};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How often the server is sampled while names are locked, and while
/// waiting for their collection.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Beyond the lease's ttl and `state_ttl`, how long collection may lag before
/// the benchmark stops waiting for it.
const SLACK: Duration = Duration::from_secs(30);

/// The server's side at one moment: its memory (when it offers a number) and
/// the run's state records (when it can count them).
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    memory: Option<u64>,
    records: Option<usize>,
}

struct Server<'a> {
    inspect: &'a dyn Inspect,
    prefix: String,
    memory_name: Option<&'static str>,
}

impl Server<'_> {
    /// The memory alone: what is sampled while names are locked, as counting
    /// the records may scan the whole keyspace.
    async fn memory(&mut self) -> Result<Sample, LockError> {
        let memory = self.inspect.server_memory().await?;
        self.memory_name = memory.map(|(name, _)| name);
        let memory = memory.map(|(_, bytes)| bytes);
        Ok(Sample {
            memory,
            records: None,
        })
    }

    /// The memory and the records; a count that fails is reported and left out.
    async fn sample(&mut self) -> Result<Sample, LockError> {
        let memory = self.memory().await?.memory;
        let records = match self.inspect.state_records(&self.prefix).await {
            Ok(records) => records,
            Err(e) => {
                eprintln!("distlock: state records not counted: {e}");
                None
            }
        };
        Ok(Sample { memory, records })
    }
}

/// The `state_ttl` the URL gives, or the default every scheme has.
fn state_ttl_of(url: &str) -> Result<Duration, Failure> {
    let query = url.split_once('?').map_or("", |(_, query)| query);
    let given = query.split('&').find_map(|p| p.strip_prefix("state_ttl="));
    given.map_or(Ok(DEFAULT_STATE_TTL), |text| {
        parse_duration(text).map_err(|e| Failure::usage(format!("state_ttl in the URL: {e}")))
    })
}

pub async fn run(url: &UrlArg, count: u64, clients: Vec<DynLock>) -> Result<u8, Failure> {
    let text = url.require()?;
    let state_ttl = state_ttl_of(text)?;
    let first = clients.first().ok_or_else(|| Failure::usage("no client"))?;
    let inspect = first
        .inspect()
        .ok_or_else(|| Failure::new(exit::FAILURE, no_inspect(first)))?;
    let ttl = short_ttl(&first.capabilities(), Duration::from_secs(1));
    let prefix = run_prefix("bench-names");
    println!(
        "distlock bench --names: {count} names on {} at {} (ttl {}, state_ttl {}, {} clients, \
         names under {prefix}/)",
        first.name(),
        distlock::redact_url(text),
        show(ttl),
        show(state_ttl),
        clients.len()
    );
    let mut server = Server {
        inspect,
        prefix: prefix.clone(),
        memory_name: None,
    };
    let before = server.sample().await?;
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let opts = AcquireOptions::new().ttl(ttl).renewal(Renewal::Manual);
    let mut tasks = JoinSet::new();
    for lock in &clients {
        let (lock, next) = (lock.clone(), next.clone());
        let (opts, prefix) = (opts.clone(), prefix.clone());
        tasks.spawn(async move {
            let (mut errors, mut first_error) = (0_u64, None);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return (errors, first_error);
                }
                let cycle = async {
                    let key = LockKey::new(format!("{prefix}/{i}"))?;
                    lock.acquire(&key, &opts).await?.release().await
                };
                if let Err(e) = cycle.await {
                    errors += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
        });
    }
    let mut peak = before;
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    let (mut errors, mut first_error) = (0, None);
    while !tasks.is_empty() {
        tokio::select! {
            joined = tasks.join_next() => {
                if let Some(Ok((failed, first))) = joined {
                    errors += failed;
                    first_error = first_error.or(first);
                }
            }
            _ = ticks.tick() => peak = higher(peak, server.memory().await?),
        }
    }
    let locked = started.elapsed();
    peak = higher(peak, server.sample().await?);
    let done = next.load(Ordering::Relaxed).min(count);
    println!(
        "locked {done} names in {} ({:.0}/s), {errors} errors",
        show(locked),
        done as f64 / locked.as_secs_f64().max(1e-9)
    );
    if let Some(error) = first_error {
        eprintln!("distlock: first error: {error}");
    }
    if before.records.is_none() {
        // Nothing to wait for: without a count, "after" would only be a guess.
        print_table(server.memory_name, [("before", before), ("peak", peak)]);
        println!(
            "{} cannot count its state records: nothing measured after state_ttl",
            first.name()
        );
        return Ok(if done > errors {
            exit::OK
        } else {
            exit::FAILURE
        });
    }
    eprintln!(
        "distlock: waiting for collection, up to {} (ttl + state_ttl + {})",
        show(ttl + state_ttl + SLACK),
        show(SLACK)
    );
    let ended = Instant::now();
    let deadline = ended + ttl + state_ttl + SLACK;
    let after = loop {
        let now = server.sample().await?;
        if now.records == Some(0) || Instant::now() >= deadline {
            break now;
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    };
    print_table(
        server.memory_name,
        [
            ("before", before),
            ("peak", peak),
            ("after state_ttl", after),
        ],
    );
    match after.records {
        Some(0) => println!(
            "no state record left {} after the last release",
            show(ended.elapsed())
        ),
        _ => println!(
            "stopped waiting for collection after {}",
            show(ended.elapsed())
        ),
    }
    if let (Some(start), Some(end)) = (before.memory, after.memory) {
        println!(
            "after is {:.1} % of before",
            end as f64 * 100.0 / start.max(1) as f64
        );
    }
    Ok(if done > errors {
        exit::OK
    } else {
        exit::FAILURE
    })
}

/// The higher of two samples, field by field.
fn higher(a: Sample, b: Sample) -> Sample {
    Sample {
        memory: a.memory.max(b.memory),
        records: a.records.max(b.records),
    }
}

fn print_table<const N: usize>(memory_name: Option<&str>, rows: [(&str, Sample); N]) {
    let memory_name = memory_name.unwrap_or("memory");
    println!("{:<16} {memory_name:>16} {:>14}", "", "state records");
    for (label, sample) in rows {
        let memory = sample.memory.map_or("n/a".to_owned(), mib);
        let records = sample.records.map_or("n/a".to_owned(), |n| n.to_string());
        println!("{label:<16} {memory:>16} {records:>14}");
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_ttl_comes_from_the_url_or_the_default() {
        assert_eq!(state_ttl_of("redis://h").ok(), Some(DEFAULT_STATE_TTL));
        let given = state_ttl_of("redis://h?timeout=1s&state_ttl=5s").ok();
        assert_eq!(given, Some(Duration::from_secs(5)));
        assert!(state_ttl_of("redis://h?state_ttl=soon").is_err());
    }
}
