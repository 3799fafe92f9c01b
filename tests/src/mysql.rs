//! MySQL: the three strategies as three backends (`mysql` = version_cas,
//! `mysql_unique_insert`, `mysql_for_update`), each on its own table of one
//! MariaDB server launched by the testkit (or `DISTLOCK_TEST_MYSQL_URL`).
//!
//! Hooks: operator deletion (DELETE of the row; for `for_update`, `KILL
//! CONNECTION` of the session holding the row lock, found through InnoDB's lock
//! waits), residue (held rows; for `for_update` also queued waiters), faults
//! through a TCP fault proxy, restarts on a dedicated server. Against an external
//! server only the hooks that need no root access are offered.

use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock, LockKey};
use distlock_mysql::{MySqlConfig, MySqlConnectOptions, Strategy, row_name};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{MariaDbServer, external_url};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, Connection, MySqlPool};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

/// The three specs, one per strategy.
pub fn specs() -> Vec<BackendSpec> {
    [
        Strategy::VersionCas,
        Strategy::UniqueInsert,
        Strategy::ForUpdate,
    ]
    .into_iter()
    .map(spec)
    .collect()
}

fn spec(strategy: Strategy) -> BackendSpec {
    BackendSpec {
        name: suite_name(strategy).into(),
        capabilities: strategy.capabilities(),
        hooks: hooks(strategy, external_url("mysql").is_some()),
        start: Box::new(move || {
            Box::pin(async move { Ok(Arc::new(MySqlHarness::start(strategy).await?) as _) })
        }),
    }
}

fn suite_name(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::VersionCas => "mysql",
        Strategy::UniqueInsert => "mysql_unique_insert",
        Strategy::ForUpdate => "mysql_for_update",
    }
}

/// Each strategy has its own table, so the three suites never meet.
fn table(strategy: Strategy) -> String {
    format!("conformance_{}", strategy.as_str())
}

fn hooks(strategy: Strategy, external: bool) -> Hooks {
    Hooks {
        delete_lock: !(external && strategy == Strategy::ForUpdate),
        faulty_client: !external,
        restart: !external,
        residue: !(external && strategy == Strategy::ForUpdate),
    }
}

/// Starts a MariaDB server. Its start future is not `Send` (the launcher's retry
/// helper takes an async closure) and harness futures must be, so it runs on a
/// blocking thread of the same runtime.
pub async fn launch_server() -> Result<MariaDbServer, BoxError> {
    // Concurrent `mariadb-install-db` runs collide on temp tables in the shared
    // /tmp (the launcher passes no --tmpdir yet): start one server at a time.
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = STARTING.lock().await;
    let runtime = tokio::runtime::Handle::current();
    Ok(tokio::task::spawn_blocking(move || runtime.block_on(MariaDbServer::start())).await??)
}

#[derive(Debug)]
enum Server {
    Launched(Box<MariaDbServer>),
    External(String),
}

impl Server {
    fn url(&self) -> String {
        match self {
            Server::Launched(server) => server.url(),
            Server::External(url) => url.clone(),
        }
    }

    fn launched(&self) -> Result<&MariaDbServer, BoxError> {
        match self {
            Server::Launched(server) => Ok(server),
            Server::External(_) => Err("this needs root on a launched server".into()),
        }
    }
}

/// One server for the three suites of this test binary.
static SHARED: OnceCell<Arc<Server>> = OnceCell::const_new();

/// The harness of one strategy.
#[derive(Debug)]
pub struct MySqlHarness {
    strategy: Strategy,
    server: Arc<Server>,
    /// The test user's own connections, for operator actions and counting.
    admin: MySqlPool,
}

impl MySqlHarness {
    async fn start(strategy: Strategy) -> Result<Self, BoxError> {
        let server = SHARED
            .get_or_try_init(|| async {
                Ok::<_, BoxError>(Arc::new(match external_url("mysql") {
                    Some(url) => Server::External(url),
                    None => Server::Launched(Box::new(launch_server().await?)),
                }))
            })
            .await?
            .clone();
        Self::on(strategy, server).await
    }

    async fn on(strategy: Strategy, server: Arc<Server>) -> Result<Self, BoxError> {
        let admin = MySqlPoolOptions::new()
            .max_connections(8)
            .connect(&server.url())
            .await?;
        let harness = MySqlHarness {
            strategy,
            server,
            admin,
        };
        // Creates the table before cases run in parallel.
        drop(harness.client().await?);
        Ok(harness)
    }

    fn config(&self) -> Result<MySqlConfig, BoxError> {
        Ok(MySqlConfig::from_url(&self.server.url())?
            .table(table(self.strategy))
            .strategy(self.strategy))
    }

    /// Runs admin SQL on the strategy's table (the name is ours, a constant).
    fn sql(&self, template: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(template.replace("{table}", &table(self.strategy)))
    }

    /// Held rows whose names start with `prefix`.
    async fn held_rows(&self, prefix: &str) -> Result<usize, BoxError> {
        let (low, high) = prefix_range(prefix);
        let count: i64 = match self.strategy {
            Strategy::VersionCas => sqlx::query_scalar(self.sql(
                "SELECT COUNT(*) FROM `{table}` WHERE name >= ? AND name < ? \
                 AND owner IS NOT NULL AND expires_at > NOW(6)",
            )),
            // Lock rows exist only while held; counter rows have no owner.
            Strategy::UniqueInsert => sqlx::query_scalar(self.sql(
                "SELECT COUNT(*) FROM `{table}` WHERE name >= ? AND name < ? AND owner IS NOT NULL",
            )),
            Strategy::ForUpdate => return self.locked_rows(&low, &high).await,
        }
        .bind(low)
        .bind(high)
        .fetch_one(&self.admin)
        .await?;
        Ok(usize::try_from(count)?)
    }

    /// for_update: rows whose lock a transaction holds = rows − rows `SKIP LOCKED`
    /// lets us lock. The range keeps the probe on this case's rows only.
    async fn locked_rows(&self, low: &[u8], high: &[u8]) -> Result<usize, BoxError> {
        let lock_rows = "name >= ? AND name < ? AND RIGHT(name, 1) <> 0x1E";
        let mut conn = self.admin.acquire().await?;
        // A holder may have created its row inside its own transaction: count
        // uncommitted rows too.
        sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
            .execute(&mut *conn)
            .await?;
        let all: i64 = sqlx::query_scalar(self.sql(&format!(
            "SELECT COUNT(*) FROM `{{table}}` WHERE {lock_rows}"
        )))
        .bind(low)
        .bind(high)
        .fetch_one(&mut *conn)
        .await?;
        // READ COMMITTED: the probe takes no gap locks, and rows it skips stay free.
        sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .execute(&mut *conn)
            .await?;
        let mut tx = conn.begin().await?;
        let free = sqlx::query(self.sql(&format!(
            "SELECT name FROM `{{table}}` WHERE {lock_rows} FOR UPDATE SKIP LOCKED"
        )))
        .bind(low)
        .bind(high)
        .fetch_all(&mut *tx)
        .await?
        .len();
        tx.rollback().await?;
        Ok(usize::try_from(all)?.saturating_sub(free))
    }

    /// for_update: sessions queued on a row lock of this table under `prefix`.
    async fn queued_waiters(&self, prefix: &str) -> Result<usize, BoxError> {
        let server = self.server.launched()?;
        let hex: String = prefix.bytes().map(|b| format!("{b:02X}")).collect();
        let out = server
            .exec_root(&format!(
                "SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS w \
                 JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.requested_lock_id \
                 WHERE l.lock_table LIKE '%`{}`' AND l.lock_data LIKE '0x{hex}%';",
                table(self.strategy)
            ))
            .await?;
        Ok(out.trim().parse()?)
    }

    /// for_update: kills the session whose transaction holds `row`'s lock. InnoDB
    /// names a lock's holder only to its waiters, so the harness queues behind it
    /// and asks who blocks it.
    async fn kill_holder(&self, row: Vec<u8>) -> Result<(), BoxError> {
        let server = self.server.launched()?;
        let mut conn = self.admin.acquire().await?;
        sqlx::query("SET SESSION innodb_lock_wait_timeout = 10")
            .execute(&mut *conn)
            .await?;
        let me: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
            .fetch_one(&mut *conn)
            .await?;
        let lock = self.sql("SELECT fence FROM `{table}` WHERE name = ? FOR UPDATE");
        let queue = async {
            let mut tx = conn.begin().await?;
            sqlx::query(lock).bind(row).fetch_optional(&mut *tx).await?;
            tx.rollback().await?;
            Ok::<_, BoxError>(())
        };
        let kill = async {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let holder = server
                    .exec_root(&format!(
                        "SELECT b.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w \
                         JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
                         JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id \
                         WHERE r.trx_mysql_thread_id = {me};"
                    ))
                    .await?;
                if let Some(id) = holder.split_whitespace().next() {
                    let id: u64 = id.parse()?;
                    server.exec_root(&format!("KILL CONNECTION {id};")).await?;
                    return Ok::<_, BoxError>(());
                }
                if Instant::now() > deadline {
                    return Err("nobody holds the row lock".into());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let (queued, killed) = tokio::join!(queue, kill);
        killed?;
        queued
    }
}

/// Names starting with `prefix` are exactly those in `[prefix, prefix + 1)`, the
/// upper bound being the prefix with its last byte raised.
fn prefix_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    let low = prefix.as_bytes().to_vec();
    let mut high = low.clone();
    while let Some(last) = high.pop() {
        if last < 0xFF {
            high.push(last + 1);
            break;
        }
    }
    (low, high)
}

#[async_trait]
impl Harness for MySqlHarness {
    fn name(&self) -> &str {
        suite_name(self.strategy)
    }

    fn capabilities(&self) -> Capabilities {
        self.strategy.capabilities()
    }

    fn hooks(&self) -> Hooks {
        hooks(self.strategy, matches!(*self.server, Server::External(_)))
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        Ok(Arc::new(self.config()?.connect().await?))
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let server = self.server.launched()?;
        let proxy = Arc::new(FaultProxy::start(server.addr()).await?);
        let options = MySqlConnectOptions::from_str(&server.url())?
            .host("127.0.0.1")
            .port(proxy.addr().port());
        let lock = MySqlConfig::from_options(options)
            .table(table(self.strategy))
            .strategy(self.strategy)
            .connect()
            .await?;
        Ok(FaultyClient {
            lock: Arc::new(lock),
            faults: proxy,
        })
    }

    async fn delete_lock(&self, key: &LockKey) -> Result<(), BoxError> {
        let row = row_name(key);
        if self.strategy == Strategy::ForUpdate {
            return self.kill_holder(row).await;
        }
        sqlx::query(self.sql("DELETE FROM `{table}` WHERE name = ?"))
            .bind(row)
            .execute(&self.admin)
            .await?;
        Ok(())
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        let server = Arc::new(Server::Launched(Box::new(launch_server().await?)));
        Ok(Arc::new(Self::on(self.strategy, server).await?))
    }

    async fn restart_server(&self) -> Result<(), BoxError> {
        Ok(self.server.launched()?.restart().await?)
    }

    async fn residue(&self, prefix: &str) -> Result<usize, BoxError> {
        let held = self.held_rows(prefix).await?;
        if self.strategy != Strategy::ForUpdate {
            return Ok(held);
        }
        Ok(held + self.queued_waiters(prefix).await?)
    }

    fn server_logs(&self) -> String {
        match &*self.server {
            Server::Launched(server) => server.log_tail(40),
            Server::External(_) => String::new(),
        }
    }
}
