//! Finding the primary through Redis Sentinel (`redis+sentinel://`).
//!
//! Every (re)connect of a command or subscriber connection asks the Sentinels,
//! in the order given, `SENTINEL get-master-addr-by-name`, and the first answer
//! wins; a command connection then checks with `ROLE` that the node it reached
//! is the primary, so a stale answer in the middle of a failover is refused
//! rather than written to. Sentinel reconfigures a demoted primary with `CLIENT
//! KILL`, so connections to it drop and the next call asks again: that is how
//! a client follows a failover. The `run_id` of the new primary differs, so
//! the restart check re-reads every held lease there (see `restart`).
//!
//! The `redis` crate has a Sentinel client, but its `async_master_for` opens
//! the primary with `Client::open`, dropping a custom CA and client certificate,
//! and it has no connect timeout of its own; this lookup is one command and
//! reuses [`ServerAddress::client`] for both Sentinels and the primary.

use crate::address::{Sentinels, ServerAddress};
use crate::cluster::ClusterTarget;
use crate::error::CommandError;
use distlock_core::LockError;
use distlock_core::toolkit::LockUrl;
use std::time::Duration;

/// The default Sentinel port.
pub(crate) const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// Reads the Sentinel part of a `redis+sentinel://` URL: the hosts (port
/// 26379 by default), the primary's name in the path, `db=`, and the
/// Sentinels' own login (`sentinel_user=`, `sentinel_password=`); the
/// userinfo is the data nodes' login.
pub(crate) fn read_sentinels(url: &mut LockUrl) -> Result<(Sentinels, i64), LockError> {
    let master = url.path().map(|p| p.trim_matches('/')).unwrap_or("");
    if master.is_empty() || master.contains('/') {
        return Err(url.error(
            "a Sentinel URL names the primary after the hosts: \
             redis+sentinel://s1:26379,s2,s3/<master-name>[?db=N]",
        ));
    }
    let master = master.to_owned();
    let nodes = url
        .hosts()
        .iter()
        .map(|host| {
            (
                host.host.clone(),
                host.port.unwrap_or(DEFAULT_SENTINEL_PORT),
            )
        })
        .collect();
    let db = match url.parse_param::<u32>("db", "a database number")? {
        Some(db) if i32::try_from(db).is_ok() => i64::from(db),
        Some(db) => return Err(url.param_error("db", &db.to_string(), "is too large")),
        None => 0,
    };
    let sentinels = Sentinels {
        master,
        nodes,
        username: url.string("sentinel_user"),
        password: url.string("sentinel_password"),
    };
    if sentinels.username.is_some() && sentinels.password.is_none() {
        return Err(url.error("sentinel_user needs sentinel_password"));
    }
    Ok((sentinels, db))
}

/// Where a connection goes: one fixed server, whichever node the Sentinels
/// name as primary when it connects, or a Redis Cluster.
#[derive(Clone)]
pub(crate) enum Target {
    Direct(Box<redis::Client>),
    Sentinel(Box<SentinelTarget>),
    Cluster(Box<ClusterTarget>),
}

/// A primary found through Sentinel: the clients of the Sentinels (made once,
/// so bad TLS files fail at connect time) and the data nodes' login.
#[derive(Clone)]
pub(crate) struct SentinelTarget {
    backend: &'static str,
    master: String,
    sentinels: Vec<(String, redis::Client)>,
    primary: ServerAddress,
    pubsub: bool,
}

impl Target {
    /// The target of connections to `address`; `pubsub` as for
    /// [`ServerAddress::client`].
    pub fn of(
        address: &ServerAddress,
        backend: &'static str,
        pubsub: bool,
    ) -> Result<Self, LockError> {
        if let Some(seeds) = &address.cluster {
            return Ok(Target::Cluster(Box::new(ClusterTarget::new(
                address, seeds, backend,
            )?)));
        }
        let Some(sentinels) = &address.sentinels else {
            return Ok(Target::Direct(Box::new(address.client(backend, pubsub)?)));
        };
        let login = ServerAddress {
            username: sentinels.username.clone(),
            password: sentinels.password.clone(),
            db: 0,
            resp3: false,
            sentinels: None,
            ..address.clone()
        };
        let clients = (login.at_each(&sentinels.nodes))
            .map(|node| Ok((node.endpoint(), node.client(backend, false)?)))
            .collect::<Result<_, LockError>>()?;
        Ok(Target::Sentinel(Box::new(SentinelTarget {
            backend,
            master: sentinels.master.clone(),
            sentinels: clients,
            primary: ServerAddress {
                sentinels: None,
                ..address.clone()
            },
            pubsub,
        })))
    }

    /// Whether a new connection must check that it reached the primary.
    pub fn checks_role(&self) -> bool {
        matches!(self, Target::Sentinel(_))
    }

    /// The client to connect with now: for Sentinel, of the primary they name.
    /// A cluster has no one client: its connections are opened by
    /// [`ClusterTarget`].
    pub async fn client(&self, timeout: Duration) -> Result<redis::Client, CommandError> {
        match self {
            Target::Direct(client) => Ok((**client).clone()),
            Target::Sentinel(target) => target.primary_client(timeout).await,
            Target::Cluster(_) => Err(CommandError::Reply(
                "a Redis Cluster is reached through its cluster connection".into(),
            )),
        }
    }
}

impl SentinelTarget {
    async fn primary_client(&self, timeout: Duration) -> Result<redis::Client, CommandError> {
        let mut failures = Vec::new();
        for (endpoint, client) in &self.sentinels {
            match tokio::time::timeout(timeout, self.ask(client)).await {
                Ok(Ok((host, port))) => {
                    let primary = ServerAddress {
                        host,
                        port,
                        ..self.primary.clone()
                    };
                    return primary
                        .client(self.backend, self.pubsub)
                        .map_err(|e| CommandError::Sentinel(e.to_string()));
                }
                Ok(Err(e)) => failures.push(format!("{endpoint}: {e}")),
                Err(_) => failures.push(format!("{endpoint}: no reply within {timeout:?}")),
            }
        }
        Err(CommandError::Sentinel(format!(
            "no Sentinel named a primary for `{}` ({})",
            self.master,
            failures.join("; ")
        )))
    }

    async fn ask(&self, client: &redis::Client) -> Result<(String, u16), CommandError> {
        let mut conn = client.get_multiplexed_async_connection().await?;
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master)
            .query_async(&mut conn)
            .await?;
        reply.ok_or_else(|| {
            CommandError::Sentinel(format!(
                "it monitors no primary named `{}`; check the name after the hosts in the URL",
                self.master
            ))
        })
    }
}

/// Whether the `ROLE` reply names a primary.
pub(crate) async fn is_primary(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<bool, CommandError> {
    let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(conn).await?;
    Ok(match role.first() {
        Some(redis::Value::BulkString(role)) => role == b"master",
        Some(redis::Value::SimpleString(role)) => role == "master",
        _ => false,
    })
}
