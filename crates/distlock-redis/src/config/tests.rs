//! `RedisConfig` and the shared URL reader, on URLs alone (no server).

use super::*;

#[test]
fn url_parameters_are_applied() {
    let c = RedisConfig::from_url(
        "redis://h:1/2?namespace=app:&ttl=10s&connect_timeout=1s&timeout=250ms&wait_replicas=1&wait_timeout=50ms",
    )
    .unwrap();
    assert_eq!(c.common.namespace, "app:");
    assert_eq!(c.common.defaults.get_ttl(), Duration::from_secs(10));
    assert_eq!(c.common.timeouts.connect, Duration::from_secs(1));
    assert_eq!(c.common.timeouts.reply, Duration::from_millis(250));
    let ack = ReplicaAck {
        replicas: 1,
        timeout: Duration::from_millis(50),
    };
    assert_eq!(c.replicas, Some(ack));
    assert_eq!(c.common.restart_guard, None, "the guard is off by default");
}

#[test]
fn the_restart_guard_is_read_and_must_cover_the_default_ttl() {
    let c = RedisConfig::from_url("redis://h/0?restart_guard=45s").unwrap();
    assert_eq!(c.common.restart_guard, Some(Duration::from_secs(45)));
    let c = RedisConfig::from_url("redis://h/0?restart_guard=5s&ttl=5s").unwrap();
    assert_eq!(c.common.restart_guard, Some(Duration::from_secs(5)));
    for (url, why) in [
        (
            "redis://h/0?restart_guard=5s",
            "shorter than the default ttl",
        ),
        ("redis://h/0?restart_guard=0s", "more than zero"),
        ("redis://h/0?restart_guard=30", "30s"),
    ] {
        let err = RedisConfig::from_url(url).unwrap_err().to_string();
        assert!(err.contains(why), "{url}: {err}");
    }
    let err = RedisConfig::new("h", 1)
        .restart_guard(Duration::from_secs(1))
        .validate()
        .unwrap_err();
    assert!(err.to_string().contains("restart_guard"), "{err}");
}

#[test]
fn servers_carry_credentials_db_tls_and_protocol() {
    let text = "rediss://u%40x:p%3Ass@cache.example:7000/3?protocol=resp3&insecure=true";
    let (_, servers) = read_servers(BACKEND, text, Schemes::Redis).unwrap();
    let s = &servers[0];
    assert_eq!((s.host.as_str(), s.port, s.db), ("cache.example", 7000, 3));
    assert!(s.tls && s.insecure && s.resp3);
    assert_eq!(s.username.as_deref(), Some("u@x"));
    assert_eq!(s.password.as_deref(), Some("p:ss"));
    assert_eq!(s.endpoint(), "rediss://cache.example:7000/3");
    let c = RedisConfig::from_url("redis://[::1]").unwrap();
    assert_eq!((c.server.port, c.server.db, c.server.tls), (6379, 0, false));
    assert_eq!(c.endpoint(), "redis://[::1]:6379/0");
}

#[test]
fn debug_hides_the_password() {
    let c = RedisConfig::new("h", 1).credentials(Some("u"), "hunter2");
    assert!(!format!("{c:?}").contains("hunter2"));
    let c = RedisConfig::from_url("redis://user:hunter2@h:1/0").unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
}

#[test]
fn sentinel_urls_name_the_sentinels_the_primary_and_two_logins() {
    let text = "redis+sentinel://:data-pw@s1,s2:26380,[::1]/mymaster?db=2\
                &sentinel_password=sentinel-pw&wait_replicas=1";
    let c = RedisConfig::from_url(text).unwrap();
    let sentinels = c.server.sentinels.as_ref().unwrap();
    assert_eq!(sentinels.master, "mymaster");
    let nodes = [("s1", 26379), ("s2", 26380), ("::1", 26379)];
    let nodes: Vec<(String, u16)> = nodes.iter().map(|(h, p)| (h.to_string(), *p)).collect();
    assert_eq!(sentinels.nodes, nodes);
    assert_eq!(sentinels.password.as_deref(), Some("sentinel-pw"));
    assert_eq!(c.server.password.as_deref(), Some("data-pw"));
    assert_eq!(c.server.db, 2);
    assert_eq!(
        c.endpoint(),
        "redis+sentinel://s1:26379,s2:26380,[::1]:26379/mymaster?db=2"
    );
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("data-pw") && !shown.contains("sentinel-pw"),
        "{shown}"
    );
    let tls = RedisConfig::from_url("rediss+sentinel://s1/m?insecure=true").unwrap();
    assert!(tls.server.tls && tls.endpoint().starts_with("rediss+sentinel://"));
}

#[test]
fn bad_sentinel_urls_say_what_to_write() {
    for (url, why) in [
        (
            "redis+sentinel://s1,s2",
            "names the primary after the hosts",
        ),
        (
            "redis+sentinel://s1/a/b",
            "names the primary after the hosts",
        ),
        ("redis+sentinel://s1/m?db=x", "db"),
        ("redis+sentinel://s1/m?sentinel_user=u", "sentinel_password"),
        ("redis://h/0?sentinel_password=x", "sentinel_password"),
        ("redlock+sentinel://s1/m", "unsupported scheme"),
    ] {
        let err = RedisConfig::from_url(url).unwrap_err().to_string();
        assert!(err.contains(why), "{url}: {err}");
        assert!(!err.contains("=x&") && !err.contains("pw"), "{err}");
    }
    let err = crate::RedlockConfig::from_url("redis+sentinel://s1/m")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Redlock URL") || err.contains("independent"),
        "{err}"
    );
}

#[test]
fn cluster_urls_take_every_host_as_a_seed_and_the_usual_parameters() {
    let c = RedisConfig::from_url(
        "rediss+cluster://u:s3cret@n1:7000,n2,[::1]:7002/?namespace=app:&timeout=1s&wait_replicas=1&insecure=true",
    )
    .unwrap();
    let seeds = c.server.cluster.as_ref().expect("cluster mode");
    assert_eq!(
        seeds.nodes,
        [
            ("n1".to_owned(), 7000),
            ("n2".to_owned(), DEFAULT_PORT),
            ("::1".to_owned(), 7002)
        ]
    );
    assert!(c.server.tls && c.server.insecure);
    assert_eq!(c.endpoint(), "rediss+cluster://n1:7000,n2:6379,[::1]:7002");
    assert_eq!(c.common.timeouts.reply, Duration::from_secs(1));
    assert!(c.replicas.is_some());
    let shown = format!("{c:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    // The fair lock's queue shares the lock's slot: allowed in a cluster.
    let fair = RedisConfig::from_url("redis+cluster://n1,n2?fair=true").unwrap();
    assert!(fair.fair && fair.server.cluster.is_some());
}

#[test]
fn bad_cluster_urls_say_what_to_write() {
    for (url, why) in [
        ("redis+cluster://n1,n2/3", "only database 0"),
        (
            "redis+cluster://n1?restart_guard=10s&ttl=5s",
            "not available in Redis Cluster mode",
        ),
        ("redis+cluster://n1?bogus=1", "bogus"),
        ("redis+clustr://n1", "redis+cluster://"),
        ("redlock+cluster://n1", "unsupported scheme"),
    ] {
        let err = RedisConfig::from_url(url).unwrap_err().to_string();
        assert!(err.contains(why), "{url}: {err}");
    }
    let err = crate::RedlockConfig::from_url("redis+cluster://n1,n2,n3")
        .unwrap_err()
        .to_string();
    assert!(err.contains("write redlock://h1,h2,h3"), "{err}");
}

#[test]
fn state_ttl_defaults_to_a_day_and_refuses_less_than_two_seconds() {
    let c = RedisConfig::from_url("redis://h").unwrap();
    assert_eq!(c.common.state_ttl, Duration::from_secs(86_400));
    for scheme in ["redis", "rediss", "redis+cluster", "redis+sentinel"] {
        let path = if scheme == "redis+sentinel" {
            "/primary"
        } else {
            ""
        };
        let c = RedisConfig::from_url(&format!("{scheme}://h{path}?state_ttl=2s")).unwrap();
        assert_eq!(c.common.state_ttl, Duration::from_secs(2), "{scheme}");
        let err = RedisConfig::from_url(&format!("{scheme}://h{path}?state_ttl=1999ms"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("state_ttl") && err.contains("2s"), "{err}");
    }
    assert!(crate::RedlockConfig::from_url("redlock://a,b,c?state_ttl=1h").is_ok());
    let err = crate::RedlockConfig::from_url("redlock://a,b,c?state_ttl=1s").unwrap_err();
    assert!(err.to_string().contains("state_ttl"), "{err}");
}
