use super::*;

fn reason(r: Result<ZkConfig, LockError>) -> String {
    match r {
        Err(LockError::Config { backend, reason }) => {
            assert_eq!(backend, "zookeeper");
            reason
        }
        other => panic!("expected a Config error, got {other:?}"),
    }
}

#[test]
fn full_url_parses() {
    let config = ZkConfig::from_url(
        "zk://alice:p%40ss@zk1:2181,[::1]:2182,zk3/apps/prod?namespace=locks/a&session_timeout=15s&connect_timeout=2s&timeout=3s&acl=creator_only",
    )
    .unwrap();
    assert_eq!(config.endpoints, ["zk1:2181", "[::1]:2182", "zk3"]);
    assert_eq!(config.chroot.as_deref(), Some("/apps/prod"));
    assert_eq!(config.namespace, "locks/a");
    assert_eq!(config.session_timeout, Some(Duration::from_secs(15)));
    assert_eq!(config.timeouts.connect, Duration::from_secs(2));
    assert_eq!(config.timeouts.reply, Duration::from_secs(3));
    assert_eq!(config.acl_policy(), AclPolicy::CreatorOnly);
    let auth = config.auth.as_ref().unwrap();
    assert_eq!(
        (auth.user.as_str(), auth.password.as_str()),
        ("alice", "p@ss")
    );
    assert_eq!(config.connect_string(), "zk1:2181,[::1]:2182,zk3/apps/prod");
    let settings = config.settings();
    assert_eq!(settings.first_server.as_deref(), Some("zk1:2181"));
    // Probed before the first session; the port defaults to 2181.
    assert_eq!(
        settings.sessions.servers,
        ["zk1:2181", "[::1]:2182", "zk3:2181"]
    );
    assert_eq!(settings.endpoint, "zk://zk1:2181,[::1]:2182,zk3/apps/prod");
    let bare = ZkConfig::from_url("zookeeper://zk3,zk4/").unwrap();
    assert_eq!(bare.settings().first_server.as_deref(), Some("zk3:2181"));
}

#[test]
fn old_spellings_name_the_new_one() {
    let r = reason(ZkConfig::from_url("zk://h1?request_timeout=3s"));
    assert!(r.contains("now called `timeout`"), "{r}");
    let r = reason(ZkConfig::from_url("zk://h1?timeout=3000"));
    assert!(r.contains("3000ms"), "{r}");
    let r = reason(ZkConfig::from_url("zk://h1?namespac=x"));
    assert!(
        r.contains("did you mean `namespace`") && r.contains("session_timeout"),
        "{r}"
    );
}

#[test]
fn defaults_follow_the_credentials() {
    let open = ZkConfig::from_url("zk://127.0.0.1:2181").unwrap();
    assert_eq!(open.chroot, None);
    assert_eq!(open.namespace, "distlock");
    assert_eq!(open.session_timeout, None);
    assert_eq!(open.acl_policy(), AclPolicy::Open);
    let authed = ZkConfig::from_url("zk://u:p@127.0.0.1:2181/").unwrap();
    assert_eq!(authed.chroot, None);
    assert_eq!(authed.acl_policy(), AclPolicy::Creator);
}

#[test]
fn secrets_stay_out_of_debug_and_errors() {
    let config = ZkConfig::from_url("zk://alice:hunter2@zk1:2181").unwrap();
    assert!(!format!("{config:?}").contains("hunter2"));
    assert!(!config.clone().settings().endpoint.contains("hunter2"));
    let r = reason(ZkConfig::from_url("zk://alice:hunter2@zk1:2181?bogus=1"));
    assert!(!r.contains("hunter2") && r.contains("bogus"), "{r}");
    let r = reason(ZkConfig::from_url("zk://alice:hunter2@zk1:99999"));
    assert!(!r.contains("hunter2"), "{r}");
}

#[test]
fn bad_urls_say_what_is_wrong() {
    assert!(reason(ZkConfig::from_url("redis://h")).contains("zk://"));
    assert!(reason(ZkConfig::from_url("zk://")).contains("host[:port]"));
    assert!(reason(ZkConfig::from_url("zk://h1,,h2")).contains("host[:port]"));
    assert!(reason(ZkConfig::from_url("zk://h1:0")).contains("host[:port]"));
    assert!(reason(ZkConfig::from_url("zk://h1/a//b")).contains("empty segment"));
    assert!(reason(ZkConfig::from_url("zk://h1/a/../b")).contains("`..`"));
    assert!(reason(ZkConfig::from_url("zk://h1?session_timeout=soon")).contains("session_timeout"));
    assert!(reason(ZkConfig::from_url("zk://h1?acl=everyone")).contains("acl"));
    assert!(reason(ZkConfig::from_url("zk://h1?namespace=zookeeper")).contains("reserved"));
    assert!(reason(ZkConfig::from_url("zk://h1?namespace=a/./b")).contains("`..`"));
    assert!(reason(ZkConfig::from_url("zk://user@h1")).contains("user:password"));
    assert!(reason(ZkConfig::from_url("zk://:pw@h1")).contains("user:password"));
    assert!(reason(ZkConfig::from_url("zk://h1?connect_timeout=0s")).contains("connect_timeout"));
}

#[test]
fn struct_config_is_validated_too() {
    let config = ZkConfig {
        namespace: String::new(),
        ..ZkConfig::default()
    };
    assert!(config.validate().is_err());
    let config = ZkConfig {
        chroot: Some("relative".into()),
        ..ZkConfig::default()
    };
    assert!(config.validate().is_err());
    let config = ZkConfig {
        auth: Some(DigestAuth {
            user: "a:b".into(),
            password: "x".into(),
        }),
        ..ZkConfig::default()
    };
    assert!(config.validate().is_err());
    assert!(ZkConfig::default().validate().is_ok());
}

#[test]
fn state_ttl_is_checked_as_on_every_scheme() {
    assert_eq!(ZkConfig::default().state_ttl, Duration::from_secs(86_400));
    let config = ZkConfig::from_url("zk://h1?state_ttl=2s").unwrap();
    assert_eq!(config.state_ttl, Duration::from_secs(2));
    let r = reason(ZkConfig::from_url("zk://h1?state_ttl=1999ms"));
    assert!(r.contains("state_ttl=2s or more"), "{r}");
}
