//! What `MySqlConfig` and `PostgresConfig` hold and read alike, written once:
//! the server's connect options, the table, the strategy and the shared
//! [`Settings`]; how their URL is read and checked; their two pools. Each
//! config keeps only its database's own TLS parameters and extras. Not a
//! stable API.

use crate::adapter::{ServerOptions, Settings, TableName, check_scheme, read_server};
use crate::db::SqlDatabase;
use crate::pool::{Pool, PoolDialect};
use distlock_core::LockError;
use distlock_core::toolkit::LockUrl;
use sqlx::{Connection, Database};
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

/// The connect options of `DB`.
pub type Options<DB> = <<DB as Database>::Connection as Connection>::Options;

/// An adapter's strategy choice, as its URL names it.
pub trait SqlStrategy:
    Copy + Default + fmt::Debug + FromStr<Err = LockError> + Send + Sync + 'static
{
    /// Every strategy's name, as `?strategy=` takes it.
    const NAMES: &'static [&'static str];

    /// The table used when none is configured.
    fn default_table(self) -> &'static str {
        "distlock_locks"
    }
}

/// What a database's lock URL looks like, for reading it and for the errors
/// that show how it should look.
#[derive(Debug)]
pub struct UrlForm {
    /// Its two schemes (`mysql`, `mariadb`).
    pub schemes: [&'static str; 2],
    /// An example, `mysql://USER:PASSWORD@HOST:3306/DATABASE`.
    pub example: &'static str,
    /// The error for a URL with several hosts.
    pub several: &'static str,
}

/// A lock config's server, table, strategy and settings.
pub struct SqlConfig<DB: Database, S> {
    /// The sqlx connect options (server, credentials, database, TLS).
    pub options: Options<DB>,
    /// The table given, if any.
    pub table: Option<String>,
    /// The strategy.
    pub strategy: S,
    /// The settings both databases have.
    pub settings: Settings,
    database: PhantomData<fn() -> DB>,
}

impl<DB: Database, S: Clone> Clone for SqlConfig<DB, S> {
    fn clone(&self) -> Self {
        SqlConfig {
            options: self.options.clone(),
            table: self.table.clone(),
            strategy: self.strategy.clone(),
            settings: self.settings.clone(),
            database: PhantomData,
        }
    }
}

impl<DB, S> fmt::Debug for SqlConfig<DB, S>
where
    DB: SqlDatabase,
    S: SqlStrategy,
    Options<DB>: ServerOptions,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fields(&mut f.debug_struct("SqlConfig")).finish()
    }
}

impl<DB, S> SqlConfig<DB, S>
where
    DB: SqlDatabase,
    S: SqlStrategy,
    Options<DB>: ServerOptions,
{
    /// Defaults around `options`.
    pub fn new(options: Options<DB>) -> Self {
        SqlConfig {
            options,
            table: None,
            strategy: S::default(),
            settings: Settings::default(),
            database: PhantomData,
        }
    }

    /// Parses `text` as `form`'s URL: its parameters, still to be taken, and
    /// `options` with its server, user, password and database.
    pub fn read_server(
        form: &UrlForm,
        text: &str,
        options: Options<DB>,
    ) -> Result<(LockUrl, Options<DB>), LockError> {
        let url = LockUrl::parse(DB::BACKEND, text)?;
        check_scheme(&url, form.schemes, form.example)?;
        let options = read_server(&url, options, form.several)?;
        Ok((url, options))
    }

    /// Takes `strategy`, `table` and the shared settings from `url`.
    pub fn read_params(mut self, url: &mut LockUrl) -> Result<Self, LockError> {
        if let Some(strategy) = url.choice("strategy", S::NAMES)? {
            self.strategy = strategy.parse()?;
        }
        if let Some(table) = url.string("table") {
            self.table = Some(table);
        }
        self.settings = self.settings.read(url)?;
        Ok(self)
    }

    /// The table this config uses.
    pub fn table_name(&self) -> &str {
        self.table
            .as_deref()
            .unwrap_or(self.strategy.default_table())
    }

    /// The server address, without credentials, for messages.
    pub fn endpoint(&self) -> String {
        DB::endpoint(&self.options)
    }

    /// Checks the settings, that a database is named, and the table name.
    pub fn validate(&self, form: &UrlForm) -> Result<TableName<DB>, LockError> {
        self.settings.validate(DB::BACKEND)?;
        if self.options.database_name().is_none_or(str::is_empty) {
            return Err(LockError::config(
                DB::BACKEND,
                format!(
                    "no database given; add it to the URL path: {}",
                    form.example
                ),
            ));
        }
        TableName::new(self.table_name())
    }

    /// Adds the config's fields to its `Debug`, never the password.
    pub fn fields<'f, 'a, 'b>(
        &self,
        debug: &'f mut fmt::DebugStruct<'a, 'b>,
    ) -> &'f mut fmt::DebugStruct<'a, 'b> {
        debug
            .field("endpoint", &self.endpoint())
            .field("user", &self.options.user_name())
            .field("password", &"<redacted>")
            .field("table", &self.table_name())
            .field("strategy", &self.strategy);
        self.settings.fields(debug)
    }

    /// The pool for single statements, whose connections first run `setup`,
    /// and the one for held locks (a connection each), whose connections run
    /// `holder_setup` and, when `transactional`, have autocommit off.
    pub fn pools<D: PoolDialect<Database = DB>>(
        &self,
        setup: &'static [&'static str],
        holder_setup: &'static [&'static str],
        transactional: bool,
    ) -> (Pool<D>, Pool<D>) {
        let settings = &self.settings;
        let pool = Pool::new(
            self.options.clone(),
            self.endpoint(),
            settings.pool_size,
            setup,
            false,
            settings.timeouts,
        );
        let holders = Pool::new(
            self.options.clone(),
            self.endpoint(),
            settings.held_connections,
            holder_setup,
            transactional,
            settings.timeouts,
        );
        (pool, holders)
    }
}

/// The connect options of an application's own pool, which `from_pool` opens
/// the adapter's connections with (why its connections are not borrowed is
/// in each adapter's `from_pool`).
pub fn pool_options<DB: Database>(pool: &sqlx::Pool<DB>) -> Options<DB> {
    (*pool.connect_options()).clone()
}

/// The error for a TLS setting this build cannot honour: `setting` (the URL
/// parameter) needs the `tls` feature, of the facade or of `adapter` (the
/// crate's name).
pub fn tls_missing(url: &LockUrl, setting: &str, adapter: &str) -> LockError {
    url.error(format_args!(
        "this {setting} needs TLS support, which this build lacks: enable the `tls` \
         feature of the distlock crate (or of {adapter} when used directly)"
    ))
}
