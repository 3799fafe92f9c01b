//! `connect_fence(url)`: the fenced store named by a URL, for applications
//! (and `distlock fence`) that keep the protected data in Redis, MySQL,
//! PostgreSQL or process memory.

use crate::kind::BackendKind;
use crate::redact::{scrub, url_secrets};
use distlock_core::{Fence, LockError};
use std::sync::Arc;

/// Connects to the fenced store named by `url`'s scheme: writes through it are
/// admitted only with a fencing token at least as high as any it admitted
/// before, in the same atomic step as the write.
///
/// | scheme | store | feature |
/// |---|---|---|
/// | `memory://NAME` | a [`MemoryFence`](distlock_core::MemoryFence) shared by every `connect_fence` of `NAME` in this process | always on |
/// | `redis://`, `rediss://` | `RedisFence`: one Lua script per write | `redis` |
/// | `mysql://`, `mariadb://` | `SqlStore`: a fenced value table, one transaction per write | `mysql` |
/// | `postgres://`, `postgresql://` | `SqlStore` on PostgreSQL, the same | `postgres` |
///
/// The lock backends that are not data stores (Redlock, etcd, ZooKeeper) are
/// refused with [`LockError::Config`]: fence the write where the data lives.
/// For SQL data in your own tables, use `distlock::sql::SqlFence` inside your
/// transaction instead. No error shows a password from the URL.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use distlock::{FencedWrite, FencingToken, WriteOutcome};
/// let stock = distlock::connect_fence("memory://shop").await?;
/// stock.write("sku-42", FencingToken::new(3), FencedWrite::set("10")).await?;
/// let sold = stock.write("sku-42", FencingToken::new(3), FencedWrite::add_with_floor(-1, 0)).await?;
/// assert_eq!(sold, WriteOutcome::Counter(9));
/// # Ok(()) }
/// ```
pub async fn connect_fence(url: &str) -> Result<Arc<dyn Fence>, LockError> {
    let (kind, registration) = BackendKind::from_url_with_registration(url)?;
    let url = url.trim();
    let Some(connecting) = registration.connect_fence(url) else {
        return Err(LockError::config(
            kind.name(),
            format!(
                "{} is a lock backend, not a store for fenced data; fence the write where \
                 the data lives: {}",
                kind.name(),
                fence_examples()
            ),
        ));
    };
    connecting
        .await
        .map_err(|e| scrub(e, &url_secrets(kind.name(), url)))
}

/// An example URL of each store this build can fence data in.
fn fence_examples() -> String {
    BackendKind::all()
        .filter_map(BackendKind::registration)
        .filter(|registration| registration.has_fence())
        .map(|registration| registration.example())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::{FencedWrite, FencingToken};

    #[tokio::test]
    async fn memory_stores_of_one_name_are_shared_and_others_are_not() {
        let a = connect_fence("memory://fence-shared").await.unwrap();
        let b = connect_fence("memory://fence-shared").await.unwrap();
        let other = connect_fence("memory://fence-other").await.unwrap();
        a.write("r", FencingToken::new(5), FencedWrite::set("a"))
            .await
            .unwrap();
        assert!(matches!(
            b.write("r", FencingToken::new(4), FencedWrite::set("b"))
                .await,
            Err(LockError::StaleToken { .. })
        ));
        assert_eq!(other.highest("r").await.unwrap(), None);
    }

    #[tokio::test]
    async fn lock_only_schemes_are_refused_without_their_secrets() {
        for url in [
            "zk://u:topsecret@h:1/x",
            "etcd://u:topsecret@h:1/x",
            "redlock://:topsecret@a,b,c",
        ] {
            let Err(err) = connect_fence(url).await else {
                panic!("{url} gave a fence");
            };
            let text = format!("{err} {err:?}");
            assert!(matches!(err, LockError::Config { .. }), "{url}: {text}");
            assert!(!text.contains("topsecret"), "{url}: {text}");
        }
    }
}
