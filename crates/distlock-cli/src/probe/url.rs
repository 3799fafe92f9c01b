//! Taking a lock URL apart for the probes: user info, every host of a multi-host
//! authority, the path and the query. The adapters have validated the URL by the
//! time a probe reads it; this only splits.

/// The parts of `scheme://[userinfo@]host[,host...][/path][?query][#fragment]`.
#[derive(Debug)]
pub struct Parts<'a> {
    pub userinfo: Option<&'a str>,
    pub hosts: Vec<&'a str>,
    /// After the first `/`, without it.
    pub path: Option<&'a str>,
    pub query: Vec<(String, String)>,
    pub fragment: Option<&'a str>,
}

pub fn parse(url: &str) -> Parts<'_> {
    let rest = url.trim().split_once("://").map_or(url, |(_, rest)| rest);
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (rest, None),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, Some(path)),
        None => (rest, None),
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let query = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect();
    Parts {
        userinfo,
        hosts: hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect(),
        path,
        query,
        fragment,
    }
}

impl Parts<'_> {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// User and password, percent-decoded.
    pub fn credentials(&self) -> Option<(String, String)> {
        let (user, password) = self.userinfo?.split_once(':')?;
        Some((decode(user), decode(password)))
    }
}

/// Decodes `%XX` escapes; invalid escapes and bytes are kept as written.
pub fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_host_urls_split() {
        let parts = parse("redlock://u:p%40ss@h1:1,h2:2/0?namespace=a%3A&x=1#insecure");
        assert_eq!(parts.hosts, ["h1:1", "h2:2"]);
        assert_eq!(parts.credentials(), Some(("u".into(), "p@ss".into())));
        assert_eq!(parts.path, Some("0"));
        assert_eq!(parts.param("namespace"), Some("a:"));
        assert_eq!(parts.fragment, Some("insecure"));
        assert_eq!(parse("zk://h").path, None);
    }
}
