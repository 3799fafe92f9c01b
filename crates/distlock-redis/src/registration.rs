//! What the facade and the test harnesses know of this crate's two backends.

use crate::{RedisConfig, RedlockConfig};
use distlock_core::adapter::{Registration, schemes};
use std::sync::Arc;

/// One Redis node, a Sentinel-managed primary or a Cluster: `redis://`,
/// `rediss://` (TLS), `redis+sentinel://`, `redis+cluster://` (and their TLS
/// forms). Also a fenced store ([`crate::RedisFence`]).
pub const REDIS: Registration = Registration::new(
    "redis",
    schemes::REDIS,
    "redis://[:PASSWORD@]HOST:6379/0",
    |url| RedisConfig::from_url(url).map(|config| format!("{config:?} {}", config.endpoint())),
    |url| Box::pin(async move { Ok(Arc::new(RedisConfig::from_url(&url)?.connect().await?) as _) }),
)
.with_fence(|url| {
    Box::pin(async move { Ok(Arc::new(RedisConfig::from_url(&url)?.connect_fence().await?) as _) })
});

/// Redlock over N independent Redis nodes: `redlock://`, `redlocks://` (TLS).
pub const REDLOCK: Registration = Registration::new(
    "redlock",
    schemes::REDLOCK,
    "redlock://H1:6379,H2:6379,H3:6379",
    |url| RedlockConfig::from_url(url).map(|config| format!("{config:?} {:?}", config.endpoints())),
    |url| {
        Box::pin(async move { Ok(Arc::new(RedlockConfig::from_url(&url)?.connect().await?) as _) })
    },
);
