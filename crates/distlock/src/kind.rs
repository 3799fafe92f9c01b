//! `BackendKind`: the one table of backends the facade knows, read from a URL's
//! scheme.

use distlock_core::LockError;
use std::fmt;

/// A backend `connect` can reach, with the URL schemes that select it and the
/// Cargo feature that compiles it in.
///
/// ```
/// use distlock::BackendKind;
/// assert_eq!(BackendKind::from_scheme("ZK"), Some(BackendKind::ZooKeeper));
/// assert_eq!(BackendKind::ZooKeeper.schemes(), ["zk", "zookeeper"]);
/// assert_eq!(BackendKind::Memory.feature(), None);
/// assert!(BackendKind::Memory.enabled());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// The in-process store: `memory://NAME`, always compiled in.
    Memory,
    /// One Redis node: `redis://`, `rediss://` (TLS).
    Redis,
    /// Redlock over independent Redis nodes: `redlock://`, `redlocks://` (TLS).
    Redlock,
    /// etcd: `etcd://`, `etcds://` (TLS, with the `tls` feature).
    Etcd,
    /// ZooKeeper: `zk://`, `zookeeper://` (TLS with `?tls=true&ca=…` and the
    /// `tls` feature).
    ZooKeeper,
    /// MySQL 8 or MariaDB 10.6+: `mysql://`, `mariadb://`.
    MySql,
    /// PostgreSQL 14+: `postgres://`, `postgresql://`.
    Postgres,
}

impl BackendKind {
    /// Every backend, enabled in this build or not.
    pub const ALL: [BackendKind; 7] = [
        BackendKind::Memory,
        BackendKind::Redis,
        BackendKind::Redlock,
        BackendKind::Etcd,
        BackendKind::ZooKeeper,
        BackendKind::MySql,
        BackendKind::Postgres,
    ];

    /// The backend's short name, as its clients report it in
    /// [`DistributedLock::name`](distlock_core::DistributedLock::name).
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Memory => "memory",
            BackendKind::Redis => "redis",
            BackendKind::Redlock => "redlock",
            BackendKind::Etcd => "etcd",
            BackendKind::ZooKeeper => "zookeeper",
            BackendKind::MySql => "mysql",
            BackendKind::Postgres => "postgres",
        }
    }

    /// The URL schemes (before `://`, lowercase) that select this backend.
    pub const fn schemes(self) -> &'static [&'static str] {
        match self {
            BackendKind::Memory => &["memory"],
            BackendKind::Redis => &[
                "redis",
                "rediss",
                "redis+sentinel",
                "rediss+sentinel",
                "redis+cluster",
                "rediss+cluster",
            ],
            BackendKind::Redlock => &["redlock", "redlocks"],
            BackendKind::Etcd => &["etcd", "etcds"],
            BackendKind::ZooKeeper => &["zk", "zookeeper"],
            BackendKind::MySql => &["mysql", "mariadb"],
            BackendKind::Postgres => &["postgres", "postgresql"],
        }
    }

    /// The Cargo feature of the `distlock` crate that compiles the backend in;
    /// `None` for the always-present in-memory backend.
    pub const fn feature(self) -> Option<&'static str> {
        match self {
            BackendKind::Memory => None,
            BackendKind::Redis => Some("redis"),
            BackendKind::Redlock => Some("redlock"),
            BackendKind::Etcd => Some("etcd"),
            BackendKind::ZooKeeper => Some("zookeeper"),
            BackendKind::MySql => Some("mysql"),
            BackendKind::Postgres => Some("postgres"),
        }
    }

    /// Whether this build has the backend's feature on.
    pub const fn enabled(self) -> bool {
        match self {
            BackendKind::Memory => true,
            BackendKind::Redis => cfg!(feature = "redis"),
            BackendKind::Redlock => cfg!(feature = "redlock"),
            BackendKind::Etcd => cfg!(feature = "etcd"),
            BackendKind::ZooKeeper => cfg!(feature = "zookeeper"),
            BackendKind::MySql => cfg!(feature = "mysql"),
            BackendKind::Postgres => cfg!(feature = "postgres"),
        }
    }

    /// An example URL, for help texts.
    pub const fn example(self) -> &'static str {
        match self {
            BackendKind::Memory => "memory://NAME",
            BackendKind::Redis => "redis://[:PASSWORD@]HOST:6379/0",
            BackendKind::Redlock => "redlock://H1:6379,H2:6379,H3:6379",
            BackendKind::Etcd => "etcd://H1:2379,H2:2379/NAMESPACE",
            BackendKind::ZooKeeper => "zk://H1:2181,H2:2181/CHROOT",
            BackendKind::MySql => "mysql://USER:PASSWORD@HOST:3306/DB?strategy=version_cas",
            BackendKind::Postgres => "postgres://USER:PASSWORD@HOST:5432/DB?strategy=version_cas",
        }
    }

    /// The backend `scheme` selects (any case), whether enabled or not.
    pub fn from_scheme(scheme: &str) -> Option<BackendKind> {
        let scheme = scheme.to_ascii_lowercase();
        BackendKind::ALL
            .into_iter()
            .find(|kind| kind.schemes().contains(&scheme.as_str()))
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
        if kind.enabled() {
            Ok(kind)
        } else {
            Err(kind.disabled(scheme))
        }
    }

    /// The error for a URL of this backend in a build without its feature.
    pub(crate) fn disabled(self, scheme: &str) -> LockError {
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

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn url_error(reason: String) -> LockError {
    LockError::config("distlock", reason)
}

fn known_schemes() -> String {
    BackendKind::ALL
        .iter()
        .flat_map(|kind| kind.schemes())
        .map(|scheme| format!("{scheme}://"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_selects_one_backend() {
        for kind in BackendKind::ALL {
            assert_eq!(kind.feature().is_none(), kind == BackendKind::Memory);
            for scheme in kind.schemes() {
                assert_eq!(BackendKind::from_scheme(scheme), Some(kind), "{scheme}");
                assert_eq!(
                    BackendKind::from_scheme(&scheme.to_ascii_uppercase()),
                    Some(kind)
                );
            }
            let example_scheme = kind.example().split("://").next().unwrap_or_default();
            assert!(kind.schemes().contains(&example_scheme), "{kind}");
        }
        assert_eq!(BackendKind::from_scheme("cockroach"), None);
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
