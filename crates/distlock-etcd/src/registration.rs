//! What the facade and the test harnesses know of this backend.

use crate::EtcdConfig;
use distlock_core::adapter::{Registration, schemes};
use std::sync::Arc;

/// etcd: `etcd://`, `etcds://` (TLS, with the `tls` feature).
pub const ETCD: Registration = Registration::new(
    "etcd",
    schemes::ETCD,
    "etcd://H1:2379,H2:2379/NAMESPACE",
    |url| EtcdConfig::from_url(url).map(|config| format!("{config:?} {:?}", config.endpoints())),
    |url| Box::pin(async move { Ok(Arc::new(EtcdConfig::from_url(&url)?.connect().await?) as _) }),
);
