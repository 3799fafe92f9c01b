//! Parsers and shared options for every subcommand. Bad values are refused here,
//! before anything connects, with a message that says what to write instead.

use crate::exit::Failure;
use distlock::{DynLock, LockKey};
use std::time::Duration;

/// `--url`, falling back to `DISTLOCK_URL`; clap never prints its value.
#[derive(Debug, clap::Args)]
pub struct UrlArg {
    #[arg(
        long,
        env = "DISTLOCK_URL",
        hide_env_values = true,
        value_name = "URL",
        help = url_help()
    )]
    pub url: Option<String>,
}

/// `--url`'s help: an example URL of every backend this build has.
fn url_help() -> String {
    let examples: Vec<&str> = distlock::BackendKind::all()
        .filter_map(distlock::BackendKind::registration)
        .map(|registration| registration.example())
        .collect();
    format!(
        "Backend URL, for example {}. Falls back to $DISTLOCK_URL.",
        examples.join(", ")
    )
}

/// The backends of this build that also store fenced data, as `memory://…,
/// redis://… or …` (from the registry: a new store is listed with no edit here).
pub fn fence_stores() -> String {
    let stores: Vec<String> = distlock::BackendKind::all()
        .filter_map(distlock::BackendKind::registration)
        .filter(|registration| registration.has_fence())
        .filter_map(|registration| registration.schemes().first())
        .map(|scheme| format!("{scheme}://…"))
        .collect();
    match stores.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

impl UrlArg {
    /// The URL, or a usage error naming both ways to give one.
    pub fn require(&self) -> Result<&str, Failure> {
        match self.url.as_deref().map(str::trim) {
            Some(url) if !url.is_empty() => {
                distlock::BackendKind::from_url(url)?;
                Ok(url)
            }
            _ => Err(Failure::usage(
                "no backend URL: pass --url URL or set DISTLOCK_URL \
                 (for example --url redis://127.0.0.1:6379, or memory://demo to try it out)",
            )),
        }
    }
}

/// A lock name, validated as the library does. A custom parser rather than a
/// plain function, because clap quotes a refused value whole in its message and
/// a key may be 100 KB long: the library's error names the problem and the length
/// instead.
#[derive(Debug, Clone, Copy)]
pub struct KeyParser;

impl clap::builder::TypedValueParser for KeyParser {
    type Value = LockKey;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<LockKey, clap::Error> {
        let refused = |why: String| {
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("invalid value for '--key': {why}\n"),
            )
        };
        let raw = value
            .to_str()
            .ok_or_else(|| refused("the key is not valid UTF-8".into()))?;
        LockKey::new(raw).map_err(|e| refused(e.to_string()))
    }
}

/// A duration written as in lock URLs: `250ms`, `30s`, `5m`, `1h`.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    distlock::toolkit::parse_duration(raw).map_err(|why| format!("`{raw}` {why}"))
}

/// A duration that must be above zero (ttls, bench durations).
pub fn parse_positive_duration(raw: &str) -> Result<Duration, String> {
    let duration = parse_duration(raw)?;
    if duration.is_zero() {
        return Err(format!(
            "`{raw}` is zero; give a duration above zero, such as 30s"
        ));
    }
    Ok(duration)
}

/// Shows a duration compactly, in the syntax `parse_duration` reads (`1.2ms`,
/// `350µs`, `2.5s`, `10s`).
pub fn show(duration: Duration) -> String {
    let micros = duration.as_secs_f64() * 1e6;
    let (value, unit) = if micros < 1_000.0 {
        (format!("{micros:.0}"), "µs")
    } else if micros < 1_000_000.0 {
        (format!("{:.1}", micros / 1e3), "ms")
    } else {
        (format!("{:.2}", micros / 1e6), "s")
    };
    let value = match value.contains('.') {
        true => value.trim_end_matches('0').trim_end_matches('.'),
        false => &value,
    };
    format!("{value}{unit}")
}

/// The shortest ttl at least `wanted` that `caps` accepts (at least the minimum,
/// and a whole multiple of the granularity).
pub fn short_ttl(caps: &distlock::Capabilities, wanted: Duration) -> Duration {
    let ttl = wanted.max(caps.min_ttl);
    let step = caps.ttl_granularity.as_nanos().max(1);
    let nanos = ttl.as_nanos().div_ceil(step) * step;
    u64::try_from(nanos).map_or(ttl, Duration::from_nanos)
}

/// A random prefix for the keys of one run, so runs never meet each other's locks.
pub fn run_prefix(tool: &str) -> String {
    format!("distlock-{tool}/{:08x}", rand::random::<u32>())
}

/// Says that `lock` cannot be inspected, so what needs it cannot be done.
pub fn no_inspect(lock: &DynLock) -> String {
    format!(
        "the {} client offers no inspection (it does not implement Inspect), \
         so it cannot delete a holder, ping the server or list deployment pitfalls",
        lock.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::{Capabilities, FencingGuarantee, TokenDurability, Wake};

    #[test]
    fn short_ttl_respects_minimum_and_granularity() {
        let caps = Capabilities::new()
            .fencing(FencingGuarantee::Strict)
            .fifo(true)
            .wake(Wake::Push)
            .token_durability(TokenDurability::Persisted)
            .min_ttl(Duration::from_secs(1))
            .ttl_granularity(Duration::from_secs(1))
            .primitives(distlock::Primitives::ALL);
        assert_eq!(
            short_ttl(&caps, Duration::from_millis(500)),
            Duration::from_secs(1)
        );
        assert_eq!(
            short_ttl(&caps, Duration::from_millis(1500)),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn shown_durations_read_back() {
        for (duration, shown) in [
            (Duration::from_micros(350), "350µs"),
            (Duration::from_micros(1_300), "1.3ms"),
            (Duration::from_millis(2_500), "2.5s"),
            (Duration::from_secs(10), "10s"),
        ] {
            assert_eq!(show(duration), shown);
            assert!(parse_duration(&show(duration)).is_ok(), "{shown}");
        }
    }

    #[test]
    fn zero_and_garbage_durations_are_refused() {
        assert!(parse_positive_duration("0s").unwrap_err().contains("zero"));
        assert!(parse_duration("soon").unwrap_err().contains("30s"));
        assert!(parse_duration("90").unwrap_err().contains("90s"));
        assert_eq!(parse_duration("1.5m").unwrap(), Duration::from_secs(90));
    }
}
