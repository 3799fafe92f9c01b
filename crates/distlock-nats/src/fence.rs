//! `NatsFence`: fenced writes on a JetStream KV bucket, each admitted by a
//! compare-and-set on the resource's record.
//!
//! One key per resource, `fence.<escaped resource>`, in the lock bucket of the
//! same URL, holds the highest token admitted and the value together:
//! `f1 HIGHEST` then, after a newline, nothing (no value), `t` and the text, or
//! `h` and one `FIELD VALUE` line per hash field (both escaped as lock names
//! are). A write reads the record, checks the token and computes the new
//! record, then writes it expecting the revision it read: a writer that got in
//! between makes the write conflict, and it is tried again on the new record,
//! so the check and the write are one atomic step. The record is never
//! collected (the bucket's sweep looks at lock keys only): it belongs to the
//! resource.

use crate::NatsConfig;
use crate::error::Servers;
use crate::keys::{FENCE_PREFIX, escape, unescape};
use crate::protocol;
use async_nats::jetstream::kv::{Operation, Store, UpdateErrorKind};
use async_trait::async_trait;
use distlock_core::fence::{CheckedWrite, add_outcome, invalid_write, stale, validate_resource};
use distlock_core::toolkit::Backoff;
use distlock_core::{Fence, FencedWrite, FencingToken, LockError, WriteOutcome};
use std::collections::BTreeMap;
use std::time::Duration;

/// A fenced key-value store in a NATS KV bucket: [`Fence`] over a revision
/// compare-and-set per resource (see the module docs). A value cannot expire
/// (KV on nats-server 2.9 has no per-key expiry): `FencedWrite::set_expiring`
/// is refused. `read` gives a hash as its fields in `MemoryFence`'s text form.
///
/// ```no_run
/// # async fn run(lease: distlock_core::Lease) -> Result<(), distlock_core::LockError> {
/// use distlock_core::{Fence, FencedWrite};
/// let fence = distlock_nats::NatsConfig::from_url("nats://127.0.0.1:4222/orders")?
///     .connect_fence()
///     .await?;
/// fence.write("stock", lease.token(), FencedWrite::set("10")).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct NatsFence {
    kv: Store,
    servers: Servers,
}

impl NatsConfig {
    /// Connects a fenced store on this config's bucket.
    pub async fn connect_fence(self) -> Result<NatsFence, LockError> {
        let (client, servers) = self.dial().await?;
        let js = self.jetstream(client);
        let kv =
            protocol::open_bucket(&js, &servers, self.bucket_name(), self.replica_count()).await?;
        Ok(NatsFence { kv, servers })
    }
}

/// A resource's value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Text(String),
    Hash(BTreeMap<String, String>),
}

/// A resource's record: the highest token admitted and the value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Stored {
    highest: Option<FencingToken>,
    value: Option<Value>,
}

impl Stored {
    fn encode(&self) -> Vec<u8> {
        let highest = self.highest.map_or(0, FencingToken::get);
        let mut out = format!("f1 {highest}\n");
        match &self.value {
            None => {}
            Some(Value::Text(text)) => {
                out.push('t');
                out.push_str(text);
            }
            Some(Value::Hash(hash)) => {
                out.push('h');
                for (field, value) in hash {
                    out.push_str(&format!("{} {}\n", escape(field), escape(value)));
                }
            }
        }
        out.into_bytes()
    }

    /// `None` for bytes a `NatsFence` did not write.
    fn decode(bytes: &[u8]) -> Option<Stored> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (head, body) = text.split_once('\n')?;
        let highest: u64 = head.strip_prefix("f1 ")?.parse().ok()?;
        let value = match body.chars().next() {
            None => None,
            Some('t') => Some(Value::Text(body[1..].to_owned())),
            Some('h') => Some(Value::Hash(
                body[1..]
                    .lines()
                    .map(|line| {
                        let (field, value) = line.split_once(' ')?;
                        Some((unescape(field)?, unescape(value)?))
                    })
                    .collect::<Option<_>>()?,
            )),
            Some(_) => return None,
        };
        Some(Stored {
            highest: (highest > 0).then(|| FencingToken::new(highest)),
            value,
        })
    }

    /// The record after `write` with an admitted token, and its outcome.
    fn apply(&self, resource: &str, write: FencedWrite) -> Result<(Self, WriteOutcome), LockError> {
        let wrong_type = |wanted: &str| {
            invalid_write(format!(
                "`{resource}` holds a value of another type, not {wanted}; delete it or fence \
                 another resource"
            ))
        };
        let mut next = self.clone();
        let outcome = match write {
            FencedWrite::Set {
                expire: Some(_), ..
            } => {
                return Err(invalid_write(
                    "a NATS fence cannot expire a value (KV has no per-key expiry on \
                     nats-server 2.9); use FencedWrite::set, or a Redis store"
                        .into(),
                ));
            }
            FencedWrite::Set { value, .. } => {
                next.value = Some(Value::Text(value));
                WriteOutcome::Written
            }
            FencedWrite::Delete => {
                next.value = None;
                WriteOutcome::Written
            }
            FencedWrite::Add { delta, floor } => {
                let current = match &self.value {
                    None => 0,
                    Some(Value::Text(text)) => {
                        text.parse().map_err(|_| wrong_type("an integer"))?
                    }
                    Some(Value::Hash(_)) => return Err(wrong_type("an integer")),
                };
                let outcome = add_outcome(resource, current, delta, floor)?;
                if let WriteOutcome::Counter(sum) = outcome {
                    next.value = Some(Value::Text(sum.to_string()));
                }
                outcome
            }
            FencedWrite::HashSet { field, value } => {
                match &mut next.value {
                    Some(Value::Hash(hash)) => {
                        hash.insert(field, value);
                    }
                    Some(Value::Text(_)) => return Err(wrong_type("a hash field")),
                    None => next.value = Some(Value::Hash(BTreeMap::from([(field, value)]))),
                }
                WriteOutcome::Written
            }
            other => {
                return Err(invalid_write(format!(
                    "{other:?} is not a write this store knows"
                )));
            }
        };
        Ok((next, outcome))
    }
}

/// The KV key of a resource's record.
fn record_key(resource: &str) -> String {
    format!("{FENCE_PREFIX}{}", escape(resource))
}

impl NatsFence {
    /// The resource's record and the revision a write over it expects.
    async fn load(&self, resource: &str) -> Result<(Stored, u64), LockError> {
        let key = record_key(resource);
        let entry = self
            .kv
            .entry(&key)
            .await
            .map_err(|e| self.servers.unavailable("reading a fence record", &e))?;
        match entry {
            None => Ok((Stored::default(), 0)),
            Some(entry) if entry.operation != Operation::Put => {
                Ok((Stored::default(), entry.revision))
            }
            Some(entry) => match Stored::decode(&entry.value) {
                Some(stored) => Ok((stored, entry.revision)),
                None => Err(self.servers.refused(
                    "reading a fence record",
                    format_args!(
                        "`{key}` holds a value distlock did not write; keep other data out of \
                         the bucket"
                    ),
                )),
            },
        }
    }
}

#[async_trait]
impl Fence for NatsFence {
    async fn apply(&self, checked: CheckedWrite<'_>) -> Result<WriteOutcome, LockError> {
        let (resource, token, write) = (checked.resource, checked.token, checked.write);
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(50));
        loop {
            let (stored, revision) = self.load(resource).await?;
            if let Some(highest) = stored.highest.filter(|highest| token < *highest) {
                return Err(stale(resource, token, highest));
            }
            let (mut next, outcome) = stored.apply(resource, write.clone())?;
            next.highest = Some(token);
            let key = record_key(resource);
            match self.kv.update(&key, next.encode().into(), revision).await {
                Ok(_) => return Ok(outcome),
                // Another writer got in between: check against its record.
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(e) => {
                    return Err(self.servers.unavailable(
                        "writing a fence record (it may have been applied: read the resource \
                         before retrying)",
                        &e,
                    ));
                }
            }
        }
    }

    async fn read(&self, resource: &str) -> Result<Option<String>, LockError> {
        validate_resource(resource)?;
        Ok(match self.load(resource).await?.0.value {
            None => None,
            Some(Value::Text(text)) => Some(text),
            Some(Value::Hash(hash)) => Some(format!("{hash:?}")),
        })
    }

    async fn highest(&self, resource: &str) -> Result<Option<FencingToken>, LockError> {
        validate_resource(resource)?;
        Ok(self.load(resource).await?.0.highest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_foreign_bytes() {
        let hash = BTreeMap::from([("a b".to_owned(), "x\ny".to_owned())]);
        for stored in [
            Stored::default(),
            Stored {
                highest: Some(FencingToken::new(7)),
                value: Some(Value::Text("multi\nline".to_owned())),
            },
            Stored {
                highest: Some(FencingToken::new(u64::MAX)),
                value: Some(Value::Hash(hash)),
            },
        ] {
            assert_eq!(Stored::decode(&stored.encode()), Some(stored));
        }
        for bad in [
            &b"f1 1"[..],
            b"f2 1\n",
            b"f1 x\n",
            b"f1 1\nq",
            b"f1 1\nhnospace\n",
        ] {
            assert_eq!(Stored::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn writes_compute_the_next_record() {
        let text = |s: &str| Stored {
            highest: None,
            value: Some(Value::Text(s.to_owned())),
        };
        let (next, outcome) = text("1").apply("r", FencedWrite::add(2)).unwrap();
        assert_eq!((next, outcome), (text("3"), WriteOutcome::Counter(3)));
        let (next, outcome) = text("0")
            .apply("r", FencedWrite::add_with_floor(-1, 0))
            .unwrap();
        assert_eq!(
            (next, outcome),
            (text("0"), WriteOutcome::BelowFloor { current: 0 })
        );
        assert!(text("x").apply("r", FencedWrite::add(1)).is_err());
        assert!(
            text("x")
                .apply("r", FencedWrite::hash_set("f", "v"))
                .is_err()
        );
        let expiring = FencedWrite::set_expiring("v", Duration::from_secs(1));
        let refused = text("x").apply("r", expiring).unwrap_err().to_string();
        assert!(refused.contains("cannot expire"), "{refused}");
    }
}
