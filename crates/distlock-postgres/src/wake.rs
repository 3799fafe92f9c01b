//! Wake-ups by `LISTEN/NOTIFY`: one listening connection per client (never
//! one per waiter) on the table's channel, whose notifications (payload:
//! namespace, newline, name) wake the waiters of that name.
//!
//! Notifications are transient: one sent while the listener reconnects is
//! lost. So a lost connection wakes every waiter (they try again at once), and
//! waiters always also poll, with a bounded backoff.
//!
//! Listening is checked once at connect: the listener must hear a
//! notification sent through the lock connections, which a `LISTEN` made
//! through a transaction-pooling proxy never does. Through such a proxy
//! without a direct connection to listen on, there is no listener and
//! waiters poll alone.

use crate::error::{BACKEND, DbError};
use crate::pool::Pool;
use distlock_core::LockError;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The pause before listening again after the listener failed.
const RELISTEN_PAUSE: Duration = Duration::from_millis(500);

/// The names waited for, each with the [`Notify`] its waiters wait on.
type Waiting = Mutex<HashMap<String, Arc<Notify>>>;

/// The client's listener, if it has one, and the waiters it wakes. Dropping
/// it stops the listener and closes its connection.
#[derive(Debug)]
pub(crate) struct Wakeups {
    waiting: Arc<Waiting>,
    task: Option<JoinHandle<()>>,
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl Wakeups {
    /// No listener: waiters poll alone.
    pub fn polling() -> Self {
        Wakeups {
            waiting: Arc::default(),
            task: None,
        }
    }

    /// Connects the listener with `options` (waiting at most the pool's
    /// connect timeout), checks that it hears a notification `pool` sends on
    /// `channel`, and starts it.
    pub async fn listen(
        options: &PgConnectOptions,
        pool: &Pool,
        channel: &str,
        endpoint: &str,
    ) -> Result<Self, LockError> {
        let connect_timeout = pool.connect_timeout();
        // A one-connection pool only so that PgListener can reconnect by itself.
        let listeners = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(connect_timeout)
            .connect_lazy_with(options.clone());
        let started = async {
            let mut listener = PgListener::connect_with(&listeners).await?;
            listener.listen(channel).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let err = |e: DbError| e.into_lock_error(&crate::error::TEXTS, endpoint);
        let mut listener = match tokio::time::timeout(connect_timeout, started).await {
            Ok(Ok(listener)) => listener,
            Ok(Err(e)) => return Err(err(DbError::Sql(e))),
            Err(_) => return Err(err(DbError::TimedOut(connect_timeout))),
        };
        // Any notification of the channel (the probe's, or a release's) shows
        // that this connection hears what the lock connections send.
        let probe = sqlx::query("SELECT pg_notify($1, '')").bind(channel.to_owned());
        let heard = async {
            pool.get()
                .await
                .map_err(err)?
                .execute(probe)
                .await
                .map_err(err)?;
            match tokio::time::timeout(connect_timeout, listener.recv()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(err(DbError::Sql(e))),
                Err(_) => Err(crate::pooler::deaf_listener(endpoint, connect_timeout)),
            }
        };
        if let Err(e) = heard.await {
            // Through a transaction pooler the LISTEN stayed on a server
            // connection other clients get next: take it back if this one
            // reaches it (at best; the proxy picks the server connection).
            let _ = tokio::time::timeout(connect_timeout, listener.unlisten_all()).await;
            return Err(e);
        }
        let waiting: Arc<Waiting> = Arc::default();
        let task = Some(tokio::spawn(run(listener, waiting.clone())));
        Ok(Wakeups { waiting, task })
    }

    /// A handle to wait for `payload`'s next notification.
    pub fn waiter(&self, payload: &str) -> Waiter {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let notify = waiting.entry(payload.to_owned()).or_default().clone();
        Waiter {
            payload: payload.to_owned(),
            notify,
            waiting: self.waiting.clone(),
        }
    }
}

/// One waiter's registration; dropping the last one for a name forgets it.
#[derive(Debug)]
pub(crate) struct Waiter {
    payload: String,
    notify: Arc<Notify>,
    waiting: Arc<Waiting>,
}

/// What the waiter waits on: call `enable()` on its `notified()` (pinned)
/// before the attempt it follows, so a release between the attempt and the
/// wait is not missed.
impl std::ops::Deref for Waiter {
    type Target = Notify;

    fn deref(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        // The map's reference and ours: nobody else waits for this name.
        if Arc::strong_count(&self.notify) <= 2 {
            waiting.remove(&self.payload);
        }
    }
}

async fn run(mut listener: PgListener, waiting: Arc<Waiting>) {
    let wake_all = || {
        let waiting = waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.values().for_each(|notify| notify.notify_waiters());
    };
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                let waiting = waiting.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(notify) = waiting.get(notification.payload()) {
                    notify.notify_waiters();
                }
            }
            // The connection was lost (and is being re-made): whatever was
            // notified meanwhile is gone, so every waiter looks again.
            Ok(None) => wake_all(),
            Err(e) => {
                tracing::debug!(backend = BACKEND, error = %e, "the LISTEN connection failed; waiters poll until it is back");
                wake_all();
                tokio::time::sleep(RELISTEN_PAUSE).await;
            }
        }
    }
}
