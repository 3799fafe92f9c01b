//! One real server per backend for the whole test binary, from the testkit's
//! native launchers, or the server named by `DISTLOCK_TEST_<BACKEND>_URL`.
//! Launched servers live in statics: the testkit's watchdog kills them when the
//! test process exits.
#![allow(dead_code, unused_imports)]

use distlock_testkit::servers::external_url;
use std::sync::OnceLock;
use tokio::runtime::Runtime;

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new().expect("a tokio runtime for the server launchers"))
}

fn launch<T>(
    what: &str,
    start: impl std::future::Future<Output = Result<T, distlock_testkit::servers::ServerError>>,
) -> T {
    runtime()
        .block_on(start)
        .unwrap_or_else(|e| panic!("cannot start {what} for the CLI tests: {e}"))
}

/// `host:port` of a `scheme://host:port[/...]` URL.
fn authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or_default().to_owned()
}

#[cfg(feature = "redis")]
pub fn redis_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    static SERVER: OnceLock<distlock_testkit::servers::RedisServer> = OnceLock::new();
    URL.get_or_init(|| {
        external_url("redis").unwrap_or_else(|| {
            SERVER
                .get_or_init(|| {
                    launch(
                        "redis-server",
                        distlock_testkit::servers::RedisServer::start(),
                    )
                })
                .url()
        })
    })
    .clone()
}

#[cfg(feature = "redlock")]
pub fn redlock_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    static SERVERS: OnceLock<Vec<distlock_testkit::servers::RedisServer>> = OnceLock::new();
    URL.get_or_init(|| {
        let nodes: Vec<String> = match external_url("redlock") {
            Some(urls) => urls.split(',').map(|u| authority(u.trim())).collect(),
            None => SERVERS
                .get_or_init(|| {
                    launch(
                        "redis-server ×3",
                        distlock_testkit::servers::RedisServer::start_many(3),
                    )
                })
                .iter()
                .map(|s| format!("127.0.0.1:{}", s.port()))
                .collect(),
        };
        format!("redlock://{}", nodes.join(","))
    })
    .clone()
}

#[cfg(feature = "etcd")]
pub fn etcd_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    static SERVER: OnceLock<distlock_testkit::servers::EtcdServer> = OnceLock::new();
    URL.get_or_init(|| match external_url("etcd") {
        Some(url) if url.starts_with("etcd") => url,
        Some(url) => format!("etcd://{}", authority(&url)),
        None => {
            let server = SERVER
                .get_or_init(|| launch("etcd", distlock_testkit::servers::EtcdServer::start()));
            format!("etcd://127.0.0.1:{}", server.port())
        }
    })
    .clone()
}

#[cfg(feature = "zookeeper")]
pub fn zookeeper_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    static SERVER: OnceLock<distlock_testkit::servers::ZooKeeperServer> = OnceLock::new();
    URL.get_or_init(|| match external_url("zookeeper") {
        Some(url) => url,
        None => {
            let server = SERVER.get_or_init(|| {
                launch(
                    "ZooKeeper",
                    distlock_testkit::servers::ZooKeeperServer::start(),
                )
            });
            format!("zk://127.0.0.1:{}", server.port())
        }
    })
    .clone()
}

#[cfg(feature = "mysql")]
pub fn mysql_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    static SERVER: OnceLock<distlock_testkit::servers::MariaDbServer> = OnceLock::new();
    URL.get_or_init(|| {
        external_url("mysql").unwrap_or_else(|| {
            SERVER
                .get_or_init(|| {
                    launch("MariaDB", distlock_testkit::servers::MariaDbServer::start())
                })
                .url()
        })
    })
    .clone()
}

#[cfg(feature = "postgres")]
pub fn postgres_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    static SERVER: OnceLock<distlock_testkit::servers::PostgresServer> = OnceLock::new();
    URL.get_or_init(|| {
        external_url("postgres").unwrap_or_else(|| {
            SERVER
                .get_or_init(|| {
                    launch(
                        "PostgreSQL",
                        distlock_testkit::servers::PostgresServer::start(),
                    )
                })
                .url()
        })
    })
    .clone()
}

/// The same MariaDB with the `unique_insert` strategy, on a table of its own.
#[cfg(feature = "mysql")]
pub fn mysql_unique_insert_url() -> String {
    format!(
        "{}?strategy=unique_insert&table=cli_unique_insert",
        mysql_url()
    )
}

/// The same MariaDB with the `for_update` strategy, on a table of its own.
#[cfg(feature = "mysql")]
pub fn mysql_for_update_url() -> String {
    format!("{}?strategy=for_update&table=cli_for_update", mysql_url())
}

/// PgBouncer in transaction pooling mode in front of a PostgreSQL of its own.
#[cfg(feature = "postgres")]
fn pgbouncer() -> &'static distlock_testkit::servers::PgBouncerServer {
    static SERVER: OnceLock<distlock_testkit::servers::PgBouncerServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        launch(
            "PgBouncer",
            distlock_testkit::servers::PgBouncerServer::start(),
        )
    })
}

/// The PgBouncer's URL, as a client not told about it would name it.
#[cfg(feature = "postgres")]
pub fn pgbouncer_url() -> String {
    pgbouncer().url()
}

/// The PostgreSQL behind the PgBouncer, reached directly.
#[cfg(feature = "postgres")]
pub fn pgbouncer_postgres_url() -> String {
    pgbouncer().postgres().url()
}

/// The same PgBouncer with `pooler=transaction`, on a table of its own.
#[cfg(feature = "postgres")]
pub fn postgres_pgbouncer_url() -> String {
    format!("{}?pooler=transaction&table=cli_pgbouncer", pgbouncer_url())
}

#[cfg(feature = "postgres")]
pub fn postgres_advisory_url() -> String {
    format!("{}?strategy=advisory", postgres_url())
}
