//! The `etcd://` URL grammar. Several hosts make it something `url` parsers reject,
//! so it is split by hand; every error names the problem and never the password.

use crate::config::DEFAULT_NAMESPACE;
use crate::error::BACKEND;
use distlock_core::LockError;
use std::time::Duration;

/// An `etcd://` or `etcds://` URL taken apart.
#[derive(Debug)]
pub(crate) struct EtcdUrl {
    pub endpoints: Vec<String>,
    pub namespace: String,
    pub user: Option<(String, String)>,
    pub tls: bool,
    pub options: Vec<(String, String)>,
}

fn invalid(url: &str, why: impl std::fmt::Display) -> LockError {
    LockError::config(
        BACKEND,
        format!(
            "`{}`: {why}; expected etcd://[user:password@]host[:port][,host[:port]...][/namespace][?option=value]",
            redact(url)
        ),
    )
}

impl EtcdUrl {
    pub(crate) fn parse(url: &str) -> Result<Self, LockError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid(url, "no scheme"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "etcd" => false,
            "etcds" => true,
            other => {
                return Err(invalid(
                    url,
                    format_args!("scheme `{other}` is neither etcd nor etcds"),
                ));
            }
        };
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match location.find('/') {
            Some(at) => (&location[..at], Some(&location[at + 1..])),
            None => (location, None),
        };
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let (user, password) = userinfo
                    .split_once(':')
                    .ok_or_else(|| invalid(url, "a user needs a password (user:password@)"))?;
                let user = decode(user).map_err(|why| invalid(url, why))?;
                let password = decode(password)
                    .map_err(|_| invalid(url, "the password has a bad %-escape"))?;
                if user.is_empty() {
                    return Err(invalid(url, "the user name is empty"));
                }
                (Some((user, password)), hosts)
            }
            None => (None, authority),
        };
        let endpoints: Vec<String> = hosts.split(',').map(|h| h.trim().to_owned()).collect();
        for endpoint in &endpoints {
            check_endpoint(endpoint).map_err(|why| invalid(url, why))?;
        }
        let namespace = match path {
            None => DEFAULT_NAMESPACE.to_owned(),
            Some(path) => {
                let mut namespace = decode(path).map_err(|why| invalid(url, why))?;
                if !namespace.is_empty() && !namespace.ends_with('/') {
                    namespace.push('/');
                }
                namespace
            }
        };
        let mut options = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| invalid(url, format_args!("option `{pair}` has no value")))?;
            let name = decode(name).map_err(|why| invalid(url, why))?;
            let value = decode(value).map_err(|why| invalid(url, why))?;
            options.push((name, value));
        }
        Ok(EtcdUrl {
            endpoints,
            namespace,
            user,
            tls,
            options,
        })
    }
}

/// Checks one `host[:port]` (IPv6 in brackets).
pub(crate) fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("endpoint `{}` {why}", redact(endpoint)));
    if endpoint.is_empty() {
        return bad("is empty");
    }
    if endpoint.contains(['/', '@', ' ', '?', '#']) {
        return bad(
            "is not host:port (credentials go in the user:password@ part or EtcdConfig::auth)",
        );
    }
    let port = if let Some(rest) = endpoint.strip_prefix('[') {
        match rest.split_once(']') {
            Some((_, "")) => None,
            Some((_, port)) => match port.strip_prefix(':') {
                Some(port) => Some(port),
                None => return bad("has text after the IPv6 address"),
            },
            None => return bad("opens an IPv6 bracket it never closes"),
        }
    } else {
        match endpoint.matches(':').count() {
            0 => None,
            1 => endpoint.rsplit_once(':').map(|(_, port)| port),
            _ => None,
        }
    };
    match port {
        Some(port) if port.parse::<u16>().map_or(true, |p| p == 0) => {
            bad("has no valid port (1-65535)")
        }
        _ => Ok(()),
    }
}

/// `host` with `port` added when it has none; bare IPv6 addresses get brackets.
pub(crate) fn with_port(host: &str, port: u16) -> String {
    if let Some(rest) = host.strip_prefix('[') {
        return if rest.contains("]:") {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
    }
    match host.matches(':').count() {
        0 => format!("{host}:{port}"),
        1 => host.to_owned(),
        _ => format!("[{host}]:{port}"),
    }
}

/// Decodes `%XX` escapes.
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad %-escape in `{text}`"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{text}` decodes to invalid UTF-8"))
}

/// The URL or endpoint with any password replaced by `***`.
pub(crate) fn redact(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return match text.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => text.to_owned(),
        };
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..end].rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{scheme}://{user}:***@{hosts}{}", &rest[end..])
        }
        None => text.to_owned(),
    }
}

/// A duration option such as `500ms`, `5s` or `1m`.
pub(crate) fn duration(name: &str, value: &str) -> Result<Duration, LockError> {
    let parsed = humantime::parse_duration(value).map_err(|_| {
        LockError::config(
            BACKEND,
            format!("option `{name}`: `{value}` is not a duration like 500ms, 5s or 1m"),
        )
    })?;
    if parsed.is_zero() {
        return Err(LockError::config(
            BACKEND,
            format!("option `{name}` is zero; use a few seconds"),
        ));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(url: &str) -> String {
        match EtcdUrl::parse(url) {
            Err(LockError::Config { reason, .. }) => reason,
            other => panic!("{url}: expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn parses_hosts_user_namespace_and_options() {
        let url = EtcdUrl::parse(
            "etcd://u%40x:p%3Aw@h1:2379,h2,[::1]:2380/team%2Fa/locks?request_timeout=2s",
        )
        .unwrap();
        assert_eq!(url.endpoints, ["h1:2379", "h2", "[::1]:2380"]);
        assert_eq!(url.user, Some(("u@x".into(), "p:w".into())));
        assert_eq!(url.namespace, "team/a/locks/");
        assert_eq!(
            url.options,
            [("request_timeout".to_owned(), "2s".to_owned())]
        );
        assert!(!url.tls);
    }

    #[test]
    fn namespace_defaults_and_root() {
        assert_eq!(
            EtcdUrl::parse("etcd://h").unwrap().namespace,
            DEFAULT_NAMESPACE
        );
        assert_eq!(EtcdUrl::parse("etcd://h/").unwrap().namespace, "");
        assert_eq!(EtcdUrl::parse("etcd://h/ns/").unwrap().namespace, "ns/");
        assert!(EtcdUrl::parse("ETCDS://h").unwrap().tls);
    }

    #[test]
    fn bad_urls_say_why_and_hide_the_password() {
        assert!(reason("redis://h").contains("scheme `redis`"));
        assert!(reason("h:2379").contains("no scheme"));
        assert!(reason("etcd://h1,,h2").contains("empty"));
        assert!(reason("etcd://h:0").contains("port"));
        assert!(reason("etcd://h:99999").contains("port"));
        assert!(reason("etcd://h?x").contains("no value"));
        assert!(reason("etcd://u@h").contains("password"));
        let r = reason("etcd://u:hunter2@h:bad/ns");
        assert!(!r.contains("hunter2") && r.contains("u:***@"), "{r}");
        assert!(!reason("etcd://u:hunter2@h/%zz").contains("hunter2"));
    }

    #[test]
    fn ports_are_added_where_missing() {
        assert_eq!(with_port("h", 2379), "h:2379");
        assert_eq!(with_port("h:1", 2379), "h:1");
        assert_eq!(with_port("[::1]", 2379), "[::1]:2379");
        assert_eq!(with_port("[::1]:5", 2379), "[::1]:5");
        assert_eq!(with_port("::1", 2379), "[::1]:2379");
    }

    #[test]
    fn durations_are_checked() {
        assert_eq!(duration("t", "250ms").unwrap(), Duration::from_millis(250));
        assert!(duration("t", "0s").is_err());
        assert!(duration("t", "soon").is_err());
    }
}
