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
             SELECT, INSERT, UPDATE on the lock table"
        ),
        _ => return None,
    })
}
