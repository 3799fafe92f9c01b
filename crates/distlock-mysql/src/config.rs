//! Configuration: a struct, or `mysql://user:pass@host:port/db?table=…&strategy=…`.

use crate::error::BACKEND;
use crate::{MySqlLock, TableName};
use distlock_core::{Capabilities, FencingGuarantee, LockError, TokenDurability, Wake};
use sqlx::mysql::MySqlConnectOptions;
use std::str::FromStr;
use std::time::Duration;

/// How the lock is kept in the table. All clients of one table must use the same
/// strategy; the table records its strategy and `connect` refuses a mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Strategy {
    /// The row persists; acquire is one CAS `UPDATE` on a free or expired row that
    /// raises the `fence` column and returns it in the same round trip. Two
    /// statements per uncontended cycle.
    #[default]
    VersionCas,
    /// The row exists only while held: `INSERT` acquires, the primary key rejects
    /// a second holder, an expired row is taken over by one guarded `UPDATE`, and
    /// `DELETE … WHERE owner` releases. Tokens come from a counter row.
    UniqueInsert,
    /// A dedicated connection holds an open transaction with `SELECT … FOR UPDATE`
    /// on the row: waiting is server-side and the lock dies with the connection.
    ForUpdate,
}

impl Strategy {
    /// The name used in URLs (`?strategy=`) and in the table comment.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::VersionCas => "version_cas",
            Strategy::UniqueInsert => "unique_insert",
            Strategy::ForUpdate => "for_update",
        }
    }
}

impl Strategy {
    /// What a client of this strategy guarantees.
    pub fn capabilities(self) -> Capabilities {
        let polling = Capabilities {
            fencing: FencingGuarantee::Strict,
            fifo: false,
            wake: Wake::Poll,
            session_bound: false,
            token_durability: TokenDurability::Persisted,
            min_ttl: crate::version_cas::MIN_TTL,
            ttl_granularity: Duration::from_micros(1),
        };
        match self {
            Strategy::VersionCas | Strategy::UniqueInsert => polling,
            // InnoDB's lock queue wakes the waiter; the server ends an idle holder's
            // session after `wait_timeout`, whole seconds: the lock's server expiry.
            Strategy::ForUpdate => Capabilities {
                wake: Wake::Push,
                session_bound: true,
                min_ttl: Duration::from_secs(1),
                ttl_granularity: Duration::from_secs(1),
                ..polling
            },
        }
    }
}

impl FromStr for Strategy {
    type Err = LockError;

    fn from_str(s: &str) -> Result<Self, LockError> {
        match s {
            "version_cas" => Ok(Strategy::VersionCas),
            "unique_insert" => Ok(Strategy::UniqueInsert),
            "for_update" => Ok(Strategy::ForUpdate),
            other => Err(LockError::config(
                BACKEND,
                format!(
                    "unknown strategy `{other}`; use version_cas (the default), unique_insert or for_update"
                ),
            )),
        }
    }
}

/// Where and how to connect. Build it with [`MySqlConfig::from_url`] or
/// [`MySqlConfig::from_options`] and the setters, then [`MySqlConfig::connect`].
///
/// `Debug` never shows the password.
#[derive(Clone)]
pub struct MySqlConfig {
    pub(crate) options: MySqlConnectOptions,
    pub(crate) table: String,
    pub(crate) strategy: Strategy,
    pub(crate) pool_size: u32,
    pub(crate) held_connections: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) create_table: bool,
}

impl std::fmt::Debug for MySqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlConfig")
            .field("endpoint", &self.endpoint())
            .field("user", &self.options.get_username())
            .field("password", &"<redacted>")
            .field("table", &self.table)
            .field("strategy", &self.strategy)
            .field("pool_size", &self.pool_size)
            .field("held_connections", &self.held_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("create_table", &self.create_table)
            .finish()
    }
}

/// Query parameters this adapter reads; the rest (`ssl-mode`, `ssl-ca`, ...) go
/// to sqlx.
const OWN_PARAMS: [&str; 7] = [
    "table",
    "strategy",
    "pool_size",
    "held_connections",
    "connect_timeout",
    "request_timeout",
    "create_table",
];

impl MySqlConfig {
    /// Connections per client for single statements: 10.
    pub const DEFAULT_POOL_SIZE: u32 = 10;
    /// `for_update`: locks one client can hold or wait for at once, each on its own
    /// connection: 100.
    pub const DEFAULT_HELD_CONNECTIONS: u32 = 100;
    /// How long to wait for a connection: 5 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// How long to wait for any one statement's reply: 5 s.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

    /// Defaults around sqlx connect options (host, credentials, database, TLS).
    pub fn from_options(options: MySqlConnectOptions) -> Self {
        MySqlConfig {
            // Expiry compares TIMESTAMP columns with NOW(6): a UTC session makes that
            // immune to daylight-saving jumps of the server's zone.
            options: options.timezone(Some("+00:00".to_owned())),
            table: TableName::DEFAULT.to_owned(),
            strategy: Strategy::default(),
            pool_size: Self::DEFAULT_POOL_SIZE,
            held_connections: Self::DEFAULT_HELD_CONNECTIONS,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            create_table: true,
        }
    }

    /// Parses `mysql://user:pass@host:port/db?table=locks&strategy=for_update`.
    ///
    /// Own parameters: `table`, `strategy` (`version_cas`, `unique_insert`,
    /// `for_update`), `pool_size`, `held_connections`, `connect_timeout` and `request_timeout` (in
    /// milliseconds), `create_table` (`true`/`false`). Every other parameter is
    /// sqlx's, such as `ssl-mode` and `ssl-ca`. Errors never echo the password.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let bad = |reason: String| LockError::config(BACKEND, reason);
        let rest = url
            .strip_prefix("mysql://")
            .or_else(|| url.strip_prefix("mariadb://"));
        let Some(rest) = rest else {
            let scheme = url.split_once("://").map_or("(none)", |(scheme, _)| scheme);
            return Err(bad(format!(
                "URL scheme `{scheme}` is not mysql://; use mysql://USER:PASSWORD@HOST:3306/DATABASE"
            )));
        };
        let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut passed = Vec::new();
        let mut own = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if OWN_PARAMS.contains(&key) {
                own.push((key, value));
            } else {
                passed.push(pair);
            }
        }
        let sqlx_url = if passed.is_empty() {
            format!("mysql://{base}")
        } else {
            format!("mysql://{base}?{}", passed.join("&"))
        };
        let options = MySqlConnectOptions::from_str(&sqlx_url).map_err(|e| {
            // sqlx's messages quote the parameter, never the user-info part.
            bad(format!(
                "cannot parse the MySQL URL: {e}; expected mysql://USER:PASSWORD@HOST:3306/DATABASE"
            ))
        })?;
        let mut config = MySqlConfig::from_options(options);
        for (key, value) in own {
            config = match key {
                "table" => config.table(value),
                "strategy" => config.strategy(value.parse()?),
                "pool_size" => config.pool_size(parse_number(key, value)?),
                "held_connections" => config.held_connections(parse_number(key, value)?),
                "connect_timeout" => {
                    config.connect_timeout(Duration::from_millis(parse_number(key, value)?))
                }
                "request_timeout" => {
                    config.request_timeout(Duration::from_millis(parse_number(key, value)?))
                }
                _ => config.create_table(match value {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    other => {
                        return Err(bad(format!(
                            "create_table must be true or false, not `{other}`"
                        )));
                    }
                }),
            };
        }
        config.validate()?;
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

    /// Connections per client for single statements (default 10).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// `for_update` only: how many locks one client can hold or wait for at once
    /// (default 100). Each takes a connection of its own for as long as it is held;
    /// one more waits up to the connect timeout for a free slot.
    pub fn held_connections(mut self, count: u32) -> Self {
        self.held_connections = count;
        self
    }

    /// How long to wait for a new connection (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long to wait for a statement's reply before treating the connection as
    /// dead (default 5 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Whether `connect` creates the table when it is missing (default true).
    /// Turn it off when the user lacks the CREATE privilege and the table was
    /// created beforehand.
    pub fn create_table(mut self, create: bool) -> Self {
        self.create_table = create;
        self
    }

    /// The strategy in use.
    pub fn get_strategy(&self) -> Strategy {
        self.strategy
    }

    /// The server address, without credentials, for messages.
    pub fn endpoint(&self) -> String {
        match self.options.get_socket() {
            Some(socket) => format!("mysql://{}", socket.display()),
            None => format!(
                "mysql://{}:{}/{}",
                self.options.get_host(),
                self.options.get_port(),
                self.options.get_database().unwrap_or("")
            ),
        }
    }

    pub(crate) fn validate(&self) -> Result<TableName, LockError> {
        let bad = |reason: &str| Err(LockError::config(BACKEND, reason));
        if self.pool_size == 0 || self.held_connections == 0 {
            return bad("pool_size and held_connections must be at least 1");
        }
        if self.connect_timeout.is_zero() || self.request_timeout.is_zero() {
            return bad("connect_timeout and request_timeout must be above zero");
        }
        if self.options.get_database().is_none_or(str::is_empty) {
            return bad(
                "no database given; add it to the URL path: mysql://USER:PASSWORD@HOST:3306/DATABASE",
            );
        }
        TableName::new(&self.table)
    }

    /// Connects, creates the table if missing (unless turned off), and checks that
    /// the table belongs to this strategy.
    pub async fn connect(self) -> Result<MySqlLock, LockError> {
        crate::lock::connect(self).await
    }
}

fn parse_number<T: FromStr>(key: &str, value: &str) -> Result<T, LockError> {
    value.parse().map_err(|_| {
        LockError::config(
            BACKEND,
            format!("{key} must be a whole number, not `{value}`"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_sets_own_parameters_and_keeps_sqlx_ones() {
        let config = MySqlConfig::from_url(
            "mysql://u:s3cret@db.example:3307/app?table=locks&strategy=for_update&pool_size=3&request_timeout=1500&ssl-mode=disabled",
        )
        .unwrap();
        assert_eq!(config.table, "locks");
        assert_eq!(config.strategy, Strategy::ForUpdate);
        assert_eq!(config.pool_size, 3);
        assert_eq!(config.request_timeout, Duration::from_millis(1500));
        assert_eq!(config.endpoint(), "mysql://db.example:3307/app");
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[test]
    fn bad_urls_give_config_errors_without_the_password() {
        for url in [
            "postgres://u:s3cret@h/db",
            "mysql://u:s3cret@h/db?strategy=bogus",
            "mysql://u:s3cret@h/db?table=x;drop",
            "mysql://u:s3cret@h/db?pool_size=many",
            "mysql://u:s3cret@h/db?pool_size=0",
            "mysql://u:s3cret@h",
            "mysql://u:s3cret@h:notaport/db",
        ] {
            match MySqlConfig::from_url(url) {
                Err(e @ LockError::Config { .. }) => {
                    assert!(!e.to_string().contains("s3cret"), "{url}: {e}")
                }
                other => panic!("{url}: {other:?}"),
            }
        }
    }
}
