//! Latency samples and their percentiles.

use std::time::Duration;

/// Every latency of one bench phase, in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    nanos: Vec<u64>,
    sorted: bool,
}

impl Samples {
    pub fn push(&mut self, latency: Duration) {
        self.nanos
            .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
        self.sorted = false;
    }

    pub fn extend(&mut self, other: Samples) {
        self.nanos.extend(other.nanos);
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    fn sort(&mut self) {
        if !self.sorted {
            self.nanos.sort_unstable();
            self.sorted = true;
        }
    }

    /// The `p`-th percentile (0.0 ..= 100.0), nearest-rank; `None` without samples.
    pub fn percentile(&mut self, p: f64) -> Option<Duration> {
        self.sort();
        let n = self.nanos.len();
        if n == 0 {
            return None;
        }
        // Nearest rank: the smallest sample with at least p% of samples at or below it.
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        let index = rank.clamp(1, n) - 1;
        self.nanos.get(index).map(|&ns| Duration::from_nanos(ns))
    }

    /// (percentile, latency) pairs for a latency-by-percentile chart.
    pub fn curve(&mut self, points: &[f64]) -> Vec<(f64, Duration)> {
        points
            .iter()
            .filter_map(|&p| self.percentile(p).map(|d| (p, d)))
            .collect()
    }
}

/// One phase's summary.
#[derive(Debug, Clone)]
pub struct Summary {
    pub ops: usize,
    pub per_second: f64,
    pub p50: Option<Duration>,
    pub p90: Option<Duration>,
    pub p99: Option<Duration>,
}

impl Summary {
    pub fn of(samples: &mut Samples, elapsed: Duration) -> Self {
        let secs = elapsed.as_secs_f64();
        Summary {
            ops: samples.len(),
            per_second: if secs > 0.0 {
                samples.len() as f64 / secs
            } else {
                0.0
            },
            p50: samples.percentile(50.0),
            p90: samples.percentile(90.0),
            p99: samples.percentile(99.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples = Samples::default();
        for ms in 1..=100 {
            samples.push(Duration::from_millis(ms));
        }
        assert_eq!(samples.percentile(50.0), Some(Duration::from_millis(50)));
        assert_eq!(samples.percentile(99.0), Some(Duration::from_millis(99)));
        assert_eq!(samples.percentile(100.0), Some(Duration::from_millis(100)));
        assert_eq!(samples.percentile(0.0), Some(Duration::from_millis(1)));
        assert_eq!(Samples::default().percentile(50.0), None);
    }
}
