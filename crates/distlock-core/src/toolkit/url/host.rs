//! `Host`: one `host[:port]` of a lock URL, parsed and shown with IPv6 in
//! brackets. Apart from `LockUrl` because it is the one piece of the grammar an
//! adapter also uses on its own (etcd's and ZooKeeper's endpoint lists).

use std::fmt;

/// One `host[:port]` of a URL. IPv6 addresses are written in brackets.
#[derive(Clone, PartialEq, Eq)]
pub struct Host {
    /// The host name or address, without brackets.
    pub host: String,
    /// The port, when the URL names one.
    pub port: Option<u16>,
}

impl Host {
    /// `host:port` with `default_port` where the URL names none, bracketing IPv6.
    pub fn address(&self, default_port: u16) -> String {
        let port = self.port.unwrap_or(default_port);
        if self.host.contains(':') {
            format!("[{}]:{port}", self.host)
        } else {
            format!("{}:{port}", self.host)
        }
    }

    /// Parses one `host[:port]`, `[v6]:port` or bare IPv6 address.
    pub fn parse(text: &str) -> Result<Host, String> {
        let bad = |why: &str| Err(format!("host `{text}` {why}"));
        if text.is_empty() {
            return bad("is empty; list hosts as host1:port,host2:port");
        }
        if text.contains(['/', '@', ' ', '?', '#', '\\']) {
            return bad("is not host[:port]");
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            match rest.split_once(']') {
                Some((host, "")) => (host, None),
                Some((host, port)) => match port.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return bad("has text after the IPv6 address"),
                },
                None => return bad("opens an IPv6 bracket it never closes"),
            }
        } else if text.matches(':').count() > 1 {
            (text, None)
        } else {
            match text.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            }
        };
        if host.is_empty() {
            return bad("has no host name");
        }
        let port = match port {
            None => None,
            Some(port) => match port.parse::<u16>() {
                Ok(p) if p > 0 => Some(p),
                _ => return bad("has no valid port (1-65535)"),
            },
        };
        Ok(Host {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.host.contains(':'), self.port) {
            (true, Some(port)) => write!(f, "[{}]:{port}", self.host),
            (true, None) => write!(f, "[{}]", self.host),
            (false, Some(port)) => write!(f, "{}:{port}", self.host),
            (false, None) => f.write_str(&self.host),
        }
    }
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}
