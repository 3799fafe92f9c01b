//! The conformance harness of the SQL adapters, written once: each strategy of
//! an adapter is a backend of its own, on its own table of one server launched
//! by the testkit (or `DISTLOCK_TEST_<NAME>_URL`).
//!
//! Hooks: operator deletion and residue go through the adapter's own `Inspect`,
//! which needs only the test user's own rights; faults through a TCP fault
//! proxy; restarts on a dedicated server. Against an external server only the
//! hooks that need no access to the server process are offered.

use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{Launched, ServerError, external_url};
use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OnceCell};

/// What the harness needs to know of one SQL adapter and its server.
/// `sql_backend!` implements it.
pub trait SqlBackend: Debug + Sized + Send + Sync + 'static {
    /// The testkit's launcher of the server.
    type Server: Launched + Debug + 'static;
    /// The adapter's strategy.
    type Strategy: Copy + Debug + PartialEq + Send + Sync + 'static;

    /// The name an external server's URL is read under (`external_url`).
    const NAME: &'static str;
    /// The strategies under test, each with the name of its suite.
    const SUITES: &'static [(Self::Strategy, &'static str)];

    /// This adapter's state for the whole test binary: statics cannot be
    /// generic, so each adapter declares its own.
    fn statics() -> &'static Statics<Self>;

    /// Starts a server. The launchers' futures are not `Send`, so this one need
    /// not be either: [`launch_server`] runs it on a thread of its own.
    fn start() -> impl Future<Output = Result<Self::Server, ServerError>>;

    /// The test user's URL of `server`.
    fn url(server: &Self::Server) -> String;

    /// Where `server` listens, for a fault proxy in front of it.
    fn addr(server: &Self::Server) -> SocketAddr;

    /// `strategy`'s name in a lock URL.
    fn strategy_name(strategy: Self::Strategy) -> &'static str;

    /// What `strategy` can do.
    fn capabilities(strategy: Self::Strategy) -> Capabilities;

    /// A client of `strategy` on `table`, from the lock URL `url`; with `proxy`,
    /// from the sqlx options of `url` with the host and port replaced by the
    /// fault proxy's local port; with `state_ttl`, collecting names idle that long.
    fn connect(
        url: &str,
        proxy: Option<u16>,
        table: String,
        strategy: Self::Strategy,
        state_ttl: Option<Duration>,
    ) -> impl Future<Output = Result<DynLock, BoxError>> + Send;
}

/// Declares `Backend` and implements [`SqlBackend`] for it, as in
/// `sql_backend!(Backend("name", SUITES) = Server, Config, ConnectOptions, Strategy)`,
/// from the inherent methods that the SQL adapters' server launchers, configs,
/// sqlx connect options and strategies share (the adapters are built alike, so
/// the glue is written once here).
macro_rules! sql_backend {
    ($(#[$doc:meta])* $backend:ident($name:literal, $suites:expr) =
        $server:ty, $config:ty, $options:ty, $strategy:ty $(,)?) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $backend;

        impl $crate::sql::SqlBackend for $backend {
            type Server = $server;
            type Strategy = $strategy;
            const NAME: &'static str = $name;
            const SUITES: &'static [($strategy, &'static str)] = $suites;

            fn statics() -> &'static $crate::sql::Statics<Self> {
                static STATICS: $crate::sql::Statics<$backend> = $crate::sql::Statics::unstarted();
                &STATICS
            }

            fn start() -> impl ::std::future::Future<
                Output = Result<$server, distlock_testkit::servers::ServerError>,
            > {
                <$server>::start()
            }

            fn url(server: &$server) -> String {
                server.url()
            }

            fn addr(server: &$server) -> ::std::net::SocketAddr {
                server.addr()
            }

            fn strategy_name(strategy: $strategy) -> &'static str {
                strategy.as_str()
            }

            fn capabilities(strategy: $strategy) -> distlock_core::Capabilities {
                strategy.capabilities()
            }

            async fn connect(
                url: &str,
                proxy: Option<u16>,
                table: String,
                strategy: $strategy,
                state_ttl: Option<::std::time::Duration>,
            ) -> Result<distlock_core::DynLock, distlock_core::BoxError> {
                let config = match proxy {
                    None => <$config>::from_url(url)?,
                    Some(port) => <$config>::from_options(
                        <$options as ::std::str::FromStr>::from_str(url)?
                            .host("127.0.0.1")
                            .port(port),
                    ),
                };
                let config = match state_ttl {
                    Some(state_ttl) => config.state_ttl(state_ttl),
                    None => config,
                };
                Ok(config.table(table).strategy(strategy).connect().await?)
            }
        }
    };
}
pub(crate) use sql_backend;

/// One adapter's state for the whole test binary.
#[derive(Debug)]
pub struct Statics<B: SqlBackend> {
    /// Serializes server starts: each is seconds of CPU and disk on a shared
    /// machine, and overlapping them only makes every start slower.
    starting: Mutex<()>,
    /// The one server all the adapter's suites share. A static is never
    /// dropped, so this server outlives the tests: at the process's exit its
    /// watchdog stops it and removes its scratch dir (a container's, the
    /// run's docker watchdog).
    shared: OnceCell<Arc<Server<B>>>,
}

impl<B: SqlBackend> Statics<B> {
    /// Nothing started yet: what each adapter's static starts as.
    pub const fn unstarted() -> Self {
        Statics {
            starting: Mutex::const_new(()),
            shared: OnceCell::const_new(),
        }
    }
}

/// One spec per strategy of `B`.
pub fn specs<B: SqlBackend>() -> Vec<BackendSpec> {
    B::SUITES
        .iter()
        .map(|&(strategy, suite)| BackendSpec {
            name: suite.into(),
            capabilities: B::capabilities(strategy),
            hooks: hooks(external_url(B::NAME).is_some()),
            start: Box::new(move || {
                Box::pin(async move {
                    Ok(Arc::new(SqlHarness::<B>::start(strategy, suite).await?) as _)
                })
            }),
        })
        .collect()
}

/// The suite of `strategy`.
fn suite_of<B: SqlBackend>(strategy: B::Strategy) -> Result<&'static str, BoxError> {
    let &(_, suite) = B::SUITES
        .iter()
        .find(|(suite_strategy, _)| *suite_strategy == strategy)
        .ok_or_else(|| format!("{strategy:?} has no suite"))?;
    Ok(suite)
}

/// Each strategy has its own table, so the suites never meet.
pub fn table<B: SqlBackend>(strategy: B::Strategy) -> String {
    format!("conformance_{}", B::strategy_name(strategy))
}

/// A fault proxy and restarts need a launched server; inspection needs only the
/// test user's own rights (a force-unlock of a session strategy ends the user's
/// own session).
fn hooks(external: bool) -> Hooks {
    Hooks {
        delete_lock: true,
        faulty_client: !external,
        restart: !external,
        residue: true,
        holder_process: true,
    }
}

/// Starts a server of `B`, one start at a time. Its start future is not `Send`
/// (the launcher's retry helper takes an async closure) and harness futures
/// must be, so it runs on a blocking thread of the same runtime.
pub async fn launch_server<B: SqlBackend>() -> Result<B::Server, BoxError> {
    let _one_at_a_time = B::statics().starting.lock().await;
    let runtime = tokio::runtime::Handle::current();
    Ok(tokio::task::spawn_blocking(move || runtime.block_on(B::start())).await??)
}

/// A server the testkit launched, or one named by the environment.
#[derive(Debug)]
enum Server<B: SqlBackend> {
    Launched(Box<B::Server>),
    External(String),
}

impl<B: SqlBackend> Server<B> {
    fn url(&self) -> String {
        match self {
            Server::Launched(server) => B::url(server),
            Server::External(url) => url.clone(),
        }
    }

    /// A client of `strategy`, through the fault proxy on local `proxy` port
    /// if given, collecting names idle for `state_ttl` if given.
    async fn connect(
        &self,
        proxy: Option<u16>,
        strategy: B::Strategy,
        state_ttl: Option<Duration>,
    ) -> Result<DynLock, BoxError> {
        let table = table::<B>(strategy);
        B::connect(&self.url(), proxy, table, strategy, state_ttl).await
    }
}

/// The harness of one strategy.
#[derive(Debug)]
pub struct SqlHarness<B: SqlBackend> {
    strategy: B::Strategy,
    suite: &'static str,
    server: Arc<Server<B>>,
    /// The `state_ttl` of every client it hands out, if not the default.
    state_ttl: Option<Duration>,
    /// The client whose `Inspect` deletes holders and counts residue.
    inspector: DynLock,
}

impl<B: SqlBackend> SqlHarness<B> {
    async fn start(strategy: B::Strategy, suite: &'static str) -> Result<Self, BoxError> {
        let server = B::statics()
            .shared
            .get_or_try_init(|| async {
                Ok::<_, BoxError>(Arc::new(match external_url(B::NAME) {
                    Some(url) => Server::External(url),
                    None => Server::Launched(Box::new(launch_server::<B>().await?)),
                }))
            })
            .await?
            .clone();
        Self::on(strategy, suite, server).await
    }

    /// A harness of `strategy` on a server of its own.
    pub async fn launch(strategy: B::Strategy) -> Result<Self, BoxError> {
        let server = Arc::new(Server::Launched(Box::new(launch_server::<B>().await?)));
        Self::on(strategy, suite_of::<B>(strategy)?, server).await
    }

    /// A harness of `strategy` on `server`, a server of its own, whose clients
    /// (the faulty ones too) all collect names idle for `state_ttl`.
    pub async fn on_server(
        strategy: B::Strategy,
        server: B::Server,
        state_ttl: Duration,
    ) -> Result<Self, BoxError> {
        let server = Arc::new(Server::Launched(Box::new(server)));
        let harness = Self::on(strategy, suite_of::<B>(strategy)?, server).await?;
        Ok(SqlHarness {
            state_ttl: Some(state_ttl),
            ..harness
        })
    }

    async fn on(
        strategy: B::Strategy,
        suite: &'static str,
        server: Arc<Server<B>>,
    ) -> Result<Self, BoxError> {
        // Connecting creates the table before cases run in parallel.
        let inspector = server.connect(None, strategy, None).await?;
        Ok(SqlHarness {
            strategy,
            suite,
            server,
            state_ttl: None,
            inspector,
        })
    }
}

#[async_trait]
impl<B: SqlBackend> Harness for SqlHarness<B> {
    fn name(&self) -> &str {
        self.suite
    }

    fn capabilities(&self) -> Capabilities {
        B::capabilities(self.strategy)
    }

    fn hooks(&self) -> Hooks {
        hooks(matches!(*self.server, Server::External(_)))
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        self.server
            .connect(None, self.strategy, self.state_ttl)
            .await
    }

    async fn client_with_state_ttl(&self, state_ttl: Duration) -> Result<DynLock, BoxError> {
        self.server
            .connect(None, self.strategy, Some(state_ttl))
            .await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let Server::Launched(server) = &*self.server else {
            return Err("this needs a launched server".into());
        };
        let proxy = Arc::new(FaultProxy::start(B::addr(server)).await?);
        let lock = self
            .server
            .connect(Some(proxy.addr().port()), self.strategy, self.state_ttl)
            .await?;
        Ok(FaultyClient::new(lock, proxy))
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
        let (url, strategy) = (self.server.url(), B::strategy_name(self.strategy));
        let next = if url.contains('?') { '&' } else { '?' };
        let table = table::<B>(self.strategy);
        Some(format!("{url}{next}strategy={strategy}&table={table}"))
    }
}

/// A server of `B` for the fence target.
pub async fn launch_url<B: SqlBackend>() -> Result<crate::Running, BoxError> {
    let server = launch_server::<B>().await?;
    Ok(crate::Running::new(B::url(&server), server))
}
