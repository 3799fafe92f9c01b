//! `connect(url)`: one entry point for every backend, chosen by URL scheme.

use crate::kind::BackendKind;
use crate::redact::{scrub, url_secrets};
use distlock_core::{DynLock, LockError};

/// Connects to the backend named by `url`'s scheme and returns a lock client.
///
/// | scheme | backend | feature |
/// |---|---|---|
/// | `memory://NAME` | in-process [`crate::memory`] | always on |
/// | `redis://`, `rediss://` (TLS) | one Redis node | `redis` |
/// | `redis+sentinel://s1,s2,s3/MASTER`, `rediss+sentinel://` | the Redis primary Sentinel names, followed across failovers | `redis` |
/// | `redis+cluster://n1,n2,n3`, `rediss+cluster://` | a Redis Cluster, each lock on its slot's primary | `redis` |
/// | `redlock://h1,h2,h3`, `redlocks://` (TLS) | Redlock over N independent Redis nodes | `redlock` |
/// | `etcd://h1,h2/namespace`, `etcds://` (TLS) | etcd | `etcd` |
/// | `zk://h1,h2/chroot`, `zookeeper://` (`?tls=true&ca=…`: TLS) | ZooKeeper | `zookeeper` |
/// | `mysql://user:pass@host/db?strategy=…`, `mariadb://` (`ssl-mode`, `ssl-ca`: TLS) | MySQL 8 / MariaDB 10.6+ | `mysql` |
/// | `postgres://user:pass@host/db?strategy=…`, `postgresql://` (`sslmode`, `sslrootcert`: TLS) | PostgreSQL 14+ | `postgres` |
///
/// TLS to etcd, ZooKeeper, MySQL and PostgreSQL also needs the `tls` feature (`rediss://`
/// and `redlocks://` need only `redis` or `redlock`); without it such a URL is a
/// [`LockError::Config`] naming the feature.
///
/// Every call returns an independent client (its own connections and reentrancy
/// scope). Each adapter documents its URL parameters (`namespace`, timeouts,
/// `strategy`, TLS files...) on its config's `from_url`. `memory://NAME` clients of one process share one in-process store per
/// `NAME`, so two `connect("memory://jobs")` calls contend like two processes on a
/// real server, while `memory://a` and `memory://b` never meet. That store lives
/// until the process exits.
///
/// # Errors
///
/// [`LockError::Config`] for a URL that does not parse, an unknown scheme (the
/// message lists the known ones) or a scheme whose feature this build lacks (the
/// message names the feature to enable); the adapter's own errors otherwise
/// ([`LockError::Unavailable`] when the server cannot be reached). No error shows
/// a password from the URL.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use distlock::{AcquireOptions, LockKey};
/// let lock = distlock::connect("memory://docs").await?;
/// let lease = lock.acquire(&LockKey::new("job")?, &AcquireOptions::new()).await?;
/// lease.release().await?;
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<DynLock, LockError> {
    let (kind, registration) = BackendKind::from_url_with_registration(url)?;
    let url = url.trim();
    registration
        .connect(url)
        .await
        .map_err(|e| scrub(e, &url_secrets(kind.name(), url)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::{AcquireOptions, LockKey, Renewal, Wait};

    fn config_reason(result: Result<DynLock, LockError>) -> String {
        match result {
            Err(LockError::Config { reason, .. }) => reason,
            other => panic!("expected a Config error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn unknown_scheme_lists_the_known_ones() {
        let reason = config_reason(connect("cockroach://db/x").await);
        assert!(reason.contains("unknown scheme `cockroach://`"), "{reason}");
        assert!(
            reason.contains("redlock://")
                && reason.contains("zk://")
                && reason.contains("postgres://"),
            "{reason}"
        );
        let reason = config_reason(connect("localhost:6379").await);
        assert!(reason.contains("SCHEME://"), "{reason}");
        assert!(config_reason(connect("").await).contains("empty"));
    }

    #[tokio::test]
    async fn memory_clients_of_one_name_contend_and_other_names_do_not() {
        let key = LockKey::new("shared").unwrap();
        let opts = AcquireOptions::new();
        let a = connect("memory://contend").await.unwrap();
        let b = connect("MEMORY://contend/").await.unwrap();
        let other = connect("memory://contend-other").await.unwrap();
        let lease = a.acquire(&key, &opts).await.unwrap();
        assert!(b.try_acquire(&key, &opts).await.unwrap().is_none());
        assert!(other.try_acquire(&key, &opts).await.unwrap().is_some());
        lease.release().await.unwrap();
        assert!(b.try_acquire(&key, &opts).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn memory_url_with_path_or_credentials_is_rejected() {
        for url in ["memory://a/b", "memory://u:p@a"] {
            let reason = config_reason(connect(url).await);
            assert!(reason.contains("memory://NAME"), "{url}: {reason}");
            assert!(!reason.contains(":p@"), "{reason}");
        }
        let reason = config_reason(connect("memory://a?x=1").await);
        assert!(reason.contains("unknown URL parameter `x`"), "{reason}");
        assert!(reason.contains("ttl, wait"), "{reason}");
        // A fenced store takes no lock defaults.
        let fence = crate::connect_fence("memory://a?ttl=5s").await;
        assert!(matches!(fence, Err(LockError::Config { .. })), "{fence:?}");
    }

    #[tokio::test]
    async fn url_acquire_defaults_are_the_locks_default_options() {
        let lock = connect("memory://defaults?ttl=5s&wait=250ms&renewal=manual&max_hold=1m")
            .await
            .unwrap();
        let defaults = lock.default_options();
        assert_eq!(defaults.get_ttl(), std::time::Duration::from_secs(5));
        assert_eq!(
            defaults.get_wait(),
            Wait::For(std::time::Duration::from_millis(250))
        );
        assert_eq!(defaults.get_renewal(), Renewal::Manual);
        assert_eq!(
            defaults.get_max_hold(),
            Some(std::time::Duration::from_secs(60))
        );
        let reason = config_reason(connect("memory://defaults?wait=soon").await);
        assert!(reason.contains("wait=soon"), "{reason}");
        match connect("memory://defaults?renewal=5s&ttl=2s").await {
            Err(LockError::InvalidOptions { reason }) => {
                assert!(reason.contains("renew interval"), "{reason}")
            }
            other => panic!("expected InvalidOptions, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn disabled_features_are_named() {
        let disabled = BackendKind::all().filter(|k| !k.enabled());
        for scheme in disabled.flat_map(BackendKind::schemes) {
            let url = format!("{scheme}://u:topsecret@h:1");
            let reason = config_reason(connect(&url).await);
            let kind = BackendKind::from_scheme(scheme).unwrap();
            let feature = kind.feature().unwrap();
            assert!(
                reason.contains(&format!("features = [\"{feature}\"]")),
                "{reason}"
            );
            assert!(!reason.contains("topsecret"), "{reason}");
        }
    }
}
