//! `version_cas`'s and `unique_insert`'s doorbells (distlock-sql's
//! `table::bell`): a named server lock per lock name, `GET_LOCK` on a
//! connection of the holders' pool, which one acquire's attempts all run on.
//! The wait for the bell and the attempt's CAS go as one text, as do the
//! release and the bell's give-back (`RELEASE_ALL_LOCKS()`): a release hands
//! the lock to the first waiter in the server's queue without a round trip in
//! between. Sent as text, values are written into it as literals (binary
//! values as hex, numbers as digits).
//!
//! Named locks are server-wide, so the bell's name is a hash of the table's
//! and the lock's names (64 characters at most).

use crate::backend::Table;
use crate::error::DbError;
use crate::keys::{hex_literal, row_name};
use crate::pool::{Conn, Thread};
use crate::protocol::{BELL_GIVE_BACK, BELL_WAIT, BELL_WAIT_THEN};
use distlock_core::LockKey;
use distlock_sql::pool::BoxFuture;
use distlock_sql::table::Value;
use distlock_sql::table::bell::{Doorbell, Rung};
use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, Row, SqlSafeStr, SqlStr};
use std::time::Duration;

impl Table {
    /// `key`'s bell: `distlock:` and 40 hex digits of the SHA-256 of the
    /// table's name, a zero byte and the row's name.
    fn bell(&self, key: &LockKey) -> String {
        let mut hash = Sha256::new();
        hash.update(self.name.as_str().as_bytes());
        hash.update([0]);
        hash.update(row_name(key));
        let hex: String = hash.finalize()[..20]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        format!("distlock:{hex}")
    }
}

impl Doorbell<Thread> for Table {
    fn connection(&self) -> BoxFuture<'_, Option<Conn>> {
        Box::pin(async move {
            let mut conn = self.holders.try_get().await?.ok()?;
            // Dropped while it may keep a bell, the connection is closed, and
            // the server gives the bell back.
            conn.may_hold();
            Some(conn)
        })
    }

    fn ring<'a>(
        &'a self,
        conn: &'a mut Conn,
        key: &'a LockKey,
        bound: Duration,
        then: Option<(&'a SqlStr, &'a [Value])>,
    ) -> BoxFuture<'a, Result<Rung, DbError>> {
        Box::pin(async move {
            let seconds = format!("{}.{:06}", bound.as_secs(), bound.subsec_micros());
            let template = if then.is_some() {
                BELL_WAIT_THEN
            } else {
                BELL_WAIT
            };
            let mut text = template
                .trim_end()
                .replace("{bell}", &self.bell(key))
                .replace("{seconds}", &seconds);
            if let Some((sql, values)) = then {
                text = text.replace("{then}", &inline(sql.as_str(), values)?);
            }
            let limit = bound + self.holders.timeout();
            let rows = conn.fetch_all_text(text_sql(text), limit).await?;
            let row = rows
                .first()
                .ok_or_else(|| DbError::Protocol("the doorbell's wait answered no row".into()))?;
            let number = |column| row.try_get::<Option<i64>, _>(column).map_err(DbError::Sql);
            let (kept, waited) = (number(0)?, number(1)?.unwrap_or(0));
            let answer = match then {
                Some(_) => {
                    let id: u64 = row.try_get(2).map_err(DbError::Sql)?;
                    let matched = number(3)?.unwrap_or(0);
                    Some((id, u64::try_from(matched).unwrap_or(0)))
                }
                None => None,
            };
            Ok(Rung {
                kept: kept == Some(1),
                waited: Duration::from_micros(u64::try_from(waited).unwrap_or(0)),
                answer,
            })
        })
    }

    fn release<'a>(
        &'a self,
        conn: &'a mut Conn,
        (sql, values): (&'a SqlStr, &'a [Value]),
    ) -> BoxFuture<'a, Result<u64, DbError>> {
        Box::pin(async move {
            let text = format!(
                "{};\n{}",
                inline(sql.as_str(), values)?,
                BELL_GIVE_BACK.trim_end()
            );
            let done = conn
                .execute_text(text_sql(text), self.holders.timeout())
                .await?;
            Ok(done.rows_affected())
        })
    }
}

/// Our own statement text, with only literals written into it.
fn text_sql(text: String) -> SqlStr {
    AssertSqlSafe(text).into_sql_str()
}

/// `sql` with each `?` replaced by the next of `values` as a literal. Our
/// statements have no `?` anywhere else.
fn inline(sql: &str, values: &[Value]) -> Result<String, DbError> {
    let mut values = values.iter();
    let mut text = String::with_capacity(sql.len() + 64);
    for (i, part) in sql.split('?').enumerate() {
        if i > 0 {
            let value = values.next().ok_or_else(|| {
                DbError::Protocol("a statement has more placeholders than values".into())
            })?;
            text.push_str(&literal(value));
        }
        text.push_str(part);
    }
    if values.next().is_some() {
        return Err(DbError::Protocol(
            "a statement has fewer placeholders than values".into(),
        ));
    }
    Ok(text)
}

/// `value` as a literal: binary values (every name, owner and metadata
/// column is `VARBINARY`) as hex, numbers as digits.
fn literal(value: &Value) -> String {
    match value {
        Value::Bytes(bytes) => hex_literal(bytes),
        Value::Text(text) => hex_literal(text.as_bytes()),
        Value::Int(n) | Value::MaybeInt(Some(n)) => n.to_string(),
        Value::MaybeInt(None) => "NULL".to_owned(),
        Value::Flag(flag) => u8::from(*flag).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_become_literals_in_order() {
        let values = [
            Value::Bytes(b"a'b".as_slice().into()),
            Value::Text("o".into()),
            Value::Int(7),
            Value::MaybeInt(None),
            Value::Flag(true),
        ];
        let text = inline("f(?, ?, ?, ?, ?)", &values).unwrap();
        assert_eq!(text, "f(X'612762', X'6F', 7, NULL, 1)");
        assert!(inline("f(?, ?)", &values[..1]).is_err());
        assert!(inline("f(?)", &values[..2]).is_err());
    }
}
