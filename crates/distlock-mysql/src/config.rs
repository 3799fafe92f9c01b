//! Configuration: a struct, or
//! `mysql://user:pass@host:port/db?table=…&strategy=…&timeout=5s`.

use crate::backend::Table;
use crate::error::BACKEND;
use crate::keys::TableName;
use crate::lock;
use crate::pool::Pool;
use crate::protocol::{HOLDER_ISOLATION, HOLDER_NO_AUTOCOMMIT, ROW_LOCK_WAIT, Strategy};
use crate::shares::{RWLOCK_TABLE, SEMAPHORE_TABLE, Shares};
use distlock_core::toolkit::LockUrl;
use distlock_core::{DynLock, LockError};
use distlock_sql::adapter::{Settings, check_scheme, endpoint, finish, read_server};
use sqlx::MySql;
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
use std::sync::Arc;

/// Where and how to connect. Build it with [`MySqlConfig::from_url`] or
/// [`MySqlConfig::from_options`] and the setters, then [`MySqlConfig::connect`].
///
/// `Debug` never shows the password.
#[derive(Clone)]
pub struct MySqlConfig {
    options: MySqlConnectOptions,
    table: String,
    strategy: Strategy,
    settings: Settings,
}

impl std::fmt::Debug for MySqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("MySqlConfig");
        debug
            .field("endpoint", &self.endpoint())
            .field("user", &self.options.get_username())
            .field("password", &"<redacted>")
            .field("table", &self.table)
            .field("strategy", &self.strategy);
        self.settings.fields(&mut debug).finish()
    }
}

impl MySqlConfig {
    distlock_sql::settings_setters!(
        held: "`for_update`",
        create: " Turn it off when the user lacks the CREATE privilege and the table was created beforehand with the SQL in the crate docs (\"The table\")."
    );

    /// Defaults around sqlx connect options (host, credentials, database, TLS).
    pub fn from_options(options: MySqlConnectOptions) -> Self {
        // sqlx verifies certificates with rustls's process-wide provider, which
        // rustls cannot pick itself when another crate (ZooKeeper's TLS) also
        // compiles in aws-lc-rs: it would panic. Every config passes here before
        // sqlx sees its options, so ring is installed here unless the
        // application installed a provider of its own.
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();
        MySqlConfig {
            // Expiry compares TIMESTAMP columns with NOW(6): a UTC session makes that
            // immune to daylight-saving jumps of the server's zone.
            options: options.timezone(Some("+00:00".to_owned())),
            table: TableName::DEFAULT.to_owned(),
            strategy: Strategy::default(),
            settings: Settings::default(),
        }
    }

    /// Parses `mysql://user:pass@host:port/db?table=locks&strategy=for_update`
    /// (`mariadb://` too). The database (the path) is required.
    ///
    /// Parameters: `strategy` (`version_cas`, `unique_insert`, `for_update`),
    /// `table`, `pool_size`, `held_connections`, `connect_timeout` and `timeout`
    /// (durations such as `250ms` or `5s`), `create_table` (`true`/`false`), the
    /// acquire defaults `ttl`, `wait`, `renewal`, `max_hold` (see
    /// [`MySqlConfig::defaults`]), and the TLS and socket settings `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key`,
    /// `socket` (as in the mysql client, `ssl-ca` without `ssl-mode` means
    /// `verify_ca`; TLS needs the `tls` feature). Any other parameter is an error that lists these. Errors never
    /// echo the password.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let mut url = LockUrl::parse(BACKEND, url)?;
        check_scheme(
            &url,
            ["mysql", "mariadb"],
            "mysql://USER:PASSWORD@HOST:3306/DATABASE",
        )?;
        let mut options = read_server(
            &url,
            MySqlConnectOptions::new(),
            "a MySQL lock URL names one server (the primary); replicas cannot hold locks",
        )?;
        let ssl_modes = "disabled, preferred, required, verify_ca or verify_identity";
        let mode = url.parse_param::<MySqlSslMode>("ssl-mode", ssl_modes)?;
        let ca = url.string("ssl-ca");
        // As in the mysql client: a CA without a mode means verify against it,
        // not `preferred`, which would accept any certificate.
        let mode = mode.or(ca.as_ref().map(|_| MySqlSslMode::VerifyCa));
        if !cfg!(feature = "tls") && mode.is_some_and(needs_tls) {
            return Err(url.error(
                "this ssl-mode needs TLS support, which this build lacks: enable the `tls` \
                 feature of the distlock crate (or of distlock-mysql when used directly)",
            ));
        }
        if let Some(mode) = mode {
            options = options.ssl_mode(mode);
        }
        if let Some(path) = ca {
            options = options.ssl_ca(path);
        }
        if let Some(path) = url.string("ssl-cert") {
            options = options.ssl_client_cert(path);
        }
        if let Some(path) = url.string("ssl-key") {
            options = options.ssl_client_key(path);
        }
        if let Some(path) = url.string("socket") {
            options = options.socket(path);
        }
        let mut config = MySqlConfig::from_options(options);
        if let Some(strategy) = url.choice("strategy", &Strategy::NAMES)? {
            config.strategy = strategy.parse()?;
        }
        if let Some(table) = url.string("table") {
            config.table = table;
        }
        config.settings = config.settings.read(&mut url)?;
        finish(&url, || config.validate())?;
        Ok(config)
    }

    /// The lock table (default `distlock_locks`), validated as a plain identifier
    /// by [`MySqlConfig::connect`].
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The strategy (default [`Strategy::VersionCas`]).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The strategy in use.
    pub fn get_strategy(&self) -> Strategy {
        self.strategy
    }

    /// The sqlx connect options (server, credentials, database, TLS, UTC session),
    /// for other clients of the same server, such as a fenced store.
    pub fn connect_options(&self) -> MySqlConnectOptions {
        self.options.clone()
    }

    /// The server address, without credentials, for messages.
    pub fn endpoint(&self) -> String {
        endpoint::<MySql>(&self.options)
    }

    fn validate(&self) -> Result<TableName, LockError> {
        let bad = |reason: &str| Err(LockError::config(BACKEND, reason));
        self.settings.validate(BACKEND)?;
        if self.options.get_database().is_none_or(str::is_empty) {
            return bad(
                "no database given; add it to the URL path: mysql://USER:PASSWORD@HOST:3306/DATABASE",
            );
        }
        TableName::new(&self.table)
    }

    /// Connects, creates the table if missing (unless turned off), and checks that
    /// the table belongs to this strategy.
    pub async fn connect(self) -> Result<DynLock, LockError> {
        let table = self.validate()?;
        let pool = Pool::new(
            self.options.clone(),
            self.settings.pool_size,
            &[ROW_LOCK_WAIT],
            false,
            self.settings.timeouts,
        );
        // Only for_update takes connections from it, one per held or waiting lock.
        let holders = Pool::new(
            self.options.clone(),
            self.settings.held_connections,
            &[HOLDER_ISOLATION, HOLDER_NO_AUTOCOMMIT],
            true,
            self.settings.timeouts,
        );
        let endpoint = self.endpoint();
        let create = self.settings.create_table;
        let table = Arc::new(Table::open(self.strategy, table, pool, endpoint, create).await?);
        let semaphores = Shares::open(table.clone(), SEMAPHORE_TABLE, create).await?;
        let rwlocks = Shares::open(table.clone(), RWLOCK_TABLE, create).await?;
        lock::client(table, holders, self.settings.defaults, semaphores, rwlocks)
    }
}

/// Whether `mode` refuses a connection without TLS.
fn needs_tls(mode: MySqlSslMode) -> bool {
    !matches!(mode, MySqlSslMode::Disabled | MySqlSslMode::Preferred)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reason(url: &str) -> String {
        match MySqlConfig::from_url(url) {
            Err(e @ LockError::Config { .. }) => {
                let text = e.to_string();
                assert!(!text.contains("s3cret"), "{url}: {text}");
                text
            }
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn url_sets_parameters_from_its_parts() {
        let config = MySqlConfig::from_url(
            "mariadb://u:s3cret@db.example:3307/app?table=locks&strategy=for_update&pool_size=3\
             &held_connections=7&connect_timeout=250ms&timeout=1500ms&create_table=false&ssl-mode=disabled",
        )
        .unwrap();
        assert_eq!(config.table, "locks");
        assert_eq!(config.strategy, Strategy::ForUpdate);
        let settings = &config.settings;
        assert_eq!((settings.pool_size, settings.held_connections), (3, 7));
        assert_eq!(settings.timeouts.connect, Duration::from_millis(250));
        assert_eq!(settings.timeouts.reply, Duration::from_millis(1500));
        assert!(!settings.create_table);
        assert_eq!(config.options.get_username(), "u");
        assert!(matches!(
            config.options.get_ssl_mode(),
            MySqlSslMode::Disabled
        ));
        assert_eq!(config.endpoint(), "mysql://db.example:3307/app");
        assert!(!format!("{config:?}").contains("s3cret"));
        let encoded = MySqlConfig::from_url("mysql://a%40b:p%2Fw@[::1]/my%20db").unwrap();
        assert_eq!(encoded.options.get_username(), "a@b");
        assert_eq!(encoded.endpoint(), "mysql://[::1]:3306/my db");
    }

    #[test]
    fn unknown_and_misspelled_parameters_are_refused_with_the_known_ones() {
        let typo = reason("mysql://u:s3cret@h/db?stratgy=for_update");
        assert!(typo.contains("did you mean `strategy`"), "{typo}");
        let bogus = reason("mysql://u:s3cret@h/db?bogus=1");
        for known in [
            "strategy",
            "table",
            "timeout",
            "connect_timeout",
            "ssl-mode",
        ] {
            assert!(bogus.contains(known), "{bogus}");
        }
    }

    #[test]
    fn old_spellings_fail_naming_the_new_one() {
        assert!(reason("mysql://u:s3cret@h/db?request_timeout=5s").contains("timeout=…"));
        assert!(reason("mysql://u:s3cret@h/db?timeout=1500").contains("1500ms"));
        assert!(reason("mysql://u:s3cret@h/db?connect_timeout=5000").contains("5000ms"));
    }

    #[test]
    fn bad_urls_give_config_errors_without_the_password() {
        for url in [
            "postgres://u:s3cret@h/db",
            "mysql://u:s3cret@h/db?strategy=bogus",
            "mysql://u:s3cret@h/db?table=x;drop",
            "mysql://u:s3cret@h/db?pool_size=many",
            "mysql://u:s3cret@h/db?pool_size=0",
            "mysql://u:s3cret@h/db?ssl-mode=sometimes",
            "mysql://u:s3cret@h1,h2/db",
            "mysql://u:s3cret@h",
            "mysql://u:s3cret@h:notaport/db",
        ] {
            reason(url);
        }
    }
}
