//! URL reading and validation of `NatsConfig`.

use super::*;

fn reason(url: &str) -> String {
    match NatsConfig::from_url(url) {
        Err(LockError::Config { reason, .. }) => reason,
        other => panic!("{url}: expected a config error, got {other:?}"),
    }
}

#[test]
fn parses_servers_bucket_credentials_and_parameters() {
    let config =
        NatsConfig::from_url("nats://u%40x:p%3Aw@h1:4223,h2/locks?timeout=2s&ttl=5s&state_ttl=1m")
            .unwrap();
    assert_eq!(config.servers, ["h1:4223", "h2"]);
    assert_eq!(config.state_ttl, Duration::from_secs(60));
    assert_eq!(config.bucket, "locks");
    assert!(matches!(
        &config.credentials,
        Credentials::UserPassword(u, p) if u == "u@x" && p == "p:w"
    ));
    assert_eq!(config.timeouts.reply, Duration::from_secs(2));
    assert_eq!(
        config.addresses().unwrap(),
        ["nats://h1:4223", "nats://h2:4222"]
    );
    let tls = NatsConfig::from_url("nats+tls://h?ca=/ca.pem&namespace=b").unwrap();
    assert_eq!(tls.addresses().unwrap(), ["tls://h:4222"]);
    assert_eq!(tls.bucket, "b");
    let token = NatsConfig::from_url("nats://h?token=s3cret").unwrap();
    assert!(matches!(&token.credentials, Credentials::Token(t) if t == "s3cret"));
    assert!(!format!("{token:?}").contains("s3cret"));
    assert_eq!(
        NatsConfig::from_url("nats://h").unwrap().bucket,
        DEFAULT_BUCKET
    );
}

#[test]
fn bad_urls_say_why_and_hide_secrets() {
    assert!(reason("redis://h").contains("scheme `redis`"));
    assert!(reason("nats://").contains("no servers"));
    assert!(reason("nats://h/a?namespace=b").contains("given twice"));
    assert!(reason("nats://u@h").contains("token="));
    assert!(reason("nats://u:p@h?token=t").contains("one way to log in"));
    assert!(reason("nats://h?ca=/x").contains("tls://"));
    assert!(reason("tls://h?cert=/x").contains("go together"));
    let unknown = reason("nats://u:hunter2@h?tiemout=1s");
    assert!(unknown.contains("timeout"), "{unknown}");
    assert!(!unknown.contains("hunter2"), "{unknown}");
    let config = NatsConfig::from_url("nats://h/a.b").unwrap();
    assert!(config.validate().is_err());
    let short = NatsConfig::from_url("nats://h?state_ttl=1s").unwrap();
    assert!(
        short
            .validate()
            .unwrap_err()
            .to_string()
            .contains("state_ttl=2s")
    );
}
