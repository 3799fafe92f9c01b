//! The crate's one error type for talking to the server, and its conversion into
//! [`LockError`] at the boundary (with the endpoint, never the credentials).

pub(crate) use distlock_sql::db_error::DbError;
use distlock_sql::db_error::ErrorTexts;

pub(crate) const BACKEND: &str = "postgres";

/// SQLSTATE codes the adapter acts on.
pub(crate) mod code {
    /// `unique_violation`.
    pub const UNIQUE_VIOLATION: &str = "23505";
    /// `duplicate_table` (a concurrent `CREATE TABLE IF NOT EXISTS`).
    pub const DUPLICATE_TABLE: &str = "42P07";
    /// `duplicate_object` (a concurrent `CREATE TABLE IF NOT EXISTS` that
    /// lost on the table's row type: `type "…" already exists`).
    pub const DUPLICATE_OBJECT: &str = "42710";
    /// `invalid_password`.
    pub const INVALID_PASSWORD: &str = "28P01";
    /// `invalid_authorization_specification` (no such role, pg_hba refusal).
    pub const INVALID_AUTHORIZATION: &str = "28000";
    /// `invalid_catalog_name` (no such database).
    pub const INVALID_CATALOG: &str = "3D000";
    /// `insufficient_privilege`.
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
}

/// True when the driver's I/O error is rustls refusing the handshake (an
/// untrusted certificate, a name mismatch): a setting to fix, not an outage.
#[cfg(feature = "tls")]
fn is_tls_refusal(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
}

/// Without TLS support no handshake is ever made.
#[cfg(not(feature = "tls"))]
fn is_tls_refusal(_: &std::io::Error) -> bool {
    false
}

/// The adapter's words for its errors.
pub(crate) const TEXTS: ErrorTexts = ErrorTexts {
    backend: BACKEND,
    config: config_reason,
    tls_check: "check sslmode and that sslrootcert names the CA that signed the server's \
                certificate (TLS needs the `tls` feature)",
    tls_refusal: is_tls_refusal,
};

/// The configuration problem a server error names, if it is one.
fn config_reason(e: &DbError, endpoint: &str) -> Option<String> {
    if let Some(reason) = unannounced(e, endpoint) {
        return Some(reason);
    }
    Some(match e.code()? {
        code::INVALID_PASSWORD | code::INVALID_AUTHORIZATION => format!(
            "the server at {endpoint} refused the login ({e}); check the user and password \
             (and pg_hba.conf)"
        ),
        code::INVALID_CATALOG => format!(
            "cannot use the database at {endpoint} ({e}); check the database name in the URL"
        ),
        code::INSUFFICIENT_PRIVILEGE => format!(
            "the user lacks a privilege at {endpoint} ({e}); grant CREATE on the schema (or create \
             the table yourself, see docs/backends/postgres.md, and set create_table=false) and \
             SELECT, INSERT, UPDATE, DELETE on the lock table and on its high-water table (its name plus _hw)"
        ),
        _ => return None,
    })
}

/// `invalid_sql_statement_name`: a prepared statement this connection made
/// is gone (another server connection behind a proxy).
const NO_SUCH_STATEMENT: &str = "26000";
/// `duplicate_prepared_statement`: a statement name this connection never
/// used is taken (a server connection another client prepared it on).
const DUPLICATE_STATEMENT: &str = "42P05";

/// The reason to give when `e` shows a transaction-pooling proxy the client
/// was not told about, naming the setting.
fn unannounced(e: &DbError, endpoint: &str) -> Option<String> {
    let seen = match e {
        DbError::Sql(sqlx::Error::Protocol(text)) if text.contains("NotificationResponse") => {
            "a notification arrived on a connection that never listened"
        }
        DbError::Sql(sqlx::Error::Database(db))
            if db.message().contains("unsupported startup parameter") =>
        {
            "it refused a start-up parameter of the driver"
        }
        _ if matches!(e.code(), Some(NO_SUCH_STATEMENT | DUPLICATE_STATEMENT)) => {
            "prepared statements came and went between statements of one connection"
        }
        _ => return None,
    };
    Some(format!(
        "{endpoint} looks like a transaction-pooling proxy such as PgBouncer with \
         pool_mode=transaction ({seen}: {e}); add pooler=transaction to the URL (and \
         listen_at=HOST:PORT of the server itself for LISTEN wake-ups), or connect directly"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_on_a_connection_that_never_listened_names_the_setting() {
        let seen = "execute: unexpected message: NotificationResponse".to_owned();
        let reason = unannounced(
            &DbError::Sql(sqlx::Error::Protocol(seen)),
            "postgres://h/db",
        );
        let reason = reason.expect("a pooler's sign");
        assert!(reason.contains("pooler=transaction"), "{reason}");
        let other = DbError::Sql(sqlx::Error::Protocol("something else".into()));
        assert_eq!(unannounced(&other, "postgres://h/db"), None);
    }
}
