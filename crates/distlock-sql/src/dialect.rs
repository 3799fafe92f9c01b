//! Every SQL text the crate sends, one set per dialect, kept as files in
//! `sql/<dialect>/`. Placeholders in braces (`{table}`, `{key}`, `{fence}`,
//! `{assignments}`) are replaced by validated [`Ident`]s only (or, for
//! `{assignments}`, by the caller's own SQL in [`crate::FencedRow::update_sql`]);
//! every value goes through a `?` placeholder.
//!
//! The Rust logic (validation, the admit decision, error mapping) is written
//! once; each dialect is a `Dialect` value and its files (see
//! [`crate::SqlDatabase`] for the few steps whose replies differ).

use crate::ident::Ident;
use std::sync::Arc;

/// The statements of one SQL dialect.
#[derive(Debug)]
pub struct Dialect {
    /// Creates the fence table if it does not exist. `{table}`.
    pub create_table: &'static str,
    /// Inserts the resource's row or locks the existing one, records the token
    /// if it is at least the stored one, and reports a higher stored one.
    /// Binds: resource, token (MySQL: three times). `{table}`.
    pub admit: &'static str,
    /// The stored highest token. Binds: resource. `{table}`.
    pub highest: &'static str,
    /// [`crate::SqlStore`]'s value table. `{values}`.
    pub create_values: &'static str,
    /// Sets a value, expiring after the bound microseconds unless NULL. Binds:
    /// resource, value, micros, micros. `{values}`.
    pub value_set: &'static str,
    /// Sets a value, keeping a live expiry (a counter's). Binds: resource, value.
    pub value_keep_expiry: &'static str,
    /// Binds: resource. `{values}`.
    pub value_delete: &'static str,
    /// The live value. Binds: resource. `{values}`.
    pub value_read: &'static str,
    /// The settings that decide whether a committed token survives a crash.
    pub durability: &'static str,
}

/// MySQL and MariaDB (InnoDB).
pub(crate) const MYSQL: Dialect = Dialect {
    create_table: include_str!("sql/mysql/create_table.sql"),
    admit: include_str!("sql/mysql/admit.sql"),
    highest: include_str!("sql/mysql/highest.sql"),
    create_values: include_str!("sql/mysql/create_values.sql"),
    value_set: include_str!("sql/mysql/value_set.sql"),
    value_keep_expiry: include_str!("sql/mysql/value_keep_expiry.sql"),
    value_delete: include_str!("sql/mysql/value_delete.sql"),
    value_read: include_str!("sql/mysql/value_read.sql"),
    durability: include_str!("sql/mysql/durability.sql"),
};

/// PostgreSQL 14+.
pub(crate) const POSTGRES: Dialect = Dialect {
    create_table: include_str!("sql/postgres/create_table.sql"),
    admit: include_str!("sql/postgres/admit.sql"),
    highest: include_str!("sql/postgres/highest.sql"),
    create_values: include_str!("sql/postgres/create_values.sql"),
    value_set: include_str!("sql/postgres/value_set.sql"),
    value_keep_expiry: include_str!("sql/postgres/value_keep_expiry.sql"),
    value_delete: include_str!("sql/postgres/value_delete.sql"),
    value_read: include_str!("sql/postgres/value_read.sql"),
    durability: include_str!("sql/postgres/durability.sql"),
};

/// `template` with each `{name}` replaced by its identifier, trailing
/// whitespace removed.
pub(crate) fn render(template: &str, idents: &[(&str, &Ident)]) -> Arc<str> {
    let mut sql = template.trim_end().to_owned();
    for (name, ident) in idents {
        sql = sql.replace(&format!("{{{name}}}"), ident.as_str());
    }
    sql.into()
}
