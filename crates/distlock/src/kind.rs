//! `BackendKind`: the one table of backends the facade knows, read from a URL's
//! scheme. Each enabled backend's knowledge (how a URL connects, whether it
//! is also a fenced store) is its crate's [`Registration`]; this table only
//! adds the Cargo feature and, from core's [`schemes`], the schemes that name
//! a backend whose feature is off.

use distlock_core::LockError;
use distlock_core::adapter::{Registration, schemes};
use std::fmt;

/// A backend `connect` can reach, with the URL schemes that select it and the
/// Cargo feature that compiles it in.
///
/// ```
/// use distlock::BackendKind;
/// let zk = BackendKind::from_scheme("ZK").unwrap();
/// assert_eq!(zk.name(), "zookeeper");
/// assert_eq!(zk.schemes(), ["zk", "zookeeper"]);
/// let memory = BackendKind::from_scheme("memory").unwrap();
/// assert_eq!(memory.feature(), None);
/// assert!(memory.enabled());
/// ```
#[derive(Clone, Copy)]
pub struct BackendKind(&'static Known);

/// One row of [`KNOWN`].
struct Known {
    feature: Option<&'static str>,
    name: &'static str,
    schemes: &'static [&'static str],
    /// `None` in a build without the feature.
    registration: Option<Registration>,
}

/// A backend behind the facade's Cargo feature `$feature`: its name is written
/// here too, and its schemes come from core rather than its crate, so that a URL
/// of a backend this build lacks names the feature to enable; a test checks
/// they match the registration.
macro_rules! known {
    ($feature:literal, $name:literal, $schemes:expr, $registration:expr) => {
        Known {
            feature: Some($feature),
            name: $name,
            schemes: $schemes,
            #[cfg(feature = $feature)]
            registration: Some($registration),
            #[cfg(not(feature = $feature))]
            registration: None,
        }
    };
}

/// Every backend, enabled in this build or not. Adding a backend is one line
/// here (and its feature in Cargo.toml).
static KNOWN: [Known; 8] = [
    Known {
        feature: None,
        name: "memory",
        schemes: &["memory"],
        registration: Some(crate::in_process::MEMORY),
    },
    known!("redis", "redis", schemes::REDIS, distlock_redis::REDIS),
    known!(
        "redlock",
        "redlock",
        schemes::REDLOCK,
        distlock_redis::REDLOCK
    ),
    known!("etcd", "etcd", schemes::ETCD, distlock_etcd::ETCD),
    known!(
        "zookeeper",
        "zookeeper",
        schemes::ZOOKEEPER,
        distlock_zookeeper::ZOOKEEPER
    ),
    known!("mysql", "mysql", schemes::MYSQL, distlock_mysql::MYSQL),
    known!(
        "postgres",
        "postgres",
        schemes::POSTGRES,
        distlock_postgres::POSTGRES
    ),
    known!("nats", "nats", schemes::NATS, distlock_nats::NATS),
];

impl BackendKind {
    /// Every backend, enabled in this build or not.
    pub fn all() -> impl Iterator<Item = BackendKind> {
        KNOWN.iter().map(BackendKind)
    }

    /// The backend's short name, as its clients report it in
    /// [`DistributedLock::name`](distlock_core::DistributedLock::name).
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// The URL schemes (before `://`, lowercase) that select this backend.
    pub fn schemes(self) -> &'static [&'static str] {
        self.0.schemes
    }

    /// The Cargo feature of the `distlock` crate that compiles the backend in;
    /// `None` for the always-present in-memory backend.
    pub fn feature(self) -> Option<&'static str> {
        self.0.feature
    }

    /// Whether this build has the backend's feature on.
    pub fn enabled(self) -> bool {
        self.0.registration.is_some()
    }

    /// The backend's own description (how a URL connects, an example URL,
    /// whether it is a fenced store), when this build has it.
    pub fn registration(self) -> Option<&'static Registration> {
        self.0.registration.as_ref()
    }

    /// The backend `scheme` selects (any case), whether enabled or not.
    pub fn from_scheme(scheme: &str) -> Option<BackendKind> {
        let scheme = scheme.to_ascii_lowercase();
        BackendKind::all().find(|kind| kind.schemes().contains(&scheme.as_str()))
    }

    /// The backend `url` selects, if this build can connect to it.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for an empty URL, one without `SCHEME://` or with an
    /// unknown scheme (the message lists the known ones), and for a backend
    /// whose feature is off (the message names the feature to enable). The
    /// rest of the URL is not read.
    pub fn from_url(url: &str) -> Result<BackendKind, LockError> {
        Ok(BackendKind::from_url_with_registration(url)?.0)
    }

    /// [`BackendKind::from_url`], with the registration of the enabled backend.
    pub(crate) fn from_url_with_registration(
        url: &str,
    ) -> Result<(BackendKind, &'static Registration), LockError> {
        let url = url.trim();
        if url.is_empty() {
            return Err(url_error(format!(
                "the lock URL is empty; use one of {}",
                known_schemes()
            )));
        }
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(url_error(format!(
                "a lock URL starts with SCHEME:// (for example memory://demo); use one of {}",
                known_schemes()
            )));
        };
        let Some(kind) = BackendKind::from_scheme(scheme) else {
            // Echo the scheme only when it cannot be part of a secret.
            let shown = if scheme.len() <= 20
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            {
                format!("unknown scheme `{}://`", scheme.to_ascii_lowercase())
            } else {
                "unknown scheme".to_owned()
            };
            return Err(url_error(format!(
                "{shown}; use one of {}",
                known_schemes()
            )));
        };
        match kind.registration() {
            Some(registration) => Ok((kind, registration)),
            None => Err(kind.disabled(scheme)),
        }
    }

    /// The error for a URL of this backend in a build without its feature.
    fn disabled(self, scheme: &str) -> LockError {
        let feature = self.feature().unwrap_or_default();
        LockError::config(
            self.name(),
            format!(
                "`{}://` URLs need the `{feature}` feature of the distlock crate, which this build lacks; \
                 enable it with `distlock = {{ version = \"{}\", features = [\"{feature}\"] }}` \
                 (or `features = [\"full\"]` for every backend)",
                scheme.to_ascii_lowercase(),
                env!("CARGO_PKG_VERSION"),
            ),
        )
    }
}

impl PartialEq for BackendKind {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for BackendKind {}

impl fmt::Debug for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BackendKind").field(&self.name()).finish()
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn url_error(reason: String) -> LockError {
    LockError::config("distlock", reason)
}

fn known_schemes() -> String {
    BackendKind::all()
        .flat_map(BackendKind::schemes)
        .map(|scheme| format!("{scheme}://"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_selects_one_backend() {
        for kind in BackendKind::all() {
            assert_eq!(kind.feature().is_none(), kind.name() == "memory");
            for scheme in kind.schemes() {
                assert_eq!(BackendKind::from_scheme(scheme), Some(kind), "{scheme}");
                assert_eq!(
                    BackendKind::from_scheme(&scheme.to_ascii_uppercase()),
                    Some(kind)
                );
            }
        }
        assert_eq!(BackendKind::from_scheme("cockroach"), None);
    }

    /// The table's copy of a backend's name and schemes (for builds without
    /// it) is the backend's own.
    #[test]
    fn the_table_agrees_with_each_registration() {
        for kind in BackendKind::all() {
            let Some(registration) = kind.registration() else {
                continue;
            };
            assert_eq!(registration.name(), kind.name());
            assert_eq!(registration.schemes(), kind.schemes(), "{kind}");
            let example_scheme = registration.example().split("://").next();
            assert!(
                kind.schemes().contains(&example_scheme.unwrap_or_default()),
                "{kind}"
            );
        }
    }

    #[test]
    fn unknown_schemes_that_may_hold_a_secret_are_not_echoed() {
        let reason = |url: &str| match BackendKind::from_url(url) {
            Err(LockError::Config { reason, .. }) => reason,
            other => panic!("expected a Config error, got {other:?}"),
        };
        assert!(reason("Cockroach://db").contains("unknown scheme `cockroach://`"));
        let shown = reason("user:hunter2@h://x");
        assert!(
            shown.contains("unknown scheme;") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
