//! How the facade, the CLI and the tests find this backend.

use crate::NatsConfig;
use distlock_core::adapter::{Registration, schemes};
use std::sync::Arc;

/// NATS JetStream KV: `nats://`, `tls://`, `nats+tls://`. Also a fenced
/// store ([`crate::NatsFence`]).
pub const NATS: Registration = Registration::new(
    "nats",
    schemes::NATS,
    "nats://H1:4222,H2:4222/BUCKET",
    |url| NatsConfig::from_url(url).map(|config| format!("{config:?}")),
    |url| Box::pin(async move { Ok(Arc::new(NatsConfig::from_url(&url)?.connect().await?) as _) }),
)
.with_fence(|url| {
    Box::pin(async move { Ok(Arc::new(NatsConfig::from_url(&url)?.connect_fence().await?) as _) })
});
