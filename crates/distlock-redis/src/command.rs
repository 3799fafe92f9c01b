//! The command connection's two shapes behind one type: the protocol sends
//! scripts, commands and pipelines without knowing which it has.

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;

/// A command connection: to one server, or to a Redis Cluster, where each
/// command goes to the primary of its first key's slot. Scripts, pipelines and
/// commands are sent the same way to either, so no protocol step knows which.
#[derive(Clone)]
pub(crate) enum CommandConn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl CommandConn {
    /// The command a script publishes a release with: sharded pub/sub in a
    /// cluster, so the message stays on the channel's slot (its primary and
    /// replicas) instead of crossing the whole cluster bus.
    pub fn publish_command(&self) -> &'static str {
        match self {
            CommandConn::Single(_) => "PUBLISH",
            CommandConn::Cluster(_) => "SPUBLISH",
        }
    }
}

impl ConnectionLike for CommandConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            CommandConn::Single(conn) => conn.req_packed_command(cmd),
            CommandConn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            CommandConn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            CommandConn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            CommandConn::Single(conn) => conn.get_db(),
            CommandConn::Cluster(conn) => conn.get_db(),
        }
    }
}
