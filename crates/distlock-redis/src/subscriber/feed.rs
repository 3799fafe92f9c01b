//! The subscriber's connection: classic pub/sub on one server (RESP2 frames),
//! or sharded pub/sub on a Redis Cluster (RESP3 pushes), where each channel is
//! subscribed on the primary of its slot.
//!
//! A cluster moves a slot's shard channels with the slot: when a reshard or a
//! failover takes the slot away, the server unsubscribes its clients
//! (`sunsubscribe` push). That is reported as [`Event::Dropped`], so the task
//! subscribes again (the crate routes the new `SSUBSCRIBE` to the new owner)
//! and wakes the channel's waiters, who may have missed a release meanwhile.

use crate::error::CommandError;
use crate::sentinel::Target;
use futures_core::Stream;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::mpsc;

/// What the connection heard.
pub(super) enum Event {
    /// A release was published on this channel.
    Message(String),
    /// The server ended this channel's subscription without being asked.
    Dropped(String),
    /// The connection is gone.
    Closed,
}

pub(super) enum Feed {
    Plain {
        sink: redis::aio::PubSubSink,
        stream: Pin<Box<redis::aio::PubSubStream>>,
    },
    Sharded {
        conn: ClusterConnection,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
    },
}

impl Feed {
    /// Connects to the target's server, or to the cluster.
    pub async fn open(target: &Target, timeout: Duration) -> Result<Feed, CommandError> {
        if let Target::Cluster(cluster) = target {
            let (conn, pushes) = cluster.subscriber(timeout).await?;
            return Ok(Feed::Sharded { conn, pushes });
        }
        let client = target.client(timeout).await?;
        let (sink, stream) = client.get_async_pubsub().await?.split();
        Ok(Feed::Plain {
            sink,
            stream: Box::pin(stream),
        })
    }

    /// Subscribes `channels`. A cluster takes one `SSUBSCRIBE` per channel:
    /// the channels of one command must share a slot.
    pub async fn subscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            Feed::Plain { sink, .. } => sink.subscribe(channels).await,
            Feed::Sharded { conn, .. } => {
                for channel in channels {
                    conn.ssubscribe(channel).await?;
                }
                Ok(())
            }
        }
    }

    pub async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Feed::Plain { sink, .. } => sink.unsubscribe(channel).await,
            Feed::Sharded { conn, .. } => conn.sunsubscribe(channel).await,
        }
    }

    /// The next thing heard; never returns while nothing happens.
    pub async fn next(&mut self) -> Event {
        match self {
            Feed::Plain { stream, .. } => {
                match std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
                    Some(message) => Event::Message(message.get_channel_name().to_owned()),
                    None => Event::Closed,
                }
            }
            Feed::Sharded { pushes, .. } => loop {
                let Some(push) = pushes.recv().await else {
                    return Event::Closed;
                };
                match (push.kind, channel_of(&push.data)) {
                    (PushKind::SMessage, Some(channel)) => return Event::Message(channel),
                    (PushKind::SUnsubscribe, Some(channel)) => return Event::Dropped(channel),
                    (PushKind::Disconnection, _) => return Event::Closed,
                    // Confirmations of our own subscriptions.
                    _ => {}
                }
            },
        }
    }
}

/// The channel a push names first.
fn channel_of(data: &[Value]) -> Option<String> {
    match data.first()? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}
