//! The one reader of the servers in `redis://`, `rediss://` (and their
//! `+sentinel` and `+cluster` forms), `redlock://` and `redlocks://` URLs:
//! scheme, hosts, credentials, database and the server-level parameters. Apart
//! from `RedisConfig` because `RedlockConfig` reads its nodes through it too.

use crate::address::ClusterSeeds;
use crate::address::{DEFAULT_PORT, ServerAddress};
use crate::sentinel::read_sentinels;
use crate::tls::TlsFiles;
use distlock_core::LockError;
use distlock_core::toolkit::{LockUrl, redact};

/// Which URL schemes a reader accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Schemes {
    /// `redis://` or `rediss://` (and the `valkey` spellings): one server.
    Redis,
    /// `redlock://` or `redlocks://`: several independent servers.
    Redlock,
}

/// Reads the servers of a lock URL: scheme, hosts, credentials, the database
/// number in the path, and the server-level parameters `protocol` and
/// `insecure`. The caller takes its own parameters, then calls `finish()`.
pub(crate) fn read_servers(
    backend: &'static str,
    text: &str,
    accepted: Schemes,
) -> Result<(LockUrl, Vec<ServerAddress>), LockError> {
    if text.trim_end().ends_with("#insecure") {
        return Err(LockError::config(
            backend,
            format!(
                "`{}`: write ?insecure=true instead of #insecure",
                redact(text)
            ),
        ));
    }
    let mut url = LockUrl::parse(backend, text)?;
    let (scheme, mode) = match url.scheme().split_once('+') {
        Some((scheme, mode)) => (scheme.to_owned(), format!("+{mode}")),
        None => (url.scheme().to_owned(), String::new()),
    };
    let (sentinel, cluster) = (mode == "+sentinel", mode == "+cluster");
    let plain = mode.is_empty();
    let (tls, schemes) = match scheme.as_str() {
        "redis" | "valkey" if plain || sentinel || cluster => (false, Schemes::Redis),
        "rediss" | "valkeys" if plain || sentinel || cluster => (true, Schemes::Redis),
        "redlock" if plain => (false, Schemes::Redlock),
        "redlocks" if plain => (true, Schemes::Redlock),
        other => {
            return Err(url.error(format_args!(
                "unsupported scheme `{other}{mode}://`; use redis:// (rediss:// for TLS) for one server, \
                 redis+sentinel:// (rediss+sentinel://) for a primary found through Sentinel, \
                 redis+cluster:// (rediss+cluster://) for a Redis Cluster, \
                 redlock:// (redlocks://) for several independent ones"
            )));
        }
    };
    if schemes != accepted {
        return Err(url.error(match accepted {
            Schemes::Redis => "this is a Redlock URL; connect it with RedlockConfig",
            Schemes::Redlock if sentinel => {
                "Redlock needs independent nodes, not a primary behind Sentinel; write \
                 redlock://h1,h2,h3"
            }
            Schemes::Redlock => {
                "write redlock://h1,h2,h3 (redlocks:// for TLS), or give RedlockConfig::from_urls \
                 one redis:// URL per node"
            }
        }));
    }
    if url.hosts().is_empty() {
        return Err(url.error("the URL names no host"));
    }
    if accepted == Schemes::Redis && plain && url.hosts().len() > 1 {
        return Err(url.error(
            "redis:// takes one server; for a lock over several independent servers write \
             redlock://h1,h2,h3, for a primary found through Sentinel \
             redis+sentinel://s1,s2,s3/<master-name>, for a Redis Cluster \
             redis+cluster://n1,n2,n3",
        ));
    }
    let (sentinels, db) = match sentinel {
        true => {
            let (sentinels, db) = read_sentinels(&mut url)?;
            (Some(sentinels), db)
        }
        false => (None, read_db(&url)?),
    };
    if cluster && db != 0 {
        return Err(url
            .error("a Redis Cluster has only database 0; drop the database number from the path"));
    }
    let cluster = cluster.then(|| ClusterSeeds {
        dial_instead: Vec::new(),
        nodes: url
            .hosts()
            .iter()
            .map(|host| (host.host.clone(), host.port.unwrap_or(DEFAULT_PORT)))
            .collect(),
    });
    let resp3 = matches!(
        url.choice("protocol", &["resp2", "resp3", "2", "3"])?,
        Some("resp3" | "3")
    );
    let insecure = url.bool("insecure")?.unwrap_or(false);
    let tls_files = TlsFiles::read(&mut url, tls)?;
    if insecure && !tls {
        return Err(url.error(
            "insecure=true skips TLS certificate checks; it needs rediss:// (or redlocks://)",
        ));
    }
    let servers = url
        .hosts()
        .iter()
        .map(|host| ServerAddress {
            host: host.host.clone(),
            port: host.port.unwrap_or(DEFAULT_PORT),
            tls,
            insecure,
            tls_files: tls_files.clone(),
            username: url.user().map(str::to_owned),
            password: url.password().map(str::to_owned),
            db,
            resp3,
            sentinels: sentinels.clone(),
            cluster: cluster.clone(),
            client_tls: None,
        })
        .take(if plain { usize::MAX } else { 1 })
        .collect();
    Ok((url, servers))
}

/// The database number in the path of a `redis://` URL (0 when absent).
fn read_db(url: &LockUrl) -> Result<i64, LockError> {
    match url.path().map(|p| p.trim_matches('/')) {
        None | Some("") => Ok(0),
        Some(path) => match path.parse::<u32>() {
            Ok(db) if i32::try_from(db).is_ok() => Ok(i64::from(db)),
            _ => Err(url.error(format_args!(
                "the path `/{path}` is not a database number; write /0, /1, …"
            ))),
        },
    }
}
