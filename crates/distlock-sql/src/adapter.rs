//! What `distlock-mysql` and `distlock-postgres` share, written once rather
//! than copied into each: their URL's server and settings, and the lock table's
//! validated name. Not a stable API.

use crate::db::SqlDatabase;
use distlock_core::toolkit::{DEFAULT_STATE_TTL, LockUrl, Timeouts, check_state_ttl};
use distlock_core::{AcquireOptions, LockError};
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

/// The settings of an SQL lock client beside its server: the two pools, the
/// two waits, table creation, the acquire defaults and how long idle rows are
/// kept.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Connections per client for single statements.
    pub pool_size: u32,
    /// Locks one client can hold or wait for at once on a connection of their
    /// own (`for_update`, `advisory`).
    pub held_connections: u32,
    /// The connect and reply timeouts.
    pub timeouts: Timeouts,
    /// Whether `connect` creates missing tables.
    pub create_table: bool,
    /// The lock's default acquire options.
    pub defaults: AcquireOptions,
    /// How long a name's rows outlive its last lease before an acquire may
    /// collect them.
    pub state_ttl: Duration,
}

impl Settings {
    /// Connections per client for single statements: 10.
    pub const DEFAULT_POOL_SIZE: u32 = 10;
    /// Locks one client can hold or wait for at once: 100.
    pub const DEFAULT_HELD_CONNECTIONS: u32 = 100;
    /// How long to wait for a new connection, and for any one statement's
    /// reply: 5 s each.
    pub const DEFAULT_TIMEOUTS: Timeouts =
        Timeouts::new(Duration::from_secs(5), Duration::from_secs(5));

    /// Takes `pool_size`, `held_connections`, `connect_timeout`, `timeout`,
    /// `create_table`, `state_ttl` and the acquire defaults (`ttl`, `wait`,
    /// `renewal`, `max_hold`, `min_hold`) from `url`.
    pub fn read(mut self, url: &mut LockUrl) -> Result<Self, LockError> {
        let count = "a whole number of connections";
        if let Some(size) = url.parse_param("pool_size", count)? {
            self.pool_size = size;
        }
        if let Some(count) = url.parse_param("held_connections", count)? {
            self.held_connections = count;
        }
        self.timeouts = self.timeouts.read(url)?;
        if let Some(create) = url.bool("create_table")? {
            self.create_table = create;
        }
        self.defaults = AcquireOptions::new().read(url)?;
        self.state_ttl = url.duration("state_ttl")?.unwrap_or(self.state_ttl);
        Ok(self)
    }

    /// Refuses an empty pool, a zero wait and a `state_ttl` below the
    /// minimum, naming `backend`.
    pub fn validate(&self, backend: &'static str) -> Result<(), LockError> {
        if self.pool_size == 0 || self.held_connections == 0 {
            return Err(LockError::config(
                backend,
                "pool_size and held_connections must be at least 1",
            ));
        }
        check_state_ttl(backend, self.state_ttl)?;
        self.timeouts.validate(backend)
    }

    /// Adds each setting to a config's `Debug` as a field of its own, so a
    /// config shows them as it always did.
    pub fn fields<'f, 'a, 'b>(
        &self,
        debug: &'f mut fmt::DebugStruct<'a, 'b>,
    ) -> &'f mut fmt::DebugStruct<'a, 'b> {
        debug
            .field("pool_size", &self.pool_size)
            .field("held_connections", &self.held_connections)
            .field("timeouts", &self.timeouts)
            .field("create_table", &self.create_table)
            .field("defaults", &self.defaults)
            .field("state_ttl", &self.state_ttl)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            pool_size: Self::DEFAULT_POOL_SIZE,
            held_connections: Self::DEFAULT_HELD_CONNECTIONS,
            timeouts: Self::DEFAULT_TIMEOUTS,
            create_table: true,
            defaults: AcquireOptions::new(),
            state_ttl: DEFAULT_STATE_TTL,
        }
    }
}

/// The server `options` name, without credentials, for messages: the same
/// text the fence and the store name it by.
pub fn endpoint<DB: SqlDatabase>(
    options: &<DB::Connection as sqlx::Connection>::Options,
) -> String {
    DB::endpoint(options)
}

/// Refuses a URL whose scheme is neither of `schemes`, suggesting `example`.
pub fn check_scheme(url: &LockUrl, schemes: [&str; 2], example: &str) -> Result<(), LockError> {
    if schemes.contains(&url.scheme()) {
        return Ok(());
    }
    Err(url.error(format_args!(
        "scheme `{}` is not {}:// or {}://; use {example}",
        url.scheme(),
        schemes[0],
        schemes[1]
    )))
}

/// The connect options of both databases, as far as a lock URL sets them.
pub trait ServerOptions: Sized {
    /// The server's host name or address.
    fn with_host(self, host: &str) -> Self;
    /// The server's port.
    fn with_port(self, port: u16) -> Self;
    /// The user to log in as.
    fn with_username(self, user: &str) -> Self;
    /// The user's password.
    fn with_password(self, password: &str) -> Self;
    /// The database.
    fn with_database(self, database: &str) -> Self;
    /// The database set, if any.
    fn database_name(&self) -> Option<&str>;
    /// The user set.
    fn user_name(&self) -> &str;
}

/// sqlx's connect options of each database have these setters under the
/// same names, though no trait of sqlx's names them.
macro_rules! server_options {
    ($($options:ty),*) => {$(
        impl ServerOptions for $options {
            fn with_host(self, host: &str) -> Self {
                self.host(host)
            }
            fn with_port(self, port: u16) -> Self {
                self.port(port)
            }
            fn with_username(self, user: &str) -> Self {
                self.username(user)
            }
            fn with_password(self, password: &str) -> Self {
                self.password(password)
            }
            fn with_database(self, database: &str) -> Self {
                self.database(database)
            }
            fn database_name(&self) -> Option<&str> {
                self.get_database()
            }
            fn user_name(&self) -> &str {
                self.get_username()
            }
        }
    )*};
}
server_options!(MySqlConnectOptions, PgConnectOptions);

/// `options` with the server, user, password and database of `url`, which
/// names one server at most (`several` is the error for more: a lock lives on
/// the primary alone).
pub fn read_server<O: ServerOptions>(
    url: &LockUrl,
    mut options: O,
    several: &str,
) -> Result<O, LockError> {
    match url.hosts() {
        [] => {}
        [host] => {
            options = options.with_host(&host.host);
            if let Some(port) = host.port {
                options = options.with_port(port);
            }
        }
        _ => return Err(url.error(several)),
    }
    if let Some(user) = url.user() {
        options = options.with_username(user);
    }
    if let Some(password) = url.password() {
        options = options.with_password(password);
    }
    if let Some(database) = url.path().filter(|path| !path.is_empty()) {
        options = options.with_database(database);
    }
    Ok(options)
}

/// Ends reading `url`: refuses any parameter nobody took, then runs the
/// config's own `validate`, its config errors naming the URL.
pub fn finish<T>(
    url: &LockUrl,
    validate: impl FnOnce() -> Result<T, LockError>,
) -> Result<(), LockError> {
    url.finish()?;
    validate().map_err(|e| match e {
        LockError::Config { reason, .. } => url.error(reason),
        other => other,
    })?;
    Ok(())
}

/// The setters every SQL lock config has, over the settings of its
/// `base: SqlConfig` field, with the per-database sentences given: `held` opens the
/// `held_connections` doc (which strategy holds connections), `create` ends
/// the `create_table` doc, `table` is the `table` doc; `strategy` and
/// `options` are the config's strategy and connect options types.
#[macro_export]
macro_rules! settings_setters {
    (
        held: $held:literal,
        create: $create:literal,
        table: $table:literal,
        strategy: $strategy:ty,
        options: $options:ty $(,)?
    ) => {
        #[doc = $table]
        pub fn table(mut self, table: impl Into<String>) -> Self {
            self.base.table = Some(table.into());
            self
        }

        /// The strategy (default `version_cas`).
        pub fn strategy(mut self, strategy: $strategy) -> Self {
            self.base.strategy = strategy;
            self
        }

        /// The strategy in use.
        pub fn get_strategy(&self) -> $strategy {
            self.base.strategy
        }

        /// The sqlx connect options (server, credentials, database, TLS and
        /// session settings), for other clients of the same server, such as a
        /// fenced store.
        pub fn connect_options(&self) -> $options {
            self.base.options.clone()
        }

        /// The server address, without credentials, for messages.
        pub fn endpoint(&self) -> String {
            self.base.endpoint()
        }

        /// Connections per client for single statements: 10.
        pub const DEFAULT_POOL_SIZE: u32 = $crate::adapter::Settings::DEFAULT_POOL_SIZE;
        #[doc = concat!($held, ": locks one client can hold or wait for at once, each on its own connection: 100.")]
        pub const DEFAULT_HELD_CONNECTIONS: u32 =
            $crate::adapter::Settings::DEFAULT_HELD_CONNECTIONS;
        /// How long to wait for a new connection, and for any one statement's
        /// reply: 5 s each.
        pub const DEFAULT_TIMEOUTS: distlock_core::toolkit::Timeouts =
            $crate::adapter::Settings::DEFAULT_TIMEOUTS;

        /// Connections per client for single statements (default 10).
        pub fn pool_size(mut self, size: u32) -> Self {
            self.base.settings.pool_size = size;
            self
        }

        #[doc = concat!($held, " only: how many locks one client can hold or wait for at once (default 100). Each takes a connection of its own for as long as it is held; one more waits up to the connect timeout for a free slot.")]
        pub fn held_connections(mut self, count: u32) -> Self {
            self.base.settings.held_connections = count;
            self
        }

        /// How long to wait for a new connection, and for a statement's reply before
        /// treating the connection as dead (default 5 s each).
        pub fn timeouts(mut self, timeouts: distlock_core::toolkit::Timeouts) -> Self {
            self.base.settings.timeouts = timeouts;
            self
        }

        #[doc = concat!("Whether `connect` creates the table when it is missing (default true).", $create)]
        pub fn create_table(mut self, create: bool) -> Self {
            self.base.settings.create_table = create;
            self
        }

        /// The lock's [`distlock_core::DistributedLock::default_options`] (the URL's
        /// `ttl`, `wait`, `renewal`, `max_hold`, `min_hold`), checked against the strategy's
        /// limits at connect.
        pub fn defaults(mut self, defaults: distlock_core::AcquireOptions) -> Self {
            self.base.settings.defaults = defaults;
            self
        }

        /// How long a name's rows outlive its last lease (default 24 h, at least
        /// 2 s): once a name has been idle (not held) this long after its last
        /// lease's expiry, an acquire that creates a new row may delete its
        /// row, a bounded number per acquire, so a service that locks ever new
        /// names does not leave a row per name forever. Tokens still only rise:
        /// the deleting transaction raises the namespace's floor row to the
        /// highest token it deletes, and a new row starts above that floor.
        /// Each client applies its own `state_ttl` to what it collects; give
        /// every client of a table the same one.
        pub fn state_ttl(mut self, state_ttl: std::time::Duration) -> Self {
            self.base.settings.state_ttl = state_ttl;
            self
        }

        /// The connect and reply timeouts.
        pub fn get_timeouts(&self) -> distlock_core::toolkit::Timeouts {
            self.base.settings.timeouts
        }
    };
}

/// A lock table name checked to be a plain identifier (the toolkit's
/// [`distlock_core::toolkit::sql_identifier_problem`], and `DB`'s own limits).
/// It is the only text ever placed into SQL, so nothing else may pass.
pub struct TableName<DB>(String, PhantomData<fn() -> DB>);

impl<DB: SqlDatabase> TableName<DB> {
    /// The table used when none is configured.
    pub const DEFAULT: &'static str = "distlock_locks";

    /// Validates `name`; anything but a plain identifier is a `Config` error.
    pub fn new(name: &str) -> Result<Self, LockError> {
        let problem =
            distlock_core::toolkit::sql_identifier_problem(name, "table name", Self::DEFAULT)
                .or_else(|| DB::table_name_problem(name, Self::DEFAULT));
        match problem {
            None => Ok(TableName(name.to_owned(), PhantomData)),
            Some(reason) => Err(LockError::config(DB::BACKEND, reason)),
        }
    }
}

impl<DB> TableName<DB> {
    /// The name as validated.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<DB> Clone for TableName<DB> {
    fn clone(&self) -> Self {
        TableName(self.0.clone(), PhantomData)
    }
}

impl<DB> PartialEq for TableName<DB> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<DB> Eq for TableName<DB> {}

impl<DB> fmt::Debug for TableName<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TableName").field(&self.0).finish()
    }
}

impl<DB> fmt::Display for TableName<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
