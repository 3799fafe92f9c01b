//! `memory://NAME`: the in-process backend, one store per `NAME` in this
//! process, for locks and fenced data alike.

use distlock_core::adapter::Registration;
use distlock_core::memory::MemoryStore;
use distlock_core::toolkit::LockUrl;
use distlock_core::{AcquireOptions, LockError, MemoryFence};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// The in-process backend's registration.
pub(crate) const MEMORY: Registration = Registration::new(
    "memory",
    &["memory"],
    "memory://NAME",
    |url| memory_lock_url(url).map(|(name, defaults)| format!("{name:?} {defaults:?}")),
    |url| {
        Box::pin(async move {
            let (name, defaults) = memory_lock_url(&url)?;
            Ok(Arc::new(memory_store(&name).client().with_defaults(defaults)?) as _)
        })
    },
)
.with_fence(|url| Box::pin(async move { Ok(memory_fence(&memory_name(&url)?) as _) }));

/// The store name of a `memory://NAME` URL. Only letters, digits and `-_.` are
/// taken, so a typo (a path, a password) is an error rather than a silently
/// separate store.
fn memory_name(url: &str) -> Result<String, LockError> {
    let (name, url) = memory_url(url)?;
    url.finish().map_err(|_| memory_url_error())?;
    Ok(name)
}

/// A `memory://NAME` lock URL: the store name, and the acquire defaults its
/// query may give (`ttl`, `wait`, `renewal`, `max_hold`, `min_hold`, as on every scheme).
fn memory_lock_url(url: &str) -> Result<(String, AcquireOptions), LockError> {
    let (name, mut url) = memory_url(url)?;
    let defaults = AcquireOptions::new().read(&mut url)?;
    url.finish()?;
    Ok((name, defaults))
}

/// The store name of a `memory://` URL with no user, port or path; the query is
/// left to the caller.
fn memory_url(url: &str) -> Result<(String, LockUrl), LockError> {
    let url = LockUrl::parse("memory", url).map_err(|_| memory_url_error())?;
    let name = match url.hosts() {
        [] => "",
        [host] if host.port.is_none() => host.host.as_str(),
        _ => return Err(memory_url_error()),
    };
    let bare =
        url.user().is_none() && url.password().is_none() && matches!(url.path(), None | Some(""));
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if bare && name.chars().all(allowed) {
        Ok((name.to_owned(), url))
    } else {
        Err(memory_url_error())
    }
}

fn memory_url_error() -> LockError {
    LockError::config(
        "memory",
        "a memory URL is memory:// or memory://NAME, where NAME (letters, digits, `-`, `_`, `.`) \
         picks the in-process store; it takes no user, port or path, and a lock URL only the \
         acquire defaults ttl, wait, renewal, max_hold and min_hold as its query",
    )
}

/// The process-wide store behind `connect("memory://NAME")`. Use it in tests to
/// delete a lock behind its holder's back or to inspect residue.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use distlock::{AcquireOptions, LockKey};
/// let lock = distlock::connect("memory://ops").await?;
/// let key = LockKey::new("job")?;
/// let lease = lock.acquire(&key, &AcquireOptions::new()).await?;
/// assert!(distlock::memory_store("ops").delete(&key));
/// lease.lost().await; // the holder learns at once
/// # Ok(()) }
/// ```
pub fn memory_store(name: &str) -> MemoryStore {
    static STORES: Named<MemoryStore> = OnceLock::new();
    named(&STORES, name)
}

/// The process-wide store behind `connect_fence("memory://NAME")`.
pub fn memory_fence(name: &str) -> Arc<MemoryFence> {
    static STORES: Named<Arc<MemoryFence>> = OnceLock::new();
    named(&STORES, name)
}

/// One value per name for the life of the process.
type Named<T> = OnceLock<Mutex<HashMap<String, T>>>;

/// `name`'s value in `values`, made on first use.
fn named<T: Clone + Default>(values: &Named<T>, name: &str) -> T {
    values
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(name.to_owned())
        .or_default()
        .clone()
}
