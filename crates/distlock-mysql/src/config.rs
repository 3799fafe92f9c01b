//! Configuration: a struct, or
//! `mysql://user:pass@host:port/db?table=…&strategy=…&timeout=5s`.

use crate::backend::Table;
use crate::in_tx::TxLock;
use crate::lock;
use crate::pool::Thread;
use crate::protocol::{HOLDER_ISOLATION, HOLDER_NO_AUTOCOMMIT, ROW_LOCK_WAIT, Strategy};
use distlock_core::{DynLock, LockError};
use distlock_sql::adapter::finish;
use distlock_sql::config::{SqlConfig, UrlForm, tls_missing};
use distlock_sql::shares::{Primitive, Shares};
use sqlx::MySql;
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
use std::sync::Arc;

/// How a MySQL lock URL looks.
const URL: UrlForm = UrlForm {
    schemes: ["mysql", "mariadb"],
    example: "mysql://USER:PASSWORD@HOST:3306/DATABASE",
    several: "a MySQL lock URL names one server (the primary); replicas cannot hold locks",
};

/// Where and how to connect. Build it with [`MySqlConfig::from_url`] or
/// [`MySqlConfig::from_options`] and the setters, then [`MySqlConfig::connect`].
///
/// `Debug` never shows the password.
#[derive(Clone)]
pub struct MySqlConfig {
    base: SqlConfig<MySql, Strategy>,
}

impl std::fmt::Debug for MySqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.base
            .fields(&mut f.debug_struct("MySqlConfig"))
            .finish()
    }
}

impl MySqlConfig {
    distlock_sql::settings_setters!(
        held: "`for_update`",
        create: " Turn it off when the user lacks the CREATE privilege and the table was created beforehand with the SQL in the crate docs (\"The table\").",
        table: "The lock table (default `distlock_locks`), validated as a plain identifier by `connect`.",
        strategy: Strategy,
        options: MySqlConnectOptions,
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
        // Expiry compares TIMESTAMP columns with NOW(6): a UTC session makes that
        // immune to daylight-saving jumps of the server's zone.
        let options = options.timezone(Some("+00:00".to_owned()));
        MySqlConfig {
            base: SqlConfig::new(options),
        }
    }

    /// The server, login, database and TLS of your application's
    /// `sqlx::MySqlPool` (its connect options); every other setting is this
    /// config's default, changed with the setters.
    ///
    /// distlock runs no statement on your pool's connections. It opens its
    /// own from those options, exactly: up to [`pool_size`](Self::pool_size)
    /// connections for single statements and, with `for_update`, one per lock
    /// held or waited for (up to [`held_connections`](Self::held_connections)),
    /// each closed, never pooled, while its transaction may hold a row lock.
    /// Why not yours: a `for_update` lock lives in an open transaction that
    /// must never go back to a pool others take from; a statement cut off by
    /// a dropped acquire gets its connection closed (or its server thread
    /// killed), never reused; and distlock's session settings (a UTC time
    /// zone, a 1 s row-lock wait) would otherwise change your connections.
    /// Your pool's own session settings (its time zone, `after_connect`
    /// hooks) do not reach distlock's connections: each of them sets the
    /// UTC time zone itself. Closing your pool leaves distlock's
    /// connections open; dropping the lock closes them.
    ///
    /// ```no_run
    /// use distlock_core::{AcquireOptions, LockKey};
    /// use distlock_mysql::MySqlConfig;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = sqlx::MySqlPool::connect("mysql://app:secret@127.0.0.1:3306/app").await?;
    /// let lock = MySqlConfig::from_pool(&pool).table("app_locks").connect().await?;
    /// let lease = lock.acquire(&LockKey::new("nightly-report")?, &AcquireOptions::new()).await?;
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_pool(pool: &sqlx::MySqlPool) -> Self {
        Self::from_options(distlock_sql::config::pool_options(pool))
    }

    /// Parses `mysql://user:pass@host:port/db?table=locks&strategy=for_update`
    /// (`mariadb://` too). The database (the path) is required.
    ///
    /// Parameters: `strategy` (`version_cas`, `unique_insert`, `for_update`),
    /// `table`, `pool_size`, `held_connections`, `connect_timeout` and `timeout`
    /// (durations such as `250ms` or `5s`), `create_table` (`true`/`false`),
    /// `state_ttl` (`24h`, at least `2s`; see [`MySqlConfig::state_ttl`]), the
    /// acquire defaults `ttl`, `wait`, `renewal`, `max_hold`, `min_hold` (see
    /// [`MySqlConfig::defaults`]), and the TLS and socket settings `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key`,
    /// `socket` (as in the mysql client, `ssl-ca` without `ssl-mode` means
    /// `verify_ca`; TLS needs the `tls` feature). Any other parameter is an error that lists these. Errors never
    /// echo the password.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let read = SqlConfig::<MySql, Strategy>::read_server(&URL, url, MySqlConnectOptions::new());
        let (mut url, mut options) = read?;
        let ssl_modes = "disabled, preferred, required, verify_ca or verify_identity";
        let mode = url.parse_param::<MySqlSslMode>("ssl-mode", ssl_modes)?;
        let ca = url.string("ssl-ca");
        // As in the mysql client: a CA without a mode means verify against it,
        // not `preferred`, which would accept any certificate.
        let mode = mode.or(ca.as_ref().map(|_| MySqlSslMode::VerifyCa));
        if !cfg!(feature = "tls") && mode.is_some_and(needs_tls) {
            return Err(tls_missing(&url, "ssl-mode", "distlock-mysql"));
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
        config.base = config.base.read_params(&mut url)?;
        finish(&url, || config.base.validate(&URL))?;
        Ok(config)
    }

    /// Connects, creates the table if missing (unless turned off), and checks that
    /// the table belongs to this strategy.
    pub async fn connect(self) -> Result<DynLock, LockError> {
        let (table, base) = self.open().await?;
        let table = Arc::new(table);
        let create = base.settings.create_table;
        let name = table.name.as_str();
        let state_ttl = base.settings.state_ttl;
        let open = |primitive| Shares::open(table.clone(), name, primitive, create, state_ttl);
        let semaphores = open(Primitive::Semaphore).await?;
        let rwlocks = open(Primitive::RwLock).await?;
        lock::client(table, base.settings.defaults, semaphores, rwlocks)
    }

    /// Connects a [`TxLock`], which takes locks inside transactions of the
    /// caller's own ([`TxLock::lock_in`]), on the `for_update` strategy's
    /// table (the one set, else `distlock_locks`), creating it if missing
    /// (unless turned off).
    pub async fn connect_tx_lock(self) -> Result<TxLock, LockError> {
        let (table, _) = self.strategy(Strategy::ForUpdate).open().await?;
        Ok(TxLock::new(table))
    }

    /// The lock table, checked, and the settings.
    async fn open(self) -> Result<(Table, SqlConfig<MySql, Strategy>), LockError> {
        let base = self.base;
        let table = base.validate(&URL)?;
        // One connection of the holders' pool per held or waiting lock: a
        // for_update transaction (autocommit off), or a polling strategy's
        // doorbell, whose attempts' statements wait for row locks as briefly
        // as the pool's.
        let (pool, holders) = match base.strategy {
            Strategy::ForUpdate => {
                let holder_setup = &[HOLDER_ISOLATION, HOLDER_NO_AUTOCOMMIT];
                base.pools::<Thread>(&[ROW_LOCK_WAIT], holder_setup, true)
            }
            _ => base.pools::<Thread>(&[ROW_LOCK_WAIT], &[ROW_LOCK_WAIT], false),
        };
        let create = base.settings.create_table;
        let (endpoint, state_ttl) = (base.endpoint(), base.settings.state_ttl);
        let table = Table::open(
            base.strategy,
            table,
            pool,
            holders,
            endpoint,
            create,
            state_ttl,
        );
        Ok((table.await?, base))
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
        assert_eq!(config.base.table_name(), "locks");
        assert_eq!(config.base.strategy, Strategy::ForUpdate);
        let settings = &config.base.settings;
        assert_eq!((settings.pool_size, settings.held_connections), (3, 7));
        assert_eq!(settings.timeouts.connect, Duration::from_millis(250));
        assert_eq!(settings.timeouts.reply, Duration::from_millis(1500));
        assert!(!settings.create_table);
        assert_eq!(config.base.options.get_username(), "u");
        assert!(matches!(
            config.base.options.get_ssl_mode(),
            MySqlSslMode::Disabled
        ));
        assert_eq!(config.endpoint(), "mysql://db.example:3307/app");
        assert!(!format!("{config:?}").contains("s3cret"));
        let encoded = MySqlConfig::from_url("mysql://a%40b:p%2Fw@[::1]/my%20db").unwrap();
        assert_eq!(encoded.base.options.get_username(), "a@b");
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
