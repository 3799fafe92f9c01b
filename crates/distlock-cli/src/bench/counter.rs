//! The server's own request counter around a bench phase: how many requests
//! one operation cost the server, read from the backend's counters
//! (`Inspect::server_requests`) rather than counted by the client.

use super::Phase;
use super::report::Line;
use distlock::toolkit::Inspect;

/// The server's own request counter, and what one reading of it adds to it.
pub(super) struct Counter<'a> {
    inspect: &'a dyn Inspect,
    per_read: u64,
}

impl<'a> Counter<'a> {
    /// Reads the counter twice in a row to learn what a reading costs; `None`
    /// (said once on stderr if it failed) when the backend cannot tell.
    pub(super) async fn start(inspect: Option<&'a dyn Inspect>) -> Option<Counter<'a>> {
        let inspect = inspect?;
        let read = || async {
            match inspect.server_requests().await {
                Ok(count) => count,
                Err(e) => {
                    eprintln!("distlock: no request counts: cannot read the server's counter: {e}");
                    None
                }
            }
        };
        let first = read().await?;
        let second = read().await?;
        Some(Counter {
            inspect,
            per_read: second.saturating_sub(first),
        })
    }

    async fn read(&self) -> Option<u64> {
        self.inspect.server_requests().await.ok().flatten()
    }

    /// Runs `phase` between two readings: the phase, and the server requests
    /// per operation it cost (the second reading's own cost taken off).
    pub(super) async fn around(counter: Option<&Self>, phase: impl Future<Output = Phase>) -> Line {
        let before = match counter {
            Some(counter) => counter.read().await,
            None => None,
        };
        let phase = phase.await;
        let after = match (counter, before) {
            (Some(counter), Some(_)) => counter.read().await,
            _ => None,
        };
        let requests = match (counter, before, after) {
            (Some(counter), Some(before), Some(after)) if phase.summary.ops > 0 => {
                let grew = after
                    .saturating_sub(before)
                    .saturating_sub(counter.per_read);
                Some(grew as f64 / phase.summary.ops as f64)
            }
            _ => None,
        };
        Line { phase, requests }
    }
}
