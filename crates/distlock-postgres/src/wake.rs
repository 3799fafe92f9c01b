//! Wake-ups by `LISTEN/NOTIFY`: one listening connection per client (never
//! one per waiter) on the table's channel, whose notifications (payload:
//! namespace, newline, name) wake the waiters of that name.
//!
//! Notifications are transient: one sent while the listener reconnects is
//! lost. So a lost connection wakes every waiter (they try again at once), and
//! waiters always also poll, with a bounded backoff.
//!
//! A `version_cas` release notifies only a name marked as waited for (see
//! `distlock_sql::table::Wake`): the listening session holds a shared
//! advisory lock on the pair (`hashtext` of the table, `hashtext` of the
//! payload) while this client has waiters of the name, and the release
//! notifies only when it cannot take that pair with
//! `pg_try_advisory_xact_lock`. A waiter marks after its first busy attempt
//! and then tries again: a release that took the pair before the mark holds
//! it until its commit, so the mark waits for that commit and the try after
//! it sees the row freed; a release after the mark notifies. The pair is
//! another lock space than `advisory`'s: its locks are `int8`s, and its marks
//! halves of a SHA-256 prefix, not `hashtext`s of a table name; a chance
//! match costs a notification nobody needed (or a mark that waits for one
//! commit). A lost session loses its marks: the session made again first
//! drops every advisory lock it holds and takes all marks again, then wakes
//! every waiter. Marks wait at most [`MARK_WAIT`] for a lock held by others
//! (`lock_timeout`), since the listener serves all the client's waiters, and
//! any statement there at most that plus the reply timeout: a session that
//! does not answer in time is taken as lost, and its waiters poll.
//!
//! Listening is checked once at connect: the listener must hear a
//! notification sent through the lock connections, which a `LISTEN` made
//! through a transaction-pooling proxy never does. Through such a proxy
//! without a direct connection to listen on, there is no listener and
//! waiters poll alone.

use crate::error::{BACKEND, DbError};
use crate::pool::Pool;
use distlock_core::LockError;
use distlock_sql::pool::BoxFuture;
use distlock_sql::table::Wake;
use sqlx::Postgres;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgListener, PgPoolOptions};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

/// The pause before listening again after the listener failed.
const RELISTEN_PAUSE: Duration = Duration::from_millis(500);
/// The listening session's `lock_timeout`: how long a mark waits for a lock
/// on its pair (a release's, until that release commits).
const MARK_WAIT: Duration = Duration::from_secs(1);
/// Marks the name of payload `$2` of the table `$1` as waited for.
const MARK: &str = include_str!("sql/listener_mark.sql");
/// Drops the mark of payload `$2` of the table `$1`.
const UNMARK: &str = include_str!("sql/listener_unmark.sql");

/// A statement for the listening session.
type Statement<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// What a waiter asks of the listening session.
#[derive(Debug)]
enum Marking {
    /// Another waiter of the payload's name: answers whether its mark is held.
    Take(String, oneshot::Sender<bool>),
    /// One waiter of the payload's name gone; the last one drops the mark.
    Drop(String),
}

/// The names waited for, each with the [`Notify`] its waiters wait on.
type Waiting = Mutex<HashMap<String, Arc<Notify>>>;

/// The client's listener, if it has one, and the waiters it wakes. Dropping
/// it stops the listener and closes its connection.
#[derive(Debug)]
pub(crate) struct Wakeups {
    waiting: Arc<Waiting>,
    /// The listener's, when there is one.
    marks: Option<mpsc::UnboundedSender<Marking>>,
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
            marks: None,
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
            .connect_lazy_with(
                options
                    .clone()
                    .options([("lock_timeout", format!("{}ms", MARK_WAIT.as_millis()))]),
            );
        let started = async {
            let mut listener = PgListener::connect_with(&listeners).await?;
            // A lost connection is reported at once: its marks must be taken
            // again on the next before anything else runs there.
            listener.eager_reconnect(false);
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
        let probe = sqlx::query("SELECT pg_notify($1, '')").bind(channel);
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
        let (marks, requests) = mpsc::unbounded_channel();
        let listening = Listening {
            listener,
            channel: channel.to_owned(),
            marks: HashMap::new(),
            lost: false,
            reply: pool.timeout() + MARK_WAIT,
        };
        let task = Some(tokio::spawn(run(listening, requests, waiting.clone())));
        Ok(Wakeups {
            waiting,
            marks: Some(marks),
            task,
        })
    }

    /// A handle to wait for `payload`'s next notification.
    pub fn waiter(&self, payload: &str) -> Waiter {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let notify = waiting.entry(payload.to_owned()).or_default().clone();
        Waiter {
            payload: payload.to_owned(),
            notify,
            waiting: self.waiting.clone(),
            marks: self.marks.clone(),
            marked: AtomicBool::new(false),
        }
    }
}

/// One waiter's registration; dropping the last one for a name forgets it.
#[derive(Debug)]
pub(crate) struct Waiter {
    payload: String,
    notify: Arc<Notify>,
    waiting: Arc<Waiting>,
    marks: Option<mpsc::UnboundedSender<Marking>>,
    /// This waiter counts among the name's waiters in the listener's marks.
    marked: AtomicBool,
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

/// Through the listening session: answers once the mark is held (`false`
/// without a listener, when the mark failed, the waiter then polling, or
/// when this waiter asked before).
impl Wake for Waiter {
    fn mark(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let Some(marks) = self.marks.as_ref() else {
                return false;
            };
            if self.marked.swap(true, Ordering::Relaxed) {
                return false;
            }
            let (answer, held) = oneshot::channel();
            let _ = marks.send(Marking::Take(self.payload.clone(), answer));
            held.await.unwrap_or(false)
        })
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(marks) = self.marks.as_ref()
            && *self.marked.get_mut()
        {
            let _ = marks.send(Marking::Drop(self.payload.clone()));
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        // The map's reference and ours: nobody else waits for this name.
        if Arc::strong_count(&self.notify) <= 2 {
            waiting.remove(&self.payload);
        }
    }
}

/// The listening session and the marks it holds: per payload, the client's
/// waiters of that name and whether the session holds its mark.
struct Listening {
    listener: PgListener,
    channel: String,
    marks: HashMap<String, (usize, bool)>,
    /// The session was lost (or failed, or did not answer): its marks are
    /// to be taken again.
    lost: bool,
    /// How long a statement there waits for its reply.
    reply: Duration,
}

impl Listening {
    /// Runs `statement` on the listening session.
    async fn run(&mut self, statement: &'static str, payload: &str) -> Result<(), sqlx::Error> {
        let statement = sqlx::query(statement).bind(&*self.channel).bind(payload);
        self.execute(statement).await
    }

    /// Executes `statement` there, waiting at most [`Self::reply`]: a session
    /// that does not answer (cut off, say) is lost, or every waiter of the
    /// client would wait for it.
    async fn execute(&mut self, statement: Statement<'_>) -> Result<(), sqlx::Error> {
        let sent = sqlx::Executor::execute(&mut self.listener, statement);
        match tokio::time::timeout(self.reply, sent).await {
            Ok(done) => done.map(drop),
            Err(_) => {
                self.lost = true;
                let silent = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the listening session did not answer within {:?}",
                        self.reply
                    ),
                );
                Err(sqlx::Error::Io(silent))
            }
        }
    }

    /// Marks `payload`'s name: whether the mark is held.
    async fn mark(&mut self, payload: &str) -> bool {
        let marked = self.run(MARK, payload).await;
        if let Err(e) = &marked {
            tracing::debug!(backend = BACKEND, error = %e, "a waiter mark failed; its waiters poll");
        }
        marked.is_ok()
    }

    /// One waiter more for `payload`: marks its name unless held already
    /// (or the session is lost: the session made again marks it).
    async fn join(&mut self, payload: String) -> bool {
        let (waiters, held) = self.marks.entry(payload.clone()).or_default();
        *waiters += 1;
        if *held || self.lost {
            return *held;
        }
        let held = self.mark(&payload).await;
        if let Some(name) = self.marks.get_mut(&payload) {
            name.1 = held;
        }
        held
    }

    /// One waiter fewer for `payload`: the last one drops the mark.
    async fn leave(&mut self, payload: String) {
        let Some((waiters, held)) = self.marks.get_mut(&payload) else {
            return;
        };
        *waiters = waiters.saturating_sub(1);
        if *waiters > 0 {
            return;
        }
        let held = *held;
        self.marks.remove(&payload);
        // Failed, the session is lost, and the mark with it.
        if held && let Err(e) = self.run(UNMARK, &payload).await {
            tracing::debug!(backend = BACKEND, error = %e, "dropping a waiter mark failed");
        }
    }

    /// On the session made again: drops whatever advisory locks it holds (a
    /// session that failed but was not lost keeps its marks), then takes
    /// every mark.
    async fn mark_again(&mut self) -> Result<(), sqlx::Error> {
        self.marks.values_mut().for_each(|(_, held)| *held = false);
        self.execute(sqlx::query("SELECT pg_advisory_unlock_all()"))
            .await?;
        self.lost = false;
        let names: Vec<String> = self.marks.keys().cloned().collect();
        for payload in names {
            let held = self.mark(&payload).await;
            if let Some(name) = self.marks.get_mut(&payload) {
                name.1 = held;
            }
        }
        Ok(())
    }
}

async fn run(
    mut listening: Listening,
    mut requests: mpsc::UnboundedReceiver<Marking>,
    waiting: Arc<Waiting>,
) {
    let wake_all = || {
        let waiting = waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.values().for_each(|notify| notify.notify_waiters());
    };
    loop {
        if listening.lost {
            if let Err(e) = listening.mark_again().await {
                tracing::debug!(backend = BACKEND, error = %e, "listening again failed; waiters poll until it is back");
            }
            // Whatever was notified meanwhile is gone, so every waiter looks
            // again (once the marks are back).
            wake_all();
        }
        tokio::select! {
            biased;
            request = requests.recv() => match request {
                Some(Marking::Take(payload, answer)) => {
                    let held = listening.join(payload).await;
                    let _ = answer.send(held);
                }
                Some(Marking::Drop(payload)) => listening.leave(payload).await,
                // The client is gone.
                None => return,
            },
            received = listening.listener.try_recv(), if !listening.lost => match received {
                Ok(Some(notification)) => {
                    let waiting = waiting.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(notify) = waiting.get(notification.payload()) {
                        notify.notify_waiters();
                    }
                }
                Ok(None) => listening.lost = true,
                Err(e) => {
                    tracing::debug!(backend = BACKEND, error = %e, "the LISTEN connection failed; waiters poll until it is back");
                    listening.lost = true;
                    tokio::time::sleep(RELISTEN_PAUSE).await;
                }
            },
            () = tokio::time::sleep(RELISTEN_PAUSE), if listening.lost => {}
        }
    }
}
