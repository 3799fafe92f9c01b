//! The servers every implementation runs against, launched by the testkit on
//! free loopback ports (the same launchers as the test suite), and what the
//! table says about each: the implementations to run on it and its version.

use crate::peers::Kind;
use distlock_testkit::servers::{
    EtcdServer, MariaDbServer, NatsServer, PostgresServer, RedisServer, ZooKeeperServer,
};
use std::net::SocketAddr;
use std::sync::Arc;

/// The backends, in table order.
pub const BACKENDS: [&str; 7] = [
    "redis",
    "redlock",
    "etcd",
    "zookeeper",
    "mysql",
    "postgres",
    "nats",
];

/// One backend's servers, kept running until it is dropped.
pub struct Target {
    /// The backend's name in the table.
    pub label: String,
    /// The server's name and version, for the notes under the table.
    pub version: String,
    /// distlock's URL for it.
    pub url: String,
    /// The implementations to run, each with what its clients connect to.
    pub runs: Vec<(Kind, String)>,
    /// Where the request counter is read when distlock's inspection has none:
    /// nats-server's monitoring port.
    pub varz: Option<SocketAddr>,
    _servers: Servers,
}

#[allow(dead_code)] // held only to keep the servers alive
enum Servers {
    Redis(Vec<RedisServer>),
    Etcd(EtcdServer),
    ZooKeeper(ZooKeeperServer),
    MariaDb(MariaDbServer),
    Postgres(Arc<PostgresServer>),
    Nats(NatsServer),
}

fn failed(what: &str) -> impl FnOnce(distlock_testkit::servers::ServerError) -> String {
    let what = what.to_owned();
    move |e| format!("cannot start {what} (sudo scripts/install-backends): {e}")
}

/// Launches the servers of `backend` (one of [`BACKENDS`]): one target, or on
/// PostgreSQL one per strategy and one for `lock_in`, on the same server.
pub async fn launch(backend: &str) -> Result<Vec<Target>, String> {
    if backend == "postgres" {
        return postgres().await;
    }
    Ok(vec![match backend {
        "redis" => {
            let server = RedisServer::start().await.map_err(failed("redis-server"))?;
            let url = server.url();
            Target {
                label: "Redis, 1 node".into(),
                version: redis_version(&url).await?,
                runs: vec![
                    (Kind::Distlock, url.clone()),
                    (Kind::Rslock, url.clone()),
                    (Kind::RslockFenced, url.clone()),
                ],
                url,
                varz: None,
                _servers: Servers::Redis(vec![server]),
            }
        }
        "redlock" => {
            let nodes = RedisServer::start_many(3)
                .await
                .map_err(failed("redis-server x3"))?;
            let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
            let hosts: Vec<String> = nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port()))
                .collect();
            let url = format!("redlock://{}", hosts.join(","));
            Target {
                label: "Redlock, 3 nodes".into(),
                version: redis_version(&urls[0]).await?,
                runs: vec![
                    (Kind::Distlock, url.clone()),
                    (Kind::Rslock, urls.join(",")),
                    (Kind::RslockFenced, urls.join(",")),
                ],
                url,
                varz: None,
                _servers: Servers::Redis(nodes),
            }
        }
        "etcd" => {
            let server = EtcdServer::start().await.map_err(failed("etcd"))?;
            let addr = server.addr().to_string();
            let client = distlock::etcd::client::Client::connect([format!("http://{addr}")], None)
                .await
                .map_err(|e| format!("etcd: {e}"))?;
            let status = client
                .status()
                .await
                .map_err(|e| format!("etcd status: {e}"))?;
            Target {
                label: "etcd, 1 member".into(),
                version: format!("etcd {}", status.version()),
                runs: vec![
                    (Kind::Distlock, format!("etcd://{addr}/peers/")),
                    (Kind::EtcdLockApi, addr.clone()),
                ],
                url: format!("etcd://{addr}/peers/"),
                varz: None,
                _servers: Servers::Etcd(server),
            }
        }
        "zookeeper" => {
            let server = ZooKeeperServer::start()
                .await
                .map_err(failed("ZooKeeper"))?;
            // A session is accepted once the server serves requests; `srvr`
            // answers without a version before that.
            let session = zookeeper_client::Client::connector()
                .connect(&server.url())
                .await
                .map_err(|e| format!("zookeeper: {e}"))?;
            let srvr = server.four_letter_word("srvr").await.unwrap_or_default();
            drop(session);
            let version = srvr
                .lines()
                .find_map(|l| l.strip_prefix("Zookeeper version:"))
                .and_then(|v| v.trim().split(['-', ',']).next())
                .unwrap_or("unknown");
            let url = format!("zk://{}/", server.url());
            Target {
                label: "ZooKeeper, standalone".into(),
                version: format!("ZooKeeper {version}"),
                runs: vec![
                    (Kind::Distlock, url.clone()),
                    (Kind::ZkRecipe, server.url()),
                    (Kind::ZkRecipeAwaited, server.url()),
                ],
                url,
                varz: None,
                _servers: Servers::ZooKeeper(server),
            }
        }
        "mysql" => {
            let server = MariaDbServer::start().await.map_err(failed("MariaDB"))?;
            let version = server
                .exec_root("SELECT VERSION();")
                .await
                .unwrap_or_default();
            let url = server.url();
            Target {
                label: "MariaDB, version_cas".into(),
                version: format!(
                    "MariaDB {}",
                    version.trim().split("-MariaDB").next().unwrap_or_default()
                ),
                runs: vec![(Kind::Distlock, url.clone())],
                url,
                varz: None,
                _servers: Servers::MariaDb(server),
            }
        }
        "nats" => {
            let server = NatsServer::start().await.map_err(failed("nats-server"))?;
            let plain = server.url();
            crate::nats::prepare(&plain).await?;
            Target {
                label: "NATS JetStream KV".into(),
                version: nats_version(&server).await,
                runs: vec![
                    (Kind::Distlock, plain.clone()),
                    (Kind::NatsKv, plain.clone()),
                ],
                url: plain,
                varz: Some(server.monitor_addr()),
                _servers: Servers::Nats(server),
            }
        }
        other => return Err(format!("unknown backend {other:?}; pick from {BACKENDS:?}")),
    }])
}

/// One PostgreSQL server, as three targets: `version_cas` next to a
/// hand-written lease table, `advisory` next to a hand-written
/// `pg_advisory_lock`, without and with a fencing token, and `lock_in` in the
/// caller's transaction next to a hand-written `pg_advisory_xact_lock` with a
/// token.
async fn postgres() -> Result<Vec<Target>, String> {
    let server = Arc::new(
        PostgresServer::start()
            .await
            .map_err(failed("PostgreSQL"))?,
    );
    let plain = server.url();
    let version = crate::postgres::prepare(&plain).await?;
    let version = format!(
        "PostgreSQL {}",
        version.split_whitespace().next().unwrap_or("unknown")
    );
    let target = |label: &str, strategy: &str, ours: Kind, peers: &[Kind]| {
        let url = format!("{plain}?strategy={strategy}");
        let peers = peers.iter().map(|&peer| (peer, plain.clone()));
        Target {
            label: format!("PostgreSQL, {label}"),
            version: version.clone(),
            runs: std::iter::once((ours, url.clone())).chain(peers).collect(),
            url,
            varz: None,
            _servers: Servers::Postgres(server.clone()),
        }
    };
    Ok(vec![
        target(
            "version_cas",
            "version_cas",
            Kind::Distlock,
            &[Kind::PgLeaseTable],
        ),
        target(
            "advisory",
            "advisory",
            Kind::Distlock,
            &[Kind::PgAdvisory, Kind::PgAdvisoryFenced],
        ),
        target(
            "lock_in (transaction)",
            "advisory",
            Kind::DistlockTx,
            &[Kind::PgXactFenced],
        ),
    ])
}

/// `Redis <version>` from `INFO server`.
async fn redis_version(url: &str) -> Result<String, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("redis: {e}"))?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("redis INFO: {e}"))?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown");
    Ok(format!("Redis {}", version.trim()))
}

/// `nats-server <version>` from the server's `/varz`.
async fn nats_version(server: &NatsServer) -> String {
    let varz = distlock_testkit::servers::nats::varz(server.monitor_addr()).await;
    let version = varz.as_deref().and_then(|v| {
        let (_, after) = v.split_once("\"version\":")?;
        after.trim_start().strip_prefix('"')?.split('"').next()
    });
    format!("nats-server {}", version.unwrap_or("unknown"))
}
