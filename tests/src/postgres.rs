//! PostgreSQL: the two strategies as two backends (`postgres` = version_cas,
//! `postgres_advisory`), each on its own table of one server launched by the
//! testkit (or `DISTLOCK_TEST_POSTGRES_URL`).
//!
//! Hooks: operator deletion and residue go through the adapter's own `Inspect`
//! (for `advisory` it reads `pg_locks` and ends the holder's session, both
//! open to the test role for its own sessions); faults through a TCP fault
//! proxy; restarts on a dedicated server. Against an external server only the
//! hooks that need no access to the server process are offered.

use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_postgres::{PgConnectOptions, PostgresConfig, Strategy};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{Launched, PostgresServer, external_url};
use std::str::FromStr;
use std::sync::Arc;
use tokio::sync::OnceCell;

/// The two specs, one per strategy.
pub fn specs() -> Vec<BackendSpec> {
    [Strategy::VersionCas, Strategy::Advisory]
        .into_iter()
        .map(spec)
        .collect()
}

fn spec(strategy: Strategy) -> BackendSpec {
    BackendSpec {
        name: suite_name(strategy).into(),
        capabilities: strategy.capabilities(),
        hooks: hooks(external_url("postgres").is_some()),
        start: Box::new(move || {
            Box::pin(async move { Ok(Arc::new(PostgresHarness::start(strategy).await?) as _) })
        }),
    }
}

fn suite_name(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::VersionCas => "postgres",
        Strategy::Advisory => "postgres_advisory",
    }
}

/// Each strategy has its own table, so the two suites never meet.
fn table(strategy: Strategy) -> String {
    format!("conformance_{}", strategy.as_str())
}

fn hooks(external: bool) -> Hooks {
    Hooks {
        delete_lock: true,
        faulty_client: !external,
        restart: !external,
        residue: true,
    }
}

/// Starts a PostgreSQL server. Its start future is not `Send` (the launcher's
/// retry helper takes an async closure) and harness futures must be, so it runs
/// on a blocking thread of the same runtime.
pub async fn launch_server() -> Result<PostgresServer, BoxError> {
    // One initdb at a time: each is seconds of CPU and disk on a shared machine.
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = STARTING.lock().await;
    let runtime = tokio::runtime::Handle::current();
    Ok(tokio::task::spawn_blocking(move || runtime.block_on(PostgresServer::start())).await??)
}

#[derive(Debug)]
enum Server {
    Launched(Box<PostgresServer>),
    External(String),
}

impl Server {
    fn url(&self) -> String {
        match self {
            Server::Launched(server) => server.url(),
            Server::External(url) => url.clone(),
        }
    }

    fn launched(&self) -> Result<&PostgresServer, BoxError> {
        match self {
            Server::Launched(server) => Ok(server),
            Server::External(_) => Err("this needs a launched server".into()),
        }
    }
}

/// One server for the two suites of this test binary.
static SHARED: OnceCell<Arc<Server>> = OnceCell::const_new();

/// The harness of one strategy.
#[derive(Debug)]
pub struct PostgresHarness {
    strategy: Strategy,
    server: Arc<Server>,
    /// The client whose `Inspect` deletes holders and counts residue.
    inspector: DynLock,
}

impl PostgresHarness {
    async fn start(strategy: Strategy) -> Result<Self, BoxError> {
        let server = SHARED
            .get_or_try_init(|| async {
                Ok::<_, BoxError>(Arc::new(match external_url("postgres") {
                    Some(url) => Server::External(url),
                    None => Server::Launched(Box::new(launch_server().await?)),
                }))
            })
            .await?
            .clone();
        Self::on(strategy, server).await
    }

    /// A harness of `strategy` on a server of its own.
    pub async fn launch(strategy: Strategy) -> Result<Self, BoxError> {
        let server = Arc::new(Server::Launched(Box::new(launch_server().await?)));
        Self::on(strategy, server).await
    }

    async fn on(strategy: Strategy, server: Arc<Server>) -> Result<Self, BoxError> {
        // Connecting creates the table before cases run in parallel.
        let inspector = Arc::new(config(strategy, &server)?.connect().await?);
        Ok(PostgresHarness {
            strategy,
            server,
            inspector,
        })
    }
}

fn config(strategy: Strategy, server: &Server) -> Result<PostgresConfig, BoxError> {
    Ok(PostgresConfig::from_url(&server.url())?
        .table(table(strategy))
        .strategy(strategy))
}

#[async_trait]
impl Harness for PostgresHarness {
    fn name(&self) -> &str {
        suite_name(self.strategy)
    }

    fn capabilities(&self) -> Capabilities {
        self.strategy.capabilities()
    }

    fn hooks(&self) -> Hooks {
        hooks(matches!(*self.server, Server::External(_)))
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        Ok(Arc::new(
            config(self.strategy, &self.server)?.connect().await?,
        ))
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let server = self.server.launched()?;
        let proxy = Arc::new(FaultProxy::start(server.addr()).await?);
        let options = PgConnectOptions::from_str(&server.url())?
            .host("127.0.0.1")
            .port(proxy.addr().port());
        let lock = PostgresConfig::from_options(options)
            .table(table(self.strategy))
            .strategy(self.strategy)
            .connect()
            .await?;
        Ok(FaultyClient::new(Arc::new(lock), proxy))
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch(self.strategy).await?))
    }

    fn launched(&self) -> Option<&dyn Launched> {
        match &*self.server {
            Server::Launched(server) => Some(&**server),
            Server::External(_) => None,
        }
    }

    fn lock_url(&self) -> Option<String> {
        let strategy = self.strategy.as_str();
        Some(format!(
            "{}?strategy={strategy}&table={}",
            self.server.url(),
            table(self.strategy)
        ))
    }
}
