//! What the facade and the test harnesses know of this backend.

use crate::PostgresConfig;
use distlock_core::adapter::Registration;
use distlock_sql::SqlStore;
use std::sync::Arc;

/// PostgreSQL 14+: `postgres://`, `postgresql://`. Also a fenced store (a
/// [`SqlStore`] value table on the same database), on a direct connection
/// only (it keeps prepared statements: refused with `pooler=transaction`).
pub const POSTGRES: Registration = Registration::new(
    "postgres",
    &["postgres", "postgresql"],
    "postgres://USER:PASSWORD@HOST:5432/DB?strategy=version_cas",
    |url| PostgresConfig::from_url(url).map(|config| format!("{config:?}")),
    |url| Box::pin(async move { PostgresConfig::from_url(&url)?.connect().await }),
)
.with_fence(|url| {
    Box::pin(async move {
        let config = PostgresConfig::from_url(&url)?;
        crate::pooler::check_store(config.get_pooler())?;
        let store =
            SqlStore::<sqlx::Postgres>::connect_to(config.connect_options(), config.get_timeouts())
                .await?;
        Ok(Arc::new(store) as _)
    })
});
