//! A fence whose store is process memory.

use super::{
    CheckedWrite, FencedWrite, WriteOutcome, add_outcome, invalid_write, stale, validate_resource,
};
use crate::{Fence, FencingToken, LockError};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::time::Instant;

/// A fenced key-value store in process memory, for tests, demos and resources
/// that live in one process. One mutex covers the token check and the write, so
/// both happen in one step.
///
/// ```
/// use distlock_core::{Fence, FencedWrite, FencingToken, LockError, MemoryFence, WriteOutcome};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let fence = MemoryFence::new();
/// fence.write("stock", FencingToken::new(7), FencedWrite::set("10")).await?;
/// let taken = fence.write("stock", FencingToken::new(7), FencedWrite::add_with_floor(-1, 0)).await?;
/// assert_eq!(taken, WriteOutcome::Counter(9));
/// // A holder with an older token is refused, and the stock is unchanged.
/// let late = fence.write("stock", FencingToken::new(6), FencedWrite::add(-1)).await;
/// assert!(matches!(late, Err(LockError::StaleToken { .. })));
/// assert_eq!(fence.read("stock").await?.as_deref(), Some("9"));
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct MemoryFence {
    resources: Mutex<HashMap<String, Resource>>,
}

#[derive(Debug, Default)]
struct Resource {
    highest: Option<FencingToken>,
    value: Option<Value>,
}

#[derive(Debug)]
enum Value {
    Text {
        text: String,
        expires: Option<Instant>,
    },
    Hash(BTreeMap<String, String>),
}

impl MemoryFence {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks `token` and, only if it is admitted, runs `write` under the same
    /// mutex, so no stale writer can slip in between check and write. For
    /// resources that live in this process and are not a [`FencedWrite`].
    pub fn write_with<T>(
        &self,
        resource: &str,
        token: FencingToken,
        write: impl FnOnce() -> T,
    ) -> Result<T, LockError> {
        validate_resource(resource)?;
        let mut resources = self.lock();
        admit(
            resources.entry(resource.to_owned()).or_default(),
            resource,
            token,
        )?;
        Ok(write())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Resource>> {
        self.resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn admit(entry: &mut Resource, resource: &str, token: FencingToken) -> Result<(), LockError> {
    match entry.highest {
        Some(highest) if token < highest => Err(stale(resource, token, highest)),
        _ => {
            entry.highest = Some(token);
            Ok(())
        }
    }
}

impl Resource {
    /// The value, with an expired one gone.
    fn live_value(&mut self) -> Option<&mut Value> {
        let now = Instant::now();
        if matches!(self.value, Some(Value::Text { expires: Some(at), .. }) if at <= now) {
            self.value = None;
        }
        self.value.as_mut()
    }

    fn apply(&mut self, resource: &str, write: FencedWrite) -> Result<WriteOutcome, LockError> {
        match write {
            FencedWrite::Set { value, expire } => {
                let expires = expire.map(|after| Instant::now() + after);
                self.value = Some(Value::Text {
                    text: value,
                    expires,
                });
                Ok(WriteOutcome::Written)
            }
            FencedWrite::Delete => {
                self.value = None;
                Ok(WriteOutcome::Written)
            }
            FencedWrite::Add { delta, floor } => self.add(resource, delta, floor),
            FencedWrite::HashSet { field, value } => {
                match self.live_value() {
                    Some(Value::Hash(hash)) => {
                        hash.insert(field, value);
                    }
                    Some(Value::Text { .. }) => return Err(wrong_type(resource, "a hash field")),
                    None => self.value = Some(Value::Hash(BTreeMap::from([(field, value)]))),
                }
                Ok(WriteOutcome::Written)
            }
        }
    }

    fn add(
        &mut self,
        resource: &str,
        delta: i64,
        floor: Option<i64>,
    ) -> Result<WriteOutcome, LockError> {
        let (current, expires) = match self.live_value() {
            None => (0, None),
            Some(Value::Text { text, expires }) => match text.parse::<i64>() {
                Ok(n) => (n, *expires),
                Err(_) => return Err(wrong_type(resource, "an integer")),
            },
            Some(Value::Hash(_)) => return Err(wrong_type(resource, "an integer")),
        };
        let outcome = add_outcome(resource, current, delta, floor)?;
        if let WriteOutcome::Counter(next) = outcome {
            self.value = Some(Value::Text {
                text: next.to_string(),
                expires,
            });
        }
        Ok(outcome)
    }
}

fn wrong_type(resource: &str, wanted: &str) -> LockError {
    invalid_write(format!(
        "`{resource}` holds a value of another type, not {wanted}; \
         delete it or fence another resource"
    ))
}

#[async_trait]
impl Fence for MemoryFence {
    async fn apply(&self, checked: CheckedWrite<'_>) -> Result<WriteOutcome, LockError> {
        let (resource, token, write) = (checked.resource, checked.token, checked.write);
        let mut resources = self.lock();
        let entry = resources.entry(resource.to_owned()).or_default();
        // Check the write against the value before admitting the token, so a
        // refused write (wrong type, overflow) records nothing.
        let previous = entry.highest;
        admit(entry, resource, token)?;
        entry
            .apply(resource, write)
            .inspect_err(|_| entry.highest = previous)
    }

    async fn read(&self, resource: &str) -> Result<Option<String>, LockError> {
        validate_resource(resource)?;
        let mut resources = self.lock();
        Ok(
            match resources.get_mut(resource).and_then(Resource::live_value) {
                Some(Value::Text { text, .. }) => Some(text.clone()),
                Some(Value::Hash(hash)) => Some(format!("{hash:?}")),
                None => None,
            },
        )
    }

    async fn highest(&self, resource: &str) -> Result<Option<FencingToken>, LockError> {
        validate_resource(resource)?;
        Ok(self.lock().get(resource).and_then(|entry| entry.highest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const T: fn(u64) -> FencingToken = FencingToken::new;

    #[tokio::test]
    async fn lower_tokens_are_refused_equal_and_higher_admitted() {
        let fence = MemoryFence::new();
        fence.write("r", T(5), FencedWrite::set("a")).await.unwrap();
        fence.write("r", T(5), FencedWrite::set("b")).await.unwrap();
        match fence.write("r", T(4), FencedWrite::set("stale")).await {
            Err(LockError::StaleToken { token, highest, .. }) => {
                assert_eq!((token, highest), (T(4), T(5)));
            }
            other => panic!("expected StaleToken, got {other:?}"),
        }
        assert_eq!(fence.read("r").await.unwrap().as_deref(), Some("b"));
        fence.write("r", T(9), FencedWrite::Delete).await.unwrap();
        assert_eq!(fence.highest("r").await.unwrap(), Some(T(9)));
        assert_eq!(fence.read("r").await.unwrap(), None);
    }

    #[tokio::test]
    async fn add_with_floor_answers_below_floor_and_changes_nothing() {
        let fence = MemoryFence::new();
        let take = || FencedWrite::add_with_floor(-1, 0);
        fence.write("s", T(1), FencedWrite::set("1")).await.unwrap();
        assert_eq!(
            fence.write("s", T(1), take()).await.unwrap(),
            WriteOutcome::Counter(0)
        );
        assert_eq!(
            fence.write("s", T(2), take()).await.unwrap(),
            WriteOutcome::BelowFloor { current: 0 }
        );
        assert_eq!(fence.highest("s").await.unwrap(), Some(T(2)));
    }

    #[tokio::test]
    async fn a_refused_write_records_no_token() {
        let fence = MemoryFence::new();
        fence
            .write("h", T(1), FencedWrite::hash_set("f", "v"))
            .await
            .unwrap();
        let err = fence
            .write("h", T(3), FencedWrite::add(1))
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::InvalidWrite { .. }), "{err}");
        assert_eq!(fence.highest("h").await.unwrap(), Some(T(1)));
        let big = "x".repeat(FencedWrite::MAX_PAYLOAD + 1);
        let err = fence
            .write("h", T(3), FencedWrite::set(big))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("1048577 bytes"), "{err}");
        assert!(matches!(
            fence.write("", T(3), FencedWrite::Delete).await,
            Err(LockError::InvalidKey { .. })
        ));
    }

    #[tokio::test]
    async fn expiring_values_vanish_and_the_token_stays() {
        let fence = MemoryFence::new();
        let write = FencedWrite::set_expiring("v", Duration::from_millis(20));
        fence.write("e", T(3), write).await.unwrap();
        assert_eq!(fence.read("e").await.unwrap().as_deref(), Some("v"));
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(fence.read("e").await.unwrap(), None);
        assert_eq!(fence.highest("e").await.unwrap(), Some(T(3)));
    }

    #[test]
    fn a_stale_closure_does_not_run() {
        let fence = MemoryFence::new();
        let mut writes = 0;
        fence.write_with("r", T(2), || writes += 1).unwrap();
        assert!(fence.write_with("r", T(1), || writes += 1).is_err());
        assert_eq!(writes, 1);
    }
}
