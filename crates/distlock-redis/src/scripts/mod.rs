//! The Lua scripts of the wire protocol, shared by `RedisLock` and `Redlock`.
//!
//! Every script takes its keys through `KEYS` (so Redis Cluster can route it) and
//! is sent with `EVALSHA`; the `redis` crate's [`Script`] reloads it on `NOSCRIPT`
//! (after a server restart or `SCRIPT FLUSH`).

use redis::Script;
use std::sync::LazyLock;

/// `SET NX PX` + `INCR` of the fence counter, or the holder's `PTTL`.
pub const ACQUIRE: &str = include_str!("acquire.lua");
/// Compare-owner `PEXPIRE`.
pub const RENEW: &str = include_str!("renew.lua");
/// Compare-owner `DEL` + `PUBLISH`.
pub const RELEASE: &str = include_str!("release.lua");
/// Raises a fence counter to at least a token (Redlock's fence round).
pub const RAISE_FENCE: &str = include_str!("raise_fence.lua");

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE));
pub(crate) static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
pub(crate) static RAISE_FENCE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RAISE_FENCE));

/// Every script with its source, for loading them up front.
pub(crate) fn all() -> [(&'static str, &'static Script); 4] {
    [
        (ACQUIRE, &ACQUIRE_SCRIPT),
        (RENEW, &RENEW_SCRIPT),
        (RELEASE, &RELEASE_SCRIPT),
        (RAISE_FENCE, &RAISE_FENCE_SCRIPT),
    ]
}
