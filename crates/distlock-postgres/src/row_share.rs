//! A row a primitive granted (a semaphore permit, a read or write share),
//! written once for both: it is renewed and released by its primitive's
//! owner-checked statements, and its release wakes the name's waiters.

use crate::backend::{MakeStatement, Table, micros};
use crate::error::BACKEND;
use async_trait::async_trait;
use distlock_core::LockError;
use distlock_core::adapter::{Holding, Ownership};
use std::sync::Arc;
use std::time::Duration;

/// Which primitive's tables a row lives in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ShareKind {
    /// A permit in `<table>_permits`.
    Permit,
    /// A read or write share in `<table>_shares`.
    RwShare,
}

/// A held row: the compare-owner statements find it by its owner value.
#[derive(Debug)]
pub(crate) struct RowShare {
    pub table: Arc<Table>,
    pub kind: ShareKind,
    pub name: String,
    pub owner: String,
    pub payload: String,
}

/// Deletes `owner`'s row and wakes the name's waiters: the release, and the
/// undo of an acquire cut off midway or ended without a share.
pub(crate) fn release_statement(
    table: Arc<Table>,
    kind: ShareKind,
    name: String,
    owner: String,
    payload: String,
) -> MakeStatement {
    Box::new(move || {
        let release = match kind {
            ShareKind::Permit => &table.sql.sem.release,
            ShareKind::RwShare => &table.sql.rw.leave,
        };
        sqlx::query(release.clone())
            .bind(table.namespace.clone())
            .bind(name.clone())
            .bind(owner.clone())
            .bind(table.sql.channel.clone())
            .bind(payload.clone())
    })
}

#[async_trait]
impl Holding for RowShare {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError> {
        let t = &self.table;
        let statement = match self.kind {
            ShareKind::Permit => &t.sql.sem.renew,
            ShareKind::RwShare => &t.sql.rw.renew,
        };
        let renew = sqlx::query(statement.clone())
            .bind(t.namespace.clone())
            .bind(self.name.clone())
            .bind(self.owner.clone())
            .bind(micros(ttl));
        match t.run(renew).await.map_err(|e| t.error(e))? {
            0 => Ok(Ownership::NotHeld),
            _ => Ok(Ownership::Held),
        }
    }

    async fn release(&self) -> Result<Ownership, LockError> {
        let t = &self.table;
        let release = release_statement(
            t.clone(),
            self.kind,
            self.name.clone(),
            self.owner.clone(),
            self.payload.clone(),
        );
        match t.count_rows(release()).await.map_err(|e| t.error(e))? {
            0 => Ok(Ownership::NotHeld),
            _ => Ok(Ownership::Held),
        }
    }
}
