//! ZooKeeper sessions: one per distinct lease ttl (or one in all, when the session
//! timeout is configured), opened on first use and kept for the client's life.
//!
//! Why the session timeout follows the ttl: a lock node lives exactly as long as
//! its session. The lease's local deadline (`sent_at + ttl`) must come before the
//! server can expire the session and give the lock away, so the session timeout
//! must be at least the ttl; and a holder that crashes or pauses should lose the
//! lock after its ttl, not after some longer session timeout, so it should be no
//! more. Sessions are shared by every lock of the same ttl, so the usual
//! application (one ttl) has one session, and an uncontended cycle needs no
//! session round trip.
//!
//! Opening a session is in `session/open.rs`.

use crate::error::ZkError;
use crate::tls::ZkTls;
use distlock_core::LockError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use zookeeper_client as zk;

mod open;

/// How to open sessions, as the configuration says.
pub(crate) struct SessionSettings {
    /// `h1:2181,h2:2181/chroot`.
    pub connect_string: String,
    /// `user:password` for digest auth. A secret: never shown.
    pub digest: Option<String>,
    /// One session timeout for every lock, instead of one per ttl.
    pub pinned: Option<Duration>,
    pub connect_timeout: Duration,
    /// Every server as `host:port`, for the probe before the first session.
    pub servers: Vec<String>,
    /// TLS to every server, when set.
    pub tls: Option<ZkTls>,
    /// The application's own client: its session is the only one, never
    /// reopened (`pinned` is its timeout).
    pub given: Option<zk::Client>,
}

/// One ZooKeeper session and its negotiated timeout.
pub(crate) struct Session {
    pub client: zk::Client,
    pub timeout: Duration,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &format_args!("{:#x}", self.id()))
            .field("timeout", &self.timeout)
            .field("state", &self.state())
            .finish()
    }
}

impl Session {
    pub fn id(&self) -> i64 {
        self.client.session_id().0
    }

    pub fn state(&self) -> zk::SessionState {
        self.client.state()
    }

    /// Completes when the session has ended for good (expired, closed,
    /// authentication failed): its ephemeral nodes are gone or going.
    pub fn ended(&self) -> impl Future<Output = zk::SessionState> + Send + 'static {
        let mut watcher = self.client.state_watcher();
        async move {
            loop {
                let state = watcher.peek_state();
                if state.is_terminated() {
                    return state;
                }
                watcher.changed().await;
            }
        }
    }

    /// The error for an operation that needed this session after it ended.
    pub fn ended_error(&self, context: &'static str) -> ZkError {
        ZkError::SessionEnded {
            session: self.id(),
            state: self.state(),
            context,
        }
    }
}

/// The session timeouts the server grants, as far as known (milliseconds; 0 =
/// unknown).
#[derive(Debug, Default)]
struct Limits {
    min_ms: AtomicU64,
    max_ms: AtomicU64,
}

/// The sessions of one lock client.
pub(crate) struct Sessions {
    settings: SessionSettings,
    pool: Mutex<HashMap<u64, Arc<Session>>>,
    /// The session inspection uses, opened on first use: a lock client that is
    /// never inspected keeps no session it does not lock with.
    inspector: Mutex<Option<Arc<Session>>>,
    limits: Limits,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("connect_string", &self.settings.connect_string)
            .field("pinned", &self.settings.pinned)
            .finish_non_exhaustive()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Sessions {
    pub fn new(settings: SessionSettings) -> Self {
        Sessions {
            settings,
            pool: Mutex::default(),
            inspector: Mutex::default(),
            limits: Limits::default(),
        }
    }

    /// The shortest session timeout the server grants, once known.
    pub fn min_timeout(&self) -> Option<Duration> {
        match self.limits.min_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// The longest session timeout the server grants, once known.
    pub fn max_timeout(&self) -> Option<Duration> {
        match self.limits.max_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// Records the server's session timeout range, read from its configuration.
    pub fn set_limits(&self, min: Duration, max: Duration) {
        self.limits.min_ms.store(millis(min), Ordering::Relaxed);
        self.limits.max_ms.store(millis(max), Ordering::Relaxed);
    }

    /// The session timeout to request for a lease of `ttl`.
    fn timeout_for(&self, ttl: Duration) -> Duration {
        self.settings.pinned.unwrap_or(ttl)
    }

    /// Rejects a ttl the server's known range cannot serve, before connecting.
    /// (With a pinned timeout the open session decides: any ttl up to its
    /// negotiated timeout is served.)
    fn check_known_range(&self, ttl: Duration) -> Result<(), LockError> {
        if self.settings.pinned.is_some() {
            return Ok(());
        }
        if let Some(max) = self.max_timeout()
            && ttl > max
        {
            return Err(above_max(ttl, max));
        }
        if let Some(min) = self.min_timeout()
            && ttl < min
        {
            return Err(below_min(ttl, min));
        }
        Ok(())
    }

    /// The session for locks of `ttl`, opening it if there is none or the last
    /// one ended.
    pub async fn for_ttl(&self, ttl: Duration, endpoint: &str) -> Result<Arc<Session>, LockError> {
        self.check_known_range(ttl)?;
        let requested = self.timeout_for(ttl);
        if let Some(session) = self.pooled(requested) {
            return check_serves(
                &session,
                ttl,
                self.settings.pinned.is_some(),
                self.settings.given.is_some(),
            )
            .map(|()| session);
        }
        // Opened without holding the pool, so that a slow connect does not stall
        // acquires of other ttls.
        let opened = Arc::new(
            self.open(requested, self.connect_deadline())
                .await
                .map_err(|e| e.into_lock_error(endpoint))?,
        );
        self.learn(requested, &opened);
        check_serves(
            &opened,
            ttl,
            self.settings.pinned.is_some(),
            self.settings.given.is_some(),
        )?;
        // Two first acquires of one ttl may both have opened a session: keep the
        // first in the pool, and the other closes when dropped.
        Ok(self
            .pool()
            .entry(millis(requested))
            .and_modify(|pooled| {
                if pooled.state().is_terminated() {
                    *pooled = opened.clone();
                }
            })
            .or_insert(opened)
            .clone())
    }

    /// The live pooled session for a timeout, if any.
    fn pooled(&self, timeout: Duration) -> Option<Arc<Session>> {
        self.pool()
            .get(&millis(timeout))
            .filter(|session| !session.state().is_terminated())
            .cloned()
    }

    fn pool(&self) -> MutexGuard<'_, HashMap<u64, Arc<Session>>> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session for inspection and operator requests: the live one kept, or a
    /// new one of the default timeout (the server clamps it into its range; no
    /// lock depends on it).
    pub async fn inspector(&self) -> Result<Arc<Session>, ZkError> {
        let kept = self
            .inspector
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(session) = kept.filter(|s| !s.state().is_terminated()) {
            return Ok(session);
        }
        let timeout = self
            .settings
            .pinned
            .unwrap_or(distlock_core::AcquireOptions::DEFAULT_TTL);
        let opened = Arc::new(self.open(timeout, self.connect_deadline()).await?);
        // Two first inspections may both have opened one: the later is kept, the
        // other closes when its caller drops it.
        *self
            .inspector
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(opened.clone());
        Ok(opened)
    }

    /// The server clamps a timeout outside its range: learn the bound it hit.
    fn learn(&self, requested: Duration, session: &Session) {
        if session.timeout > requested {
            self.limits
                .min_ms
                .store(millis(session.timeout), Ordering::Relaxed);
        } else if session.timeout < requested {
            self.limits
                .max_ms
                .store(millis(session.timeout), Ordering::Relaxed);
        }
    }
}

/// Whether `session` may hold a lease of `ttl`: its timeout must be at least the
/// ttl (else the server could expire it while the client still believes it holds
/// the lock) and, when it follows the ttl, no more (else a crashed holder keeps
/// the lock longer than its ttl).
fn check_serves(
    session: &Session,
    ttl: Duration,
    pinned: bool,
    given: bool,
) -> Result<(), LockError> {
    if session.timeout < ttl && given {
        return Err(LockError::invalid_options(format!(
            "ttl {ttl:?} is above the session timeout of the ZooKeeper client given to \
             ZkConfig::from_client ({:?}); a lock lives as long as its session, so use a ttl \
             of at most {:?}, or build that client with a longer session timeout \
             (Connector::with_session_timeout)",
            session.timeout, session.timeout
        )));
    }
    if session.timeout < ttl {
        return Err(above_max(ttl, session.timeout));
    }
    if !pinned && session.timeout > ttl {
        return Err(below_min(ttl, session.timeout));
    }
    Ok(())
}

fn above_max(ttl: Duration, max: Duration) -> LockError {
    LockError::invalid_options(format!(
        "ttl {ttl:?} is above the longest ZooKeeper session timeout available ({max:?}); a \
         lock lives as long as its session, so use a ttl of at most {max:?}, or raise \
         maxSessionTimeout in zoo.cfg (or session_timeout in the client configuration)"
    ))
}

fn below_min(ttl: Duration, min: Duration) -> LockError {
    LockError::invalid_options(format!(
        "ttl {ttl:?} is below the ZooKeeper server's minSessionTimeout ({min:?}, by default \
         2 × tickTime); use a ttl of at least {min:?}, or lower minSessionTimeout in zoo.cfg"
    ))
}
