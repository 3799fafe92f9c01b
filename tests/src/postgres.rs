//! PostgreSQL: the two strategies as two backends (`postgres` = version_cas,
//! `postgres_advisory`), each on its own table of one server launched by the
//! testkit (or `DISTLOCK_TEST_POSTGRES_URL`); and `postgres_pgbouncer`,
//! version_cas through PgBouncer in transaction pooling mode with
//! `pooler=transaction` (or `DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL`, which
//! names the proxy and carries `?pooler=transaction` itself).
//!
//! For `advisory` the inspector reads `pg_locks` and ends the holder's
//! session, both open to the test role for its own sessions.

use crate::sql::{SqlBackend, Statics, sql_backend};
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_postgres::{PgConnectOptions, Pooler, PostgresConfig, Strategy};
use distlock_testkit::servers::{PgBouncerServer, PostgresServer, ServerError};
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

/// Each strategy and the name of its suite.
const SUITES: &[(Strategy, &str)] = &[
    (Strategy::VersionCas, "postgres"),
    (Strategy::Advisory, "postgres_advisory"),
];

sql_backend!(
    /// The PostgreSQL adapter, as the SQL harness sees it.
    Postgres("postgres", SUITES) = PostgresServer, PostgresConfig, PgConnectOptions, Strategy
);

/// The PostgreSQL adapter with `pooler=transaction`, through PgBouncer in
/// transaction pooling mode (`advisory` is refused there).
#[derive(Debug)]
pub struct PgBouncer;

impl SqlBackend for PgBouncer {
    type Server = PgBouncerServer;
    type Strategy = Strategy;
    const NAME: &'static str = "postgres_pgbouncer";
    const SUITES: &'static [(Strategy, &'static str)] =
        &[(Strategy::VersionCas, "postgres_pgbouncer")];

    fn statics() -> &'static Statics<Self> {
        static STATICS: Statics<PgBouncer> = Statics::unstarted();
        &STATICS
    }

    fn start() -> impl Future<Output = Result<PgBouncerServer, ServerError>> {
        PgBouncerServer::start()
    }

    fn url(server: &PgBouncerServer) -> String {
        format!("{}?pooler=transaction", server.url())
    }

    fn addr(server: &PgBouncerServer) -> SocketAddr {
        server.addr()
    }

    fn strategy_name(strategy: Strategy) -> &'static str {
        strategy.as_str()
    }

    fn capabilities(strategy: Strategy) -> Capabilities {
        strategy.capabilities()
    }

    async fn connect(
        url: &str,
        proxy: Option<u16>,
        table: String,
        strategy: Strategy,
        state_ttl: Option<Duration>,
    ) -> Result<DynLock, BoxError> {
        let config = match proxy {
            None => PostgresConfig::from_url(url)?,
            Some(port) => PostgresConfig::from_options(
                PgConnectOptions::from_str(url)?
                    .host("127.0.0.1")
                    .port(port),
            )
            .pooler(Pooler::Transaction),
        };
        let config = match state_ttl {
            Some(state_ttl) => config.state_ttl(state_ttl),
            None => config,
        };
        Ok(config.table(table).strategy(strategy).connect().await?)
    }
}
