//! The built-in fenced scripts, and how each [`FencedWrite`] is sent to them.

use distlock_core::fence::invalid_write;
use distlock_core::{FencedWrite, LockError};
use redis::Script;
use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::Duration;

/// The token check every fenced script starts with.
pub(super) const CHECK_LUA: &str = include_str!("../scripts/fence_check.lua");

/// Declares a fenced script: the check followed by `scripts/<file>`.
macro_rules! fenced_lua {
    ($file:literal) => {
        concat!(
            include_str!("../scripts/fence_check.lua"),
            include_str!(concat!("../scripts/", $file))
        )
    };
}

const SET_LUA: &str = fenced_lua!("fence_set.lua");
const DELETE_LUA: &str = fenced_lua!("fence_delete.lua");
const ADD_LUA: &str = fenced_lua!("fence_add.lua");
const HSET_LUA: &str = fenced_lua!("fence_hset.lua");
/// `TYPE` and `GET` or `HGETALL`, in one step; no check.
const READ_LUA: &str = include_str!("../scripts/fence_read.lua");

static SET: LazyLock<Script> = LazyLock::new(|| Script::new(SET_LUA));
static DELETE: LazyLock<Script> = LazyLock::new(|| Script::new(DELETE_LUA));
static ADD: LazyLock<Script> = LazyLock::new(|| Script::new(ADD_LUA));
static HSET: LazyLock<Script> = LazyLock::new(|| Script::new(HSET_LUA));
pub(super) static READ: LazyLock<Script> = LazyLock::new(|| Script::new(READ_LUA));

/// The built-in scripts with their sources, loaded when a fence connects.
pub(super) fn fence_scripts() -> [(&'static str, &'static Script); 5] {
    [
        (SET_LUA, &SET),
        (DELETE_LUA, &DELETE),
        (ADD_LUA, &ADD),
        (HSET_LUA, &HSET),
        (READ_LUA, &READ),
    ]
}

/// Redis refuses an expiry whose deadline in milliseconds overflows an `i64`;
/// this bound leaves room for any clock (2^62 ms is about 146 million years).
const MAX_EXPIRE_MS: u128 = 1 << 62;

/// One fenced write, as its script takes it.
pub(super) struct Call<'w> {
    pub script: &'static Script,
    pub args: Vec<Cow<'w, str>>,
    /// Whether applying it twice is harmless, so a dropped connection may resend.
    pub repeatable: bool,
}

impl<'w> Call<'w> {
    pub fn new(write: &'w FencedWrite) -> Result<Self, LockError> {
        let call = |script, args, repeatable| {
            Ok(Call {
                script,
                args,
                repeatable,
            })
        };
        match write {
            FencedWrite::Set { value, expire } => {
                let px = match expire {
                    Some(expire) => expire_ms(*expire)?.to_string().into(),
                    None => "".into(),
                };
                call(&SET, vec![value.as_str().into(), px], true)
            }
            FencedWrite::Delete => call(&DELETE, vec![], true),
            FencedWrite::Add { delta, floor } => {
                let (delta, min, max) = (
                    i128::from(*delta),
                    i128::from(i64::MIN),
                    i128::from(i64::MAX),
                );
                let lowest = if delta < 0 { min - delta } else { min };
                let highest = if delta > 0 { max - delta } else { max };
                let floor = floor.map(|floor| (i128::from(floor) - delta).to_string());
                let args = [delta, lowest, highest].map(|n| n.to_string().into());
                let mut args = Vec::from(args);
                args.push(floor.unwrap_or_default().into());
                call(&ADD, args, false)
            }
            FencedWrite::HashSet { field, value } => call(
                &HSET,
                vec![field.as_str().into(), value.as_str().into()],
                true,
            ),
            _ => Err(invalid_write(
                "RedisFence does not support this kind of fenced write; upgrade distlock-redis"
                    .into(),
            )),
        }
    }
}

/// The expiry in whole milliseconds, rounded up so the value never vanishes
/// before it was asked to.
fn expire_ms(expire: Duration) -> Result<u128, LockError> {
    let ms = expire.as_nanos().div_ceil(1_000_000);
    if ms > MAX_EXPIRE_MS {
        return Err(invalid_write(format!(
            "the expiry {expire:?} is longer than Redis accepts ({MAX_EXPIRE_MS} ms); \
             leave it unset for a value that never expires"
        )));
    }
    Ok(ms)
}
