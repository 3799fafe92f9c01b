//! `EtcdConfig`'s URL reading and checks.

use super::*;

fn reason(url: &str) -> String {
    match EtcdConfig::from_url(url) {
        Err(LockError::Config { reason, .. }) => reason,
        other => panic!("{url}: expected a config error, got {other:?}"),
    }
}

#[test]
fn parses_hosts_user_namespace_and_parameters() {
    let config = EtcdConfig::from_url(
        "etcd://u%40x:p%3Aw@h1:2379,h2,[::1]:2380/team%2Fa/locks?timeout=2s&connect_timeout=250ms",
    )
    .unwrap();
    assert_eq!(config.endpoints, ["h1:2379", "h2", "[::1]:2380"]);
    assert_eq!(config.user, Some(("u@x".into(), "p:w".into())));
    assert_eq!(config.namespace, "team/a/locks/");
    assert_eq!(config.timeouts.reply, Duration::from_secs(2));
    assert_eq!(config.timeouts.connect, Duration::from_millis(250));
    assert_eq!(
        config.validate().unwrap(),
        ["h1:2379", "h2:2379", "[::1]:2380"]
    );
}

#[test]
fn the_path_is_the_namespace() {
    let namespace = |url: &str| EtcdConfig::from_url(url).unwrap().namespace;
    assert_eq!(namespace("etcd://h"), DEFAULT_NAMESPACE);
    assert_eq!(namespace("etcd://h/"), "");
    assert_eq!(namespace("etcd://h/ns/"), "ns/");
    assert_eq!(namespace("etcd://h/ns"), "ns/");
    assert_eq!(namespace("etcd://h?namespace=ns"), "ns/");
    assert_eq!(namespace("etcd://h?namespace="), "");
    assert!(reason("etcd://h/ns?namespace=ns").contains("given twice"));
}

#[test]
fn bad_urls_say_why_and_hide_the_password() {
    assert!(reason("redis://h").contains("scheme `redis`"));
    assert!(reason("h:2379").contains("no scheme"));
    assert!(reason("etcd://").contains("no hosts"));
    assert!(reason("etcd://h1,,h2").contains("empty"));
    assert!(reason("etcd://h:0").contains("port"));
    assert!(reason("etcd://u@h").contains("password"));
    assert!(reason("etcd://:pw@h").contains("user name is empty"));
    assert!(reason("etcd://h?domain=x").contains("needs an etcds:// URL"));
    let r = reason("etcd://u:hunter2@h/ns?stray=1");
    assert!(r.contains("unknown URL parameter `stray`"), "{r}");
    assert!(!r.contains("hunter2") && r.contains("u:***@"), "{r}");
    assert!(!reason("etcd://u:hunter2@h:bad/ns").contains("hunter2"));
}

#[test]
fn old_spellings_name_the_new_one() {
    assert!(reason("etcd://h?request_timeout=2s").contains("now called `timeout`"));
    assert!(reason("etcd://h?timeout=2000").contains("2000ms"));
    assert!(reason("etcd://h?connect_timeout=0s").contains("more than zero"));
    let short = EtcdConfig::from_url("etcd://h?state_ttl=1999ms").unwrap();
    assert!(
        short
            .validate()
            .unwrap_err()
            .to_string()
            .contains("state_ttl=2s")
    );
}

#[test]
fn endpoints_given_in_code_are_checked_too() {
    let bad = |endpoint: &str| EtcdConfig::new([endpoint]).validate().unwrap_err();
    assert!(bad("h:99999").to_string().contains("port"));
    let error = bad("user:hunter2@h").to_string();
    assert!(error.contains("EtcdConfig::auth") && !error.contains("hunter2"));
    assert_eq!(EtcdConfig::new(["::1"]).validate().unwrap(), ["[::1]:2379"]);
}
