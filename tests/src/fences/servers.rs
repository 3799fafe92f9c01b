//! The servers the fence target runs against, each started on first use and
//! shared by every case (keys and resources carry a random prefix). They stop
//! when the last case holding them is dropped, at the end of the run.

use distlock_core::BoxError;

/// A server (and, for MySQL, a strategy) that a case needs a URL for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// One Redis node: a fenced store and a lock backend.
    Redis,
    /// Three more Redis nodes, for Redlock.
    Redlock,
    /// One etcd member.
    Etcd,
    /// One ZooKeeper server.
    ZooKeeper,
    /// MariaDB: a fenced store, and a lock backend with the given strategy.
    MySql(&'static str),
    /// PostgreSQL: a fenced store, and a lock backend with the given strategy.
    Postgres(&'static str),
}

/// Lazily started servers.
#[derive(Debug, Default)]
pub struct Servers {
    #[cfg(any(feature = "redis", feature = "redlock"))]
    redis: tokio::sync::OnceCell<Vec<distlock_testkit::servers::RedisServer>>,
    #[cfg(feature = "redlock")]
    redlock: tokio::sync::OnceCell<Vec<distlock_testkit::servers::RedisServer>>,
    #[cfg(feature = "etcd")]
    etcd: tokio::sync::OnceCell<distlock_testkit::servers::EtcdServer>,
    #[cfg(feature = "zookeeper")]
    zookeeper: tokio::sync::OnceCell<distlock_testkit::servers::ZooKeeperServer>,
    #[cfg(feature = "mysql")]
    mariadb: tokio::sync::OnceCell<distlock_testkit::servers::MariaDbServer>,
    #[cfg(feature = "postgres")]
    postgres: tokio::sync::OnceCell<distlock_testkit::servers::PostgresServer>,
}

impl Servers {
    /// The URL a client of `endpoint` connects with, starting its server first
    /// if needed.
    pub async fn url(&self, endpoint: Endpoint) -> Result<String, BoxError> {
        match endpoint {
            #[cfg(any(feature = "redis", feature = "redlock"))]
            Endpoint::Redis => {
                let nodes = self
                    .redis
                    .get_or_try_init(|| crate::redis::launch_servers(1));
                let node = nodes.await?.first().ok_or("no Redis server started")?;
                Ok(node.url())
            }
            #[cfg(feature = "redlock")]
            Endpoint::Redlock => {
                let nodes = self
                    .redlock
                    .get_or_try_init(|| crate::redis::launch_servers(3));
                let hosts: Vec<String> =
                    nodes.await?.iter().map(|n| n.addr().to_string()).collect();
                Ok(format!("redlock://{}", hosts.join(",")))
            }
            #[cfg(feature = "etcd")]
            Endpoint::Etcd => {
                let server = self
                    .etcd
                    .get_or_try_init(crate::etcd::launch_server)
                    .await?;
                Ok(format!("etcd://{}", server.addr()))
            }
            #[cfg(feature = "zookeeper")]
            Endpoint::ZooKeeper => {
                let server = self
                    .zookeeper
                    .get_or_try_init(crate::zookeeper::launch_server);
                Ok(format!("zk://{}", server.await?.addr()))
            }
            #[cfg(feature = "mysql")]
            Endpoint::MySql(strategy) => {
                let server = self
                    .mariadb
                    .get_or_try_init(crate::sql::launch_server::<crate::mysql::MySql>);
                // Strategies cannot share a lock table.
                let url = server.await?.url();
                Ok(format!(
                    "{url}?strategy={strategy}&table=fenced_locks_{strategy}"
                ))
            }
            #[cfg(feature = "postgres")]
            Endpoint::Postgres(strategy) => {
                let server = self
                    .postgres
                    .get_or_try_init(crate::sql::launch_server::<crate::postgres::Postgres>);
                // Strategies cannot share a lock table.
                let url = server.await?.url();
                Ok(format!(
                    "{url}?strategy={strategy}&table=fenced_locks_{strategy}"
                ))
            }
            #[allow(unreachable_patterns)]
            other => Err(format!("{other:?} is not compiled into this build").into()),
        }
    }
}
