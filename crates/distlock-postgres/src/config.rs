//! Configuration: a struct, or
//! `postgres://user:pass@host:5432/db?strategy=…&namespace=…&timeout=5s`.

use crate::backend::Table;
use crate::in_tx::TxLock;
use crate::keys::{DEFAULT_NAMESPACE, validate_namespace};
use crate::lock;
use crate::pooler::{self, Pooler};
use crate::protocol::Strategy;
use crate::session::Session;
use distlock_core::{DynLock, LockError};
use distlock_sql::adapter::finish;
use distlock_sql::config::{SqlConfig, UrlForm, tls_missing};
use sqlx::ConnectOptions;
use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// How a PostgreSQL lock URL looks.
const URL: UrlForm = UrlForm {
    schemes: ["postgres", "postgresql"],
    example: "postgres://USER:PASSWORD@HOST:5432/DATABASE",
    several: "a PostgreSQL lock URL names one server (the primary); standbys cannot hold locks",
};

/// Where and how to connect. Build it with [`PostgresConfig::from_url`] or
/// [`PostgresConfig::from_options`] and the setters, then
/// [`PostgresConfig::connect`].
///
/// `Debug` never shows the password.
#[derive(Clone)]
pub struct PostgresConfig {
    base: SqlConfig<Postgres, Strategy>,
    namespace: String,
    pooler: Pooler,
    /// Where to `LISTEN` when not through the lock connections' server: host, port.
    listen_at: Option<(String, u16)>,
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("PostgresConfig");
        debug.field("namespace", &self.namespace);
        debug.field("pooler", &self.pooler);
        debug.field("listen_at", &self.listen_at);
        self.base.fields(&mut debug).finish()
    }
}

impl PostgresConfig {
    distlock_sql::settings_setters!(
        held: "`advisory`",
        create: "",
        table: "The lock table (default `distlock_locks`, or `distlock_advisory` for the advisory strategy), validated as a plain identifier by `connect`.",
        strategy: Strategy,
        options: PgConnectOptions,
    );

    /// Defaults around sqlx connect options (host, credentials, database, TLS).
    pub fn from_options(options: PgConnectOptions) -> Self {
        // sqlx verifies certificates with rustls's process-wide provider, which
        // rustls cannot pick itself when another crate also compiles in
        // aws-lc-rs: install ring unless the application installed a provider.
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();
        let options = options
            .application_name("distlock")
            .disable_statement_logging();
        PostgresConfig {
            base: SqlConfig::new(options),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            pooler: Pooler::None,
            listen_at: None,
        }
    }

    /// The server, login, database and TLS of your application's
    /// `sqlx::PgPool` (its connect options); every other setting is this
    /// config's default, changed with the setters (behind PgBouncer in
    /// transaction mode, add [`pooler(Pooler::Transaction)`](Self::pooler)).
    ///
    /// distlock runs no statement on your pool's connections. It opens its
    /// own from those options, exactly: up to [`pool_size`](Self::pool_size)
    /// connections for single statements; with `advisory`, one per lock held
    /// or waited for (up to [`held_connections`](Self::held_connections)),
    /// closed, never pooled, while it may hold the session lock; and one
    /// `LISTEN` connection beside them that wakes waiters (to the server of
    /// [`listen_at`](Self::listen_at) when set). Why not yours: an advisory
    /// lock belongs to its session and must never go back to a pool others
    /// take from; a statement cut off by a dropped acquire gets its session
    /// ended, which would end one of your connections; and a `LISTEN` must
    /// stay on one session. Your pool's `after_connect` hooks do not run on
    /// distlock's connections, and they carry the application name
    /// `distlock`. Closing your pool leaves distlock's connections open;
    /// dropping the lock closes them.
    ///
    /// ```no_run
    /// use distlock_core::{AcquireOptions, LockKey};
    /// use distlock_postgres::PostgresConfig;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = sqlx::PgPool::connect("postgres://app:secret@127.0.0.1:5432/app").await?;
    /// let lock = PostgresConfig::from_pool(&pool).namespace("billing").connect().await?;
    /// let lease = lock.acquire(&LockKey::new("nightly-report")?, &AcquireOptions::new()).await?;
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_pool(pool: &sqlx::PgPool) -> Self {
        Self::from_options(distlock_sql::config::pool_options(pool))
    }

    /// Parses `postgres://user:pass@host:5432/db?strategy=advisory`
    /// (`postgresql://` too). The database (the path) is required.
    ///
    /// Parameters: `strategy` (`version_cas`, `advisory`), `namespace`
    /// (default `distlock`), `pooler` (`none`, `transaction`: see [`Pooler`]),
    /// `listen_at` (`HOST:PORT`, see [`PostgresConfig::listen_at`]), `table`,
    /// `pool_size`, `held_connections`,
    /// `connect_timeout` and `timeout` (durations such as `250ms` or `5s`),
    /// `create_table` (`true`/`false`), `state_ttl` (`24h`, at least `2s`; see
    /// [`PostgresConfig::state_ttl`]), the acquire defaults `ttl`, `wait`,
    /// `renewal`, `max_hold`, `min_hold` (see [`PostgresConfig::defaults`]), and TLS:
    /// `sslmode` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`),
    /// `sslrootcert`, `sslcert`, `sslkey`, or `tls=true` for `verify-full`
    /// (TLS needs the `tls` feature). Any other parameter is an error that
    /// lists these. Errors never echo the password.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let without_pgpass = PgConnectOptions::new_without_pgpass();
        let read = SqlConfig::<Postgres, Strategy>::read_server(&URL, url, without_pgpass);
        let (mut url, mut options) = read?;
        let modes = "disable, allow, prefer, require, verify-ca or verify-full";
        let mut mode = url.parse_param::<PgSslMode>("sslmode", modes)?;
        if url.bool("tls")? == Some(true) {
            mode = Some(mode.unwrap_or(PgSslMode::VerifyFull));
        }
        let root = url.string("sslrootcert");
        // As with libpq's sslmode=verify-full: a CA given means verify against it.
        let mode = mode.or(root.as_ref().map(|_| PgSslMode::VerifyFull));
        if !cfg!(feature = "tls") && mode.is_some_and(needs_tls) {
            return Err(tls_missing(&url, "sslmode", "distlock-postgres"));
        }
        options = options.ssl_mode(mode.unwrap_or(PgSslMode::Disable));
        if let Some(path) = root {
            options = options.ssl_root_cert(path);
        }
        if let Some(path) = url.string("sslcert") {
            options = options.ssl_client_cert(path);
        }
        if let Some(path) = url.string("sslkey") {
            options = options.ssl_client_key(path);
        }
        let mut config = PostgresConfig::from_options(options);
        if let Some(namespace) = url.string("namespace") {
            config.namespace = namespace;
        }
        if let Some(pooler) = url.choice("pooler", Pooler::NAMES)? {
            config.pooler = pooler.parse()?;
        }
        if let Some(at) = url.string("listen_at") {
            let (host, port) = at
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
                .filter(|(host, _)| !host.is_empty())
                .ok_or_else(|| url.error(format_args!("listen_at=`{at}` is not HOST:PORT")))?;
            config = config.listen_at(host, port);
        }
        config.base = config.base.read_params(&mut url)?;
        finish(&url, || {
            pooler::check(config.pooler, config.base.strategy)?;
            config.validate()
        })?;
        Ok(config)
    }

    /// The namespace every lock name lives in (default `distlock`): 1 to 128
    /// bytes without control characters. Clients of different namespaces
    /// never contend.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// What lies between this client and the server (default
    /// [`Pooler::None`]); [`Pooler::Transaction`] for PgBouncer in
    /// `pool_mode = transaction`.
    pub fn pooler(mut self, pooler: Pooler) -> Self {
        self.pooler = pooler;
        self
    }

    /// `LISTEN` for releases on a connection of its own to `host:port` (the
    /// server itself, with the same user, password, database and TLS) instead
    /// of the lock connections' server: through a transaction-pooling proxy
    /// the only way waiters are woken at once rather than by polling.
    pub fn listen_at(mut self, host: impl Into<String>, port: u16) -> Self {
        self.listen_at = Some((host.into(), port));
        self
    }

    /// What lies between this client and the server.
    pub fn get_pooler(&self) -> Pooler {
        self.pooler
    }

    /// The table this config uses.
    pub fn table_name(&self) -> &str {
        self.base.table_name()
    }

    fn validate(&self) -> Result<crate::keys::TableName, LockError> {
        validate_namespace(&self.namespace)?;
        self.base.validate(&URL)
    }

    /// Connects, creates the table if missing (unless turned off), checks that
    /// the table belongs to this strategy, and starts listening for releases.
    pub async fn connect(self) -> Result<DynLock, LockError> {
        pooler::check(self.pooler, self.base.strategy)?;
        let (table, holders, base) = self.open(true).await?;
        let create = base.settings.create_table;
        let state_ttl = base.settings.state_ttl;
        lock::client(table, holders, base.settings.defaults, create, state_ttl).await
    }

    /// Connects a [`TxLock`], which takes locks inside transactions of the
    /// caller's own ([`TxLock::lock_in`]), on the `advisory` strategy's table
    /// (the one set, else `distlock_advisory`), creating it if missing
    /// (unless turned off). Its own connections only raise tokens; it does not
    /// `LISTEN`. Works with `pooler=transaction`.
    pub async fn connect_tx_lock(self) -> Result<TxLock, LockError> {
        let (table, _, _) = self.strategy(Strategy::Advisory).open(false).await?;
        Ok(TxLock::new(table))
    }

    /// The lock table, checked and listened on when `listen`, the holders'
    /// pool and the settings.
    async fn open(
        self,
        listen: bool,
    ) -> Result<(Table, crate::pool::Pool, SqlConfig<Postgres, Strategy>), LockError> {
        let table = self.validate()?;
        let mut base = self.base;
        let through_pooler = self.pooler == Pooler::Transaction;
        if through_pooler {
            base.options = base
                .options
                .statement_cache_capacity(0)
                .extra_float_digits(None);
        }
        let listen = match (self.listen_at, through_pooler) {
            _ if !listen => None,
            (Some((host, port)), _) => Some(base.options.clone().host(&host).port(port)),
            (None, false) => Some(base.options.clone()),
            (None, true) => None,
        };
        // Only advisory takes connections from the holders' pool, one per held
        // or waiting lock.
        let (mut pool, holders) = base.pools::<Session>(&[], &[], false);
        if through_pooler {
            pool = pool.behind_transaction_pooler();
        }
        let endpoint = base.endpoint();
        let (strategy, namespace) = (base.strategy, self.namespace);
        let settings = &base.settings;
        let table = Table::open(strategy, table, namespace, pool, listen, endpoint, settings);
        Ok((table.await?, holders, base))
    }
}

/// Whether `mode` refuses a connection without TLS.
fn needs_tls(mode: PgSslMode) -> bool {
    !matches!(
        mode,
        PgSslMode::Disable | PgSslMode::Allow | PgSslMode::Prefer
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reason(url: &str) -> String {
        match PostgresConfig::from_url(url) {
            Err(e @ LockError::Config { .. }) => {
                let text = e.to_string();
                assert!(!text.contains("s3cret"), "{url}: {text}");
                assert!(!format!("{e:?}").contains("s3cret"), "{url}: {e:?}");
                text
            }
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn url_sets_parameters_from_its_parts() {
        let config = PostgresConfig::from_url(
            "postgresql://u:s3cret@db.example:5433/app?strategy=advisory&namespace=billing&pool_size=3\
             &held_connections=7&connect_timeout=250ms&timeout=1500ms&create_table=false&sslmode=disable\
             &ttl=10s&wait=no",
        )
        .unwrap();
        assert_eq!(config.table_name(), "distlock_advisory");
        assert_eq!(config.namespace, "billing");
        assert_eq!(config.base.strategy, Strategy::Advisory);
        let settings = &config.base.settings;
        assert_eq!((settings.pool_size, settings.held_connections), (3, 7));
        assert_eq!(settings.timeouts.connect, Duration::from_millis(250));
        assert_eq!(settings.timeouts.reply, Duration::from_millis(1500));
        assert!(!settings.create_table);
        assert_eq!(settings.defaults.get_ttl(), Duration::from_secs(10));
        assert_eq!(config.base.options.get_username(), "u");
        assert_eq!(config.endpoint(), "postgres://db.example:5433/app");
        assert!(!format!("{config:?}").contains("s3cret"));
        let plain = PostgresConfig::from_url("postgres://u@h/db?table=locks").unwrap();
        assert_eq!(plain.base.strategy, Strategy::VersionCas);
        assert_eq!(plain.table_name(), "locks");
        assert_eq!(plain.namespace, DEFAULT_NAMESPACE);
        assert_eq!(plain.pooler, Pooler::None);
        let pooled =
            "postgres://u:s3cret@bouncer:6432/db?pooler=transaction&listen_at=db.example:5432";
        let pooled = PostgresConfig::from_url(pooled).unwrap();
        assert_eq!(pooled.pooler, Pooler::Transaction);
        assert_eq!(pooled.listen_at, Some(("db.example".to_owned(), 5432)));
    }

    #[test]
    fn unknown_parameters_are_refused_with_the_known_ones() {
        let typo = reason("postgres://u:s3cret@h/db?stratgy=advisory");
        assert!(typo.contains("did you mean `strategy`"), "{typo}");
        let bogus = reason("postgres://u:s3cret@h/db?bogus=1");
        for known in [
            "strategy",
            "namespace",
            "timeout",
            "connect_timeout",
            "sslmode",
        ] {
            assert!(bogus.contains(known), "{bogus}");
        }
    }

    #[test]
    fn bad_urls_give_config_errors_without_the_password() {
        for url in [
            "mysql://u:s3cret@h/db",
            "postgres://u:s3cret@h/db?strategy=bogus",
            "postgres://u:s3cret@h/db?table=x;drop",
            "postgres://u:s3cret@h/db?pool_size=0",
            "postgres://u:s3cret@h/db?sslmode=sometimes",
            "postgres://u:s3cret@h/db?namespace=",
            "postgres://u:s3cret@h1,h2/db",
            "postgres://u:s3cret@h",
            "postgres://u:s3cret@h:notaport/db",
            "postgres://u:s3cret@h/db?timeout=5",
            "postgres://u:s3cret@h/db?pooler=statement",
            "postgres://u:s3cret@h/db?listen_at=h",
            "postgres://u:s3cret@h/db?listen_at=:5432",
            "postgres://u:s3cret@h/db?pooler=transaction&strategy=advisory",
        ] {
            reason(url);
        }
    }
}
