//! `RedisFence`: fenced writes on one Redis server, each one Lua script.
//!
//! # Key layout
//!
//! The resource **is** the Redis key the application reads, used verbatim (no
//! namespace). Beside it, the fence record holds the highest token admitted for
//! it, as canonical decimal text, and never expires:
//!
//! | resource | fence record |
//! |---|---|
//! | `stock` (no hash tag) | `<namespace>fence:{stock}` |
//! | `{user42}:cart` (hash tag `user42`) | `<namespace>fence:{user42}:{user42}:cart` |
//!
//! Both hash to the same Redis Cluster slot, so one script can use them. A
//! resource without a hash tag that contains `}` (`a}b`) cannot be given one
//! and is refused with [`LockError::InvalidKey`]; so is a resource that starts
//! with `<namespace>fence:`. [`RedisFence::record_key`] names the record.
//!
//! # Scripts
//!
//! Every write is one `EVALSHA` (one round trip; the `redis` crate's `Script`
//! loads the script and retries on `NOSCRIPT`, after a restart or `SCRIPT FLUSH`)
//! of `scripts/fence_check.lua` followed by the write's body
//! (`fence_set.lua`, `fence_delete.lua`, `fence_add.lua`, `fence_hset.lua`, or
//! a [`FenceScript`]). `KEYS[1]` is the resource, `KEYS[2]` its record, `ARGV[1]`
//! the token in decimal. The check returns `{'stale', highest}` for a lower
//! token; the built-in bodies return `{status, value}`: `{'ok', ''}`,
//! `{'added', before}`, `{'floor', current}`, `{'wrongtype', type}`,
//! `{'notint', ''}` or `{'overflow', current}` (see `reply.rs`), and record the
//! token only once the write succeeded (or, for `floor`, was refused for the
//! stock, not the writer). A user script records the token before its body
//! runs and answers `{'ok', value}` or `{'failed', message}`. Tokens and
//! counters are compared as decimal text, so every `u64` token and `i64` counter
//! is exact; Lua does no arithmetic. `read` is one `EVALSHA` of
//! `fence_read.lua` (`TYPE`, then `GET` or `HGETALL`), `highest` one `GET`.
//!
//! # Guarantees
//!
//! - The check, the write and the token record are one atomic step on the
//!   server: no stale writer can land between them.
//! - The record lives as long as the server's data: a restart without
//!   persistence, or a failover to a replica that missed it, forgets it, and a
//!   lower token is admitted again. With `wait_replicas` every fenced write
//!   is followed by `WAIT` on its connection; fewer acknowledgements give an
//!   error naming the count (the write was applied on the primary, and a
//!   failover now may lose it).
//! - A connection found dropped when an `Add` or a [`FenceScript`] is sent
//!   gives [`LockError::Unavailable`] without sending it again: the client
//!   cannot tell whether it was applied (this includes a connection that died
//!   idle, after a server restart: the next such write fails once). `Set`,
//!   `Delete` and `HashSet` are sent once more on a new connection, as applying
//!   them twice does no harm. A timeout is [`LockError::Unavailable`] too, and
//!   the write may have been applied.
//! - Records are never deleted by the fence: one stays for every resource
//!   written. Delete one by hand only when no holder of an older token can
//!   still write to its resource.

mod pitfalls;
mod reply;
mod script;
mod writes;

pub use script::FenceScript;

use crate::address::ServerAddress;
use crate::connection::Connection;
use crate::error::BACKEND;
use crate::error::CommandError;
use crate::keys::fence_record;
use crate::protocol::wait_on;
use crate::replicas::ReplicaAck;
use crate::sentinel::Target;
use async_trait::async_trait;
use distlock_core::fence::{CheckedWrite, invalid_write, stale, validate_resource};
use distlock_core::toolkit::Timeouts;
use distlock_core::{Fence, FencedWrite, FencingToken, LockError, WriteOutcome};
use redis::{Script, ScriptInvocation, Value};
use reply::{Read, Reply};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use writes::{CHECK_LUA, Call, READ, fence_scripts};

/// A fenced key-value store on one Redis server: [`Fence`] with every write one
/// atomic Lua script (see the module docs for the key layout and the scripts),
/// plus user scripts behind the same check ([`RedisFence::write_script`]).
///
/// Built from the same URL or [`crate::RedisConfig`] as a lock, by
/// [`crate::RedisConfig::connect_fence`]: server, credentials, database, TLS,
/// protocol, `namespace` (of the fence records) and timeouts apply. `Debug`
/// never shows the password.
///
/// `read` gives a string value as is, and a hash as its fields in the text form
/// `MemoryFence` gives (`{"field": "value", ...}`, sorted); for the fields
/// themselves read the resource with any Redis client: it is the key. A key of
/// another type (a list, a set) is reported as an error.
///
/// ```no_run
/// use distlock_core::{Fence, FencedWrite, LockError, WriteOutcome};
/// # async fn sell(lease: distlock_core::Lease) -> Result<(), LockError> {
/// let fence = distlock_redis::RedisConfig::from_url("redis://127.0.0.1:6379/0")?
///     .connect_fence()
///     .await?;
/// match fence.write("stock:sku-1", lease.token(), FencedWrite::add_with_floor(-1, 0)).await? {
///     WriteOutcome::Counter(left) => println!("sold one, {left} left"),
///     WriteOutcome::BelowFloor { .. } => println!("sold out"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
pub struct RedisFence {
    connection: Connection,
    endpoint: String,
    namespace: String,
    timeout: Duration,
    replicas: Option<ReplicaAck>,
}

impl std::fmt::Debug for RedisFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisFence")
            .field("endpoint", &self.endpoint)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RedisFence {
    /// Makes the client and loads the scripts, so that a wrong address, password
    /// or a server without Lua scripting fails here.
    pub(crate) async fn connect(
        address: &ServerAddress,
        namespace: String,
        timeouts: Timeouts,
        replicas: Option<ReplicaAck>,
    ) -> Result<Self, LockError> {
        let fence = RedisFence {
            replicas,
            connection: Connection::new(Target::of(address, BACKEND, false)?, timeouts.connect),
            endpoint: address.endpoint(),
            namespace,
            timeout: timeouts.reply,
        };
        fence.load_scripts().await.map_err(|e| fence.error(e))?;
        Ok(fence)
    }

    async fn load_scripts(&self) -> Result<(), CommandError> {
        let mut pipe = redis::pipe();
        for (source, _) in fence_scripts() {
            pipe.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        let hashes: Vec<String> = self
            .connection
            .call(self.timeout, |mut conn| {
                let pipe = pipe.clone();
                async move { Ok(pipe.query_async(&mut conn).await?) }
            })
            .await?;
        let expected: Vec<&str> = fence_scripts().iter().map(|(_, s)| s.get_hash()).collect();
        if hashes != expected {
            return Err(CommandError::Reply(format!(
                "SCRIPT LOAD gave {hashes:?}, expected {expected:?}"
            )));
        }
        Ok(())
    }

    /// The server, without credentials.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The prefix of the fence records.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The key holding the highest token admitted for `resource` (see the
    /// module docs), or why this fence cannot fence `resource`.
    pub fn record_key(&self, resource: &str) -> Result<String, LockError> {
        validate_resource(resource)?;
        fence_record(&self.namespace, resource)
    }

    fn error(&self, e: CommandError) -> LockError {
        e.into_lock_error(BACKEND, &self.endpoint)
    }

    /// Sends `build()`'s invocation (`EVALSHA`, loading the script on
    /// `NOSCRIPT`). The connection resends a request once when it finds the
    /// connection dropped; unless `repeatable`, that is refused, as the first
    /// send may have been applied.
    async fn invoke<'s>(
        &self,
        repeatable: bool,
        build: impl Fn() -> ScriptInvocation<'s>,
    ) -> Result<Value, CommandError> {
        let sent = AtomicBool::new(false);
        let ack = self.replicas;
        let wait_budget = ack.map_or(Duration::ZERO, |ack| ack.timeout + self.timeout);
        self.connection
            .call(self.timeout + wait_budget, |mut conn| {
                let again = sent.swap(true, Ordering::Relaxed);
                let invocation = build();
                async move {
                    if again && !repeatable {
                        return Err(CommandError::Redis(not_resent()));
                    }
                    let value = invocation.invoke_async(&mut conn).await?;
                    // On the same connection: WAIT counts this connection's writes.
                    if let Some(ack) = ack {
                        let acked = wait_on(&mut conn, ack, wait_budget).await?;
                        if acked < ack.replicas {
                            return Err(CommandError::TooFewReplicas { acked, ack });
                        }
                    }
                    Ok(value)
                }
            })
            .await
    }

    /// Runs a fenced script: `script` with `KEYS` = [resource, its record,
    /// `extra_keys`...] and `ARGV` = [token, `args`...].
    async fn fenced(
        &self,
        script: &Script,
        (resource, record): (&str, &str),
        token: FencingToken,
        (extra_keys, args): (&[&str], &[Cow<'_, str>]),
        repeatable: bool,
    ) -> Result<Value, CommandError> {
        self.invoke(repeatable, || {
            let mut invocation = script.key(resource);
            invocation.key(record);
            for key in extra_keys {
                invocation.key(*key);
            }
            invocation.arg(token.get());
            for arg in args {
                invocation.arg(arg.as_ref());
            }
            invocation
        })
        .await
    }
}

/// The error of a request that was not resent after its connection dropped.
fn not_resent() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the connection was found dropped when the write was sent; it may have been applied, \
         so it was not sent again: read the resource before retrying",
    )
    .into()
}

#[async_trait]
impl Fence for RedisFence {
    async fn apply(&self, checked: CheckedWrite<'_>) -> Result<WriteOutcome, LockError> {
        let (resource, token, write) = (checked.resource, checked.token, checked.write);
        let record = self.record_key(resource)?;
        let call = Call::new(&write)?;
        let keys = (resource, record.as_str());
        let reply = self
            .fenced(call.script, keys, token, (&[], &call.args), call.repeatable)
            .await
            .and_then(reply::parse)
            .map_err(|e| self.error(e))?;
        let wrong_type = |wanted: &str, kind: &str| {
            invalid_write(format!(
                "`{resource}` holds a value of another type ({kind}), not {wanted}; \
                 delete it or fence another resource"
            ))
        };
        use FencedWrite::{Add, Delete, HashSet, Set};
        match (reply, &write) {
            (Reply::Stale(highest), _) => Err(stale(resource, token, highest)),
            (Reply::Ok(_), Set { .. } | Delete | HashSet { .. }) => Ok(WriteOutcome::Written),
            // INCRBY succeeded, so the sum fits.
            (Reply::Added(before), Add { delta, .. }) => match before.checked_add(*delta) {
                Some(after) => Ok(WriteOutcome::Counter(after)),
                None => Err(self.error(CommandError::Reply(format!(
                    "INCRBY {delta} succeeded on {before}"
                )))),
            },
            (Reply::Floor(current), Add { .. }) => Ok(WriteOutcome::BelowFloor { current }),
            (Reply::Overflow(current), Add { delta, .. }) => Err(invalid_write(format!(
                "adding {delta} to {current} in `{resource}` overflows a 64-bit integer"
            ))),
            (Reply::NotInteger, Add { .. }) => Err(invalid_write(format!(
                "`{resource}` holds a string that is not an integer, so nothing can be added \
                 to it; set it to a number, delete it or fence another resource"
            ))),
            (Reply::WrongType(kind), Add { .. }) => Err(wrong_type("an integer", &kind)),
            (Reply::WrongType(kind), HashSet { .. }) => Err(wrong_type("a hash field", &kind)),
            (reply, _) => {
                Err(self.error(CommandError::Reply(format!("{reply:?} to a fenced write"))))
            }
        }
    }

    async fn read(&self, resource: &str) -> Result<Option<String>, LockError> {
        self.record_key(resource)?;
        let reply = self
            .invoke(true, || READ.key(resource))
            .await
            .and_then(reply::read)
            .map_err(|e| self.error(e))?;
        match reply {
            Read::Missing => Ok(None),
            Read::Text(text) => Ok(Some(text)),
            // The text form MemoryFence gives a hash: fields sorted.
            Read::Hash(fields) => Ok(Some(format!("{fields:?}"))),
            Read::Other(what) => Err(LockError::backend(
                BACKEND,
                format!(
                    "`{resource}` on {} holds {what}, which a fence does not read; \
                     read it with a Redis client",
                    self.endpoint
                ),
            )),
        }
    }

    async fn highest(&self, resource: &str) -> Result<Option<FencingToken>, LockError> {
        let record = self.record_key(resource)?;
        let value: Option<String> = self
            .connection
            .call(self.timeout, |mut conn| {
                let mut get = redis::cmd("GET");
                get.arg(&record);
                async move { Ok(get.query_async(&mut conn).await?) }
            })
            .await
            .map_err(|e| self.error(e))?;
        let Some(text) = value else {
            return Ok(None);
        };
        reply::token(&text).map(Some).ok_or_else(|| {
            LockError::backend(
                BACKEND,
                format!(
                    "{}: the fence record `{record}` holds {text:?}, not a token; was it \
                     written by something other than a RedisFence?",
                    self.endpoint
                ),
            )
        })
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        self.record_pitfalls().await.map_err(|e| self.error(e))
    }
}
