//! What a lease listens on for its loss, set up before its grant is written:
//! a plain subscription to its key's subject, which other clients' writes
//! reach, and this client's own deletions ([`Deletions`]), which the
//! subscription is not sent (the client connects without echo).

use async_nats::Subscriber;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::watch;

/// This client's own deletions of held locks (`delete_holder`): a client
/// without echo is not sent its own writes, so its leases hear of these here.
#[derive(Debug)]
pub(crate) struct Deletions(watch::Sender<()>);

impl Default for Deletions {
    fn default() -> Self {
        Deletions(watch::Sender::new(()))
    }
}

impl Deletions {
    /// What a lease listens on from now on: `subscriber`, its key's subject,
    /// and this client's deletions after this call.
    pub(crate) fn listen(&self, subscriber: Subscriber) -> Listening {
        Listening {
            subscriber,
            deletions: self.0.subscribe(),
        }
    }

    /// This client deleted a holder's record: every lease of the client
    /// checks its key.
    pub(crate) fn deleted(&self) {
        self.0.send_replace(());
    }
}

/// What one lease listens on.
#[derive(Debug)]
pub(crate) struct Listening {
    subscriber: Subscriber,
    deletions: watch::Receiver<()>,
}

/// What [`Listening::heard`] heard.
pub(crate) enum Heard {
    /// A write to the key, sent by the server.
    Write(async_nats::Message),
    /// This client deleted a holder's record, maybe this one's.
    Deletion,
    /// The subscription or the client ended: nothing more will come.
    Ended,
}

impl Listening {
    /// The next thing heard.
    pub(crate) async fn heard(&mut self) -> Heard {
        tokio::select! {
            message = self.subscriber.next() => message.map_or(Heard::Ended, Heard::Write),
            changed = self.deletions.changed() => match changed {
                Ok(()) => Heard::Deletion,
                Err(_) => Heard::Ended,
            },
        }
    }

    /// A kept subscription made ready for a new grant: what it heard before
    /// now is about earlier records, so it goes (a write of before that
    /// arrives later costs one read of the key, no more). `None` when the
    /// subscription has ended.
    pub(crate) fn fresh(mut self) -> Option<Self> {
        loop {
            match self.subscriber.next().now_or_never() {
                Some(Some(_)) => {}
                Some(None) => return None,
                None => break,
            }
        }
        self.deletions.borrow_and_update();
        Some(self)
    }
}
