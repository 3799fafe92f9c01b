//! PostgreSQL: the two strategies as two backends (`postgres` = version_cas,
//! `postgres_advisory`), each on its own table of one server launched by the
//! testkit (or `DISTLOCK_TEST_POSTGRES_URL`).
//!
//! For `advisory` the inspector reads `pg_locks` and ends the holder's
//! session, both open to the test role for its own sessions.

use crate::sql::sql_backend;
use distlock_postgres::{PgConnectOptions, PostgresConfig, Strategy};
use distlock_testkit::servers::PostgresServer;

/// Each strategy and the name of its suite.
const SUITES: &[(Strategy, &str)] = &[
    (Strategy::VersionCas, "postgres"),
    (Strategy::Advisory, "postgres_advisory"),
];

sql_backend!(
    /// The PostgreSQL adapter, as the SQL harness sees it.
    Postgres("postgres", SUITES) = PostgresServer, PostgresConfig, PgConnectOptions, Strategy
);
