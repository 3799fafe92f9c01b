//! What the facade and the test harnesses know of this backend.

use crate::MySqlConfig;
use distlock_core::adapter::Registration;
use distlock_sql::SqlStore;
use std::sync::Arc;

/// MySQL 8 or MariaDB 10.6+: `mysql://`, `mariadb://`. Also a fenced store
/// (a [`SqlStore`] value table on the same database).
pub const MYSQL: Registration = Registration::new(
    "mysql",
    &["mysql", "mariadb"],
    "mysql://USER:PASSWORD@HOST:3306/DB?strategy=version_cas",
    |url| MySqlConfig::from_url(url).map(|config| format!("{config:?}")),
    |url| Box::pin(async move { MySqlConfig::from_url(&url)?.connect().await }),
)
.with_fence(|url| {
    Box::pin(async move {
        let config = MySqlConfig::from_url(&url)?;
        let store = SqlStore::connect(config.connect_options(), config.get_timeouts()).await?;
        Ok(Arc::new(store) as _)
    })
});
