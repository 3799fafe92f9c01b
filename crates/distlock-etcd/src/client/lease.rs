//! Leases (`etcdserverpb.Lease`: grant, revoke, the keep-alive stream,
//! time-to-live) and etcd's own lock service (`v3lockpb.Lock`), which locks
//! with a lease.

use super::pb::{
    Empty, LeaseGrantRequest, LeaseGrantResponse, LeaseIdRequest, LeaseLeasesResponse,
    LeaseRevokeResponse, LeaseTtlResponse, LockRequest, LockResponse, UnlockRequest,
};
use super::{Conn, Error, Result};
use tokio::sync::mpsc;
use tonic::Streaming;

/// Grants, keeps alive and revokes leases; clones share the connection.
#[derive(Debug, Clone)]
pub struct LeaseClient {
    conn: Conn,
}

impl LeaseClient {
    pub(super) fn new(conn: Conn) -> Self {
        LeaseClient { conn }
    }

    /// A new lease of `ttl` seconds (etcd may raise it to its minimum).
    pub async fn grant(&self, ttl: i64) -> Result<LeaseGrantResponse> {
        let request = LeaseGrantRequest { ttl };
        self.conn
            .unary("/etcdserverpb.Lease/LeaseGrant", &request)
            .await
    }

    /// Ends lease `id` and deletes its keys.
    pub async fn revoke(&self, id: i64) -> Result<LeaseRevokeResponse> {
        let request = LeaseIdRequest { id };
        self.conn
            .unary("/etcdserverpb.Lease/LeaseRevoke", &request)
            .await
    }

    /// How long lease `id` lives without keep-alives (-1 once it is gone).
    pub async fn time_to_live(&self, id: i64) -> Result<LeaseTtlResponse> {
        let request = LeaseIdRequest { id };
        let path = "/etcdserverpb.Lease/LeaseTimeToLive";
        self.conn.unary(path, &request).await
    }

    /// The ids of every lease the cluster holds.
    pub async fn leases(&self) -> Result<Vec<i64>> {
        let path = "/etcdserverpb.Lease/LeaseLeases";
        let reply: LeaseLeasesResponse = self.conn.unary(path, &Empty {}).await?;
        Ok(reply.leases.into_iter().map(|lease| lease.id).collect())
    }

    /// Opens a keep-alive stream for lease `id` with one keep-alive, and waits
    /// for its answer: [`Error::LeaseNotFound`] if the lease is gone.
    pub async fn keep_alive(&self, id: i64) -> Result<(LeaseKeeper, LeaseKeepAliveStream)> {
        let path = "/etcdserverpb.Lease/LeaseKeepAlive";
        let (sender, mut stream) = self.conn.stream(path, LeaseIdRequest { id }).await?;
        match stream.message().await? {
            Some(LeaseTtlResponse { ttl, .. }) if ttl > 0 => {}
            Some(_) => return Err(Error::LeaseNotFound),
            None => return Err(Error::StreamEnded("lease keep-alive")),
        }
        Ok((LeaseKeeper { id, sender }, LeaseKeepAliveStream { stream }))
    }
}

/// Sends keep-alives on a lease's stream.
#[derive(Debug)]
pub struct LeaseKeeper {
    id: i64,
    sender: mpsc::Sender<LeaseIdRequest>,
}

impl LeaseKeeper {
    /// Sends one keep-alive; its answer comes on the [`LeaseKeepAliveStream`].
    pub async fn keep_alive(&mut self) -> Result<()> {
        let request = LeaseIdRequest { id: self.id };
        self.sender
            .send(request)
            .await
            .map_err(|_| Error::StreamEnded("lease keep-alive"))
    }
}

/// The answers to a lease's keep-alives, in order.
#[derive(Debug)]
pub struct LeaseKeepAliveStream {
    stream: Streaming<LeaseTtlResponse>,
}

impl LeaseKeepAliveStream {
    /// The next answer; `None` when the stream ended.
    pub async fn message(&mut self) -> Result<Option<LeaseTtlResponse>> {
        Ok(self.stream.message().await?)
    }
}

impl LeaseGrantResponse {
    /// The lease's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The granted ttl in seconds.
    pub fn ttl(&self) -> i64 {
        self.ttl
    }

    /// The server's refusal, empty when granted.
    pub fn error(&self) -> &str {
        &self.error
    }
}

impl LeaseTtlResponse {
    /// The lease's remaining ttl in seconds (0 or -1: gone).
    pub fn ttl(&self) -> i64 {
        self.ttl
    }
}

/// etcd's own lock service; clones share the connection.
#[derive(Debug, Clone)]
pub struct LockClient {
    conn: Conn,
}

impl LockClient {
    pub(super) fn new(conn: Conn) -> Self {
        LockClient { conn }
    }

    /// Waits for the lock `name` and holds it while `lease` lives.
    pub async fn lock(&self, name: impl Into<Vec<u8>>, lease: i64) -> Result<LockResponse> {
        let request = LockRequest {
            name: name.into(),
            lease,
        };
        self.conn.unary("/v3lockpb.Lock/Lock", &request).await
    }

    /// Releases the lock held with `key` (the one [`LockClient::lock`] returned).
    pub async fn unlock(&self, key: impl Into<Vec<u8>>) -> Result<()> {
        let request = UnlockRequest { key: key.into() };
        let _: Empty = self.conn.unary("/v3lockpb.Lock/Unlock", &request).await?;
        Ok(())
    }
}

impl LockResponse {
    /// The holder's key: give it to [`LockClient::unlock`].
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}
