//! How a backend crate describes itself to everything that lists backends.
//!
//! Each adapter crate exports one [`Registration`] per backend it provides
//! (`distlock_redis::REDIS`, `distlock_redis::REDLOCK`, `distlock_etcd::ETCD`,
//! …). The `distlock` facade's `connect`/`connect_fence`, the CLI and the test
//! harnesses walk that list instead of matching on backend names, so what a
//! backend is — its URL schemes, how a URL becomes a client, whether it can
//! hold fenced data — is written once, in the backend's own crate.

use crate::{DynLock, Fence, LockError};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A connection under way: what a [`Registration`]'s constructors return.
pub type Connecting<T> = Pin<Box<dyn Future<Output = Result<T, LockError>> + Send>>;

/// How a URL is read without connecting: what the parsed configuration shows
/// (its `Debug`, secrets redacted), or the error a connect would return for it.
pub type ParseUrl = fn(&str) -> Result<String, LockError>;

/// How a URL becomes a lock client.
pub type ConnectLock = fn(String) -> Connecting<DynLock>;

/// How a URL becomes a fenced store.
pub type ConnectFence = fn(String) -> Connecting<Arc<dyn Fence>>;

/// One backend, as its crate describes it.
///
/// ```
/// use distlock_core::adapter::Registration;
/// use distlock_core::memory::MemoryStore;
/// use std::sync::Arc;
///
/// const SCRATCH: Registration = Registration::new(
///     "scratch",
///     &["scratch"],
///     "scratch://",
///     |url| Ok(url.to_owned()),
///     |_url| Box::pin(async { Ok(Arc::new(MemoryStore::new().client()) as _) }),
/// );
/// assert!(!SCRATCH.has_fence());
/// assert_eq!(SCRATCH.parse("scratch://x").unwrap(), "scratch://x");
/// ```
#[derive(Clone, Copy)]
pub struct Registration {
    name: &'static str,
    schemes: &'static [&'static str],
    example: &'static str,
    parse: ParseUrl,
    connect: ConnectLock,
    fence: Option<ConnectFence>,
}

impl Registration {
    /// A backend named `name` (as its clients report it in
    /// [`DistributedLock::name`](crate::DistributedLock::name)), selected by
    /// the lowercase URL `schemes` (before `://`), shown in help texts as
    /// `example`. `parse` reads a URL of one of its schemes as `connect` does,
    /// without connecting (the fuzzer walks every registered scheme through
    /// it); `connect` parses a URL and connects.
    pub const fn new(
        name: &'static str,
        schemes: &'static [&'static str],
        example: &'static str,
        parse: ParseUrl,
        connect: ConnectLock,
    ) -> Self {
        Registration {
            name,
            schemes,
            example,
            parse,
            connect,
            fence: None,
        }
    }

    /// The same backend, also a store for fenced data: `fence` connects the
    /// [`Fence`] on the server a URL names.
    pub const fn with_fence(mut self, fence: ConnectFence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// The backend's short name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The URL schemes that select it, lowercase, without `://`.
    pub const fn schemes(&self) -> &'static [&'static str] {
        self.schemes
    }

    /// An example URL, for help texts.
    pub const fn example(&self) -> &'static str {
        self.example
    }

    /// Parses `url` without connecting: the configuration's `Debug` text.
    ///
    /// # Errors
    ///
    /// The [`LockError::Config`] a connect would return for the URL.
    pub fn parse(&self, url: &str) -> Result<String, LockError> {
        (self.parse)(url)
    }

    /// Parses `url` and connects a lock client.
    pub fn connect(&self, url: &str) -> Connecting<DynLock> {
        (self.connect)(url.to_owned())
    }

    /// Whether the backend is also a store for fenced data.
    pub const fn has_fence(&self) -> bool {
        self.fence.is_some()
    }

    /// Parses `url` and connects the backend's fenced store, when it is a
    /// data store (`None` for a lock-only backend).
    pub fn connect_fence(&self, url: &str) -> Option<Connecting<Arc<dyn Fence>>> {
        self.fence.map(|fence| fence(url.to_owned()))
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("schemes", &self.schemes)
            .field("fence", &self.fence.is_some())
            .finish_non_exhaustive()
    }
}

/// The URL schemes of the backends this workspace ships, lowercase, without
/// `://`. They live here rather than only in each backend's crate because the
/// `distlock` facade recognises a URL of a backend its build lacks, to name the
/// Cargo feature that adds it; each backend's [`Registration`] takes its list
/// from here, so the two cannot drift.
pub mod schemes {
    /// One Redis node, a Sentinel-managed primary or a Cluster, each with its
    /// TLS form.
    pub const REDIS: &[&str] = &[
        "redis",
        "rediss",
        "redis+sentinel",
        "rediss+sentinel",
        "redis+cluster",
        "rediss+cluster",
    ];
    /// Redlock over independent Redis nodes, and its TLS form.
    pub const REDLOCK: &[&str] = &["redlock", "redlocks"];
    /// etcd, and its TLS form.
    pub const ETCD: &[&str] = &["etcd", "etcds"];
    /// ZooKeeper.
    pub const ZOOKEEPER: &[&str] = &["zk", "zookeeper"];
    /// MySQL and MariaDB.
    pub const MYSQL: &[&str] = &["mysql", "mariadb"];
    /// PostgreSQL.
    pub const POSTGRES: &[&str] = &["postgres", "postgresql"];
    /// NATS JetStream KV.
    pub const NATS: &[&str] = &["nats", "tls", "nats+tls"];
}
