//! What the facade and the test harnesses know of this backend.

use crate::ZkConfig;
use distlock_core::adapter::{Registration, schemes};
use std::sync::Arc;

/// ZooKeeper: `zk://`, `zookeeper://` (TLS with `?tls=true&ca=…` and the `tls`
/// feature).
pub const ZOOKEEPER: Registration = Registration::new(
    "zookeeper",
    schemes::ZOOKEEPER,
    "zk://H1:2181,H2:2181/CHROOT",
    |url| ZkConfig::from_url(url).map(|config| format!("{config:?}")),
    |url| Box::pin(async move { Ok(Arc::new(ZkConfig::from_url(&url)?.connect().await?) as _) }),
);
