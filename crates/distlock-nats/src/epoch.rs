//! The bucket's epoch (its stream's creation second, the high bits of every
//! token), read once at connect rather than after every grant.
//!
//! A bucket deleted and recreated restarts its sequence at 1 under a later
//! creation second. This client notices when a grant's revision is not above
//! the highest sequence it has seen (the stream went back, or two of its own
//! writes' replies crossed) and then reads the stream information again before
//! giving the token; the bounded sweep ([`crate::sweep`]) refreshes it too, at
//! most once a second.

use crate::error::Servers;
use crate::protocol::{self, Epoch};
use async_nats::jetstream::stream::Stream;
use distlock_core::{FencingToken, LockError};
use std::sync::Mutex;

/// The last epoch read and the highest sequence seen since.
#[derive(Debug)]
pub(crate) struct EpochCache(Mutex<Epoch>);

impl EpochCache {
    /// Reads the bucket's epoch, at connect.
    pub(crate) async fn read(stream: &Stream, servers: &Servers) -> Result<Self, LockError> {
        Ok(EpochCache(Mutex::new(
            protocol::epoch(stream, servers).await?,
        )))
    }

    /// Keeps a freshly read epoch.
    pub(crate) fn refresh(&self, epoch: Epoch) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = epoch;
    }

    /// The token of a grant at `revision`, or `None` when the bucket was
    /// recreated since (the grant went with it). Reads the stream information
    /// only when `revision` is not above every sequence seen.
    pub(crate) async fn token(
        &self,
        stream: &Stream,
        servers: &Servers,
        revision: u64,
    ) -> Result<Option<FencingToken>, LockError> {
        let cached = {
            let mut epoch = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let above = revision > epoch.last_sequence;
            epoch.last_sequence = epoch.last_sequence.max(revision);
            above.then_some(*epoch)
        };
        let epoch = match cached {
            Some(epoch) => epoch,
            None => {
                let fresh = protocol::epoch(stream, servers).await?;
                self.refresh(fresh);
                fresh
            }
        };
        protocol::token(epoch, revision)
    }
}
