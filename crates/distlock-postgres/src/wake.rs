//! Wake-ups by `LISTEN/NOTIFY`: one listening connection per client (never
//! one per waiter) on the table's channel, whose notifications (payload:
//! namespace, newline, name) wake the waiters of that name.
//!
//! Notifications are transient: one sent while the listener reconnects is
//! lost. So a lost connection wakes every waiter (they try again at once), and
//! waiters always also poll, with a bounded backoff.

use crate::error::{BACKEND, DbError};
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

/// The client's listener and the waiters it wakes. Dropping it stops the
/// listener and closes its connection.
#[derive(Debug)]
pub(crate) struct Wakeups {
    waiting: Arc<Waiting>,
    task: JoinHandle<()>,
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Wakeups {
    /// Connects the listener (waiting at most `connect_timeout`) and starts it
    /// on `channel`.
    pub async fn listen(
        options: &PgConnectOptions,
        channel: &str,
        connect_timeout: Duration,
        endpoint: &str,
    ) -> Result<Self, LockError> {
        // A one-connection pool only so that PgListener can reconnect by itself.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(connect_timeout)
            .connect_lazy_with(options.clone());
        let started = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(channel).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let listener = match tokio::time::timeout(connect_timeout, started).await {
            Ok(Ok(listener)) => listener,
            Ok(Err(e)) => {
                return Err(DbError::Sql(e).into_lock_error(&crate::error::TEXTS, endpoint));
            }
            Err(_) => {
                return Err(DbError::TimedOut(connect_timeout)
                    .into_lock_error(&crate::error::TEXTS, endpoint));
            }
        };
        let waiting: Arc<Waiting> = Arc::default();
        let task = tokio::spawn(run(listener, waiting.clone()));
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
