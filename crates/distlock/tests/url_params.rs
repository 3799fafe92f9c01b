//! Every documented URL parameter of every scheme is read and changes the
//! configuration (it is never accepted and ignored), and a misspelled one is
//! refused. TLS file parameters (`ca`, `cert`, `key`, `ssl-ca`, …) need real
//! certificates and are covered by the TLS tests against servers.
#![cfg(feature = "full")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock::etcd::EtcdConfig;
use distlock::mysql::MySqlConfig;
use distlock::postgres::PostgresConfig;
use distlock::redis::{RedisConfig, RedlockConfig};
use distlock::zookeeper::ZkConfig;
use distlock::{LockError, Renewal, Wait};
use std::fmt::Debug;
use std::time::Duration;

/// The acquire defaults every scheme takes.
const ACQUIRE_DEFAULTS: [(&str, &str); 5] = [
    ("ttl", "7s"),
    ("wait", "250ms"),
    ("renewal", "manual"),
    ("max_hold", "1m"),
    ("min_hold", "2m"),
];

/// Each parameter, added alone to `base`, parses and gives a config whose
/// `Debug` differs from `base`'s: the value was taken, not dropped.
fn each_changes<C: Debug>(
    base: &str,
    params: &[(&str, &str)],
    parse: impl Fn(&str) -> Result<C, LockError>,
) {
    let plain = format!("{:?}", parse(base).unwrap());
    let join = if base.contains('?') { '&' } else { '?' };
    for (name, value) in ACQUIRE_DEFAULTS.iter().chain(params) {
        let url = format!("{base}{join}{name}={value}");
        let config = parse(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_ne!(
            format!("{config:?}"),
            plain,
            "{url}: `{name}` changed nothing"
        );
    }
    let typo = format!("{base}{join}ttll=5s");
    match parse(&typo) {
        Err(LockError::Config { reason, .. }) => {
            assert!(reason.contains("did you mean `ttl`"), "{typo}: {reason}")
        }
        other => panic!(
            "{typo}: expected a Config error, got {:?}",
            other.map(|_| ())
        ),
    }
}

#[test]
fn redis_parameters_apply() {
    each_changes(
        "redis://127.0.0.1:6379/0",
        &[
            ("namespace", "shop:"),
            ("connect_timeout", "2s"),
            ("timeout", "3s"),
            ("restart_guard", "1h"),
            ("state_ttl", "1h"),
            ("wait_replicas", "1"),
            ("protocol", "resp3"),
        ],
        RedisConfig::from_url,
    );
    each_changes(
        "rediss://127.0.0.1:6379/0",
        &[("insecure", "true")],
        RedisConfig::from_url,
    );
    each_changes(
        "redis://127.0.0.1:6379/0?wait_replicas=1",
        &[("wait_timeout", "2s")],
        RedisConfig::from_url,
    );
}

#[test]
fn redlock_parameters_apply() {
    each_changes(
        "redlock://a:1,b:2,c:3",
        &[
            ("namespace", "shop:"),
            ("connect_timeout", "2s"),
            ("timeout", "100ms"),
            ("retry_delay", "50ms"),
            ("restart_guard", "1h"),
            ("state_ttl", "1h"),
            ("protocol", "resp3"),
        ],
        RedlockConfig::from_url,
    );
    // allow_few_nodes is what makes a one-node URL parse at all.
    assert!(RedlockConfig::from_url("redlock://a:1").is_err());
    each_changes(
        "redlock://a:1?allow_few_nodes=true",
        &[],
        RedlockConfig::from_url,
    );
}

#[test]
fn etcd_parameters_apply() {
    each_changes(
        "etcd://127.0.0.1:2379/locks",
        &[
            ("connect_timeout", "2s"),
            ("timeout", "3s"),
            ("state_ttl", "1h"),
        ],
        EtcdConfig::from_url,
    );
}

#[test]
fn zookeeper_parameters_apply() {
    each_changes(
        "zk://127.0.0.1:2181/app",
        &[
            ("namespace", "locks"),
            ("session_timeout", "4s"),
            ("connect_timeout", "2s"),
            ("timeout", "3s"),
            ("acl", "open"),
            ("state_ttl", "1h"),
        ],
        ZkConfig::from_url,
    );
}

#[test]
fn mysql_parameters_apply() {
    each_changes(
        "mysql://u:p@127.0.0.1:3306/db",
        &[
            ("strategy", "for_update"),
            ("table", "my_locks"),
            ("pool_size", "3"),
            ("held_connections", "7"),
            ("connect_timeout", "2s"),
            ("timeout", "3s"),
            ("create_table", "false"),
            ("state_ttl", "1h"),
        ],
        MySqlConfig::from_url,
    );
    each_changes(
        "mariadb://u:p@127.0.0.1:3306/db",
        &[("state_ttl", "1h")],
        MySqlConfig::from_url,
    );
}

#[test]
fn postgres_parameters_apply() {
    for scheme in ["postgres", "postgresql"] {
        each_changes(
            &format!("{scheme}://u:p@127.0.0.1:5432/db"),
            &[
                ("strategy", "advisory"),
                ("namespace", "other"),
                ("table", "my_locks"),
                ("pool_size", "3"),
                ("held_connections", "7"),
                ("connect_timeout", "2s"),
                ("timeout", "3s"),
                ("create_table", "false"),
                ("state_ttl", "1h"),
            ],
            PostgresConfig::from_url,
        );
    }
}

/// `state_ttl` below 2 s is refused on the SQL schemes too, saying what to set.
#[test]
fn sql_state_ttl_has_a_minimum() {
    let mysql = MySqlConfig::from_url("mysql://u:p@127.0.0.1/db?state_ttl=1s");
    let postgres = PostgresConfig::from_url("postgres://u:p@127.0.0.1/db?state_ttl=1999ms");
    for refused in [mysql.map(drop), postgres.map(drop)] {
        match refused {
            Err(LockError::Config { reason, .. }) => {
                assert!(reason.contains("state_ttl=2s or more"), "{reason}")
            }
            other => panic!("a state_ttl under 2s was not refused: {other:?}"),
        }
    }
}

/// What `connect` returns offers the URL's acquire defaults through the dyn
/// trait, on every scheme (memory here; the others read them with the same
/// code, checked above, and hand them over in `connect`).
#[tokio::test]
async fn connect_hands_the_acquire_defaults_to_the_lock() {
    let lock = distlock::connect("memory://params?ttl=7s&wait=no&renewal=3s")
        .await
        .unwrap();
    let defaults = lock.default_options();
    assert_eq!(defaults.get_ttl(), Duration::from_secs(7));
    assert_eq!(defaults.get_wait(), Wait::No);
    assert_eq!(
        defaults.get_renewal(),
        Renewal::Every(Duration::from_secs(3))
    );
}
