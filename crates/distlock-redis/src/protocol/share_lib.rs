//! How scripts are put together from their shared Lua helpers: the fencing
//! token's (`scripts/token_lib.lua`: counters that expire when idle, the
//! namespace's high-water), and those of every script that keeps expiring
//! members in a sorted set (`scripts/share_lib.lua`): the semaphore's and
//! read-write lock's shares, and the fair lock's queue places.

/// The token helpers, then `files` (an acquire script the restart guard checks
/// includes `restart_guard.lua`).
macro_rules! token_script {
    ($($file:literal),+) => {
        concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/token_lib.lua")),
            $(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/", $file))),+
        )
    };
}
pub(crate) use token_script;

/// The token helpers and those of every share script, then `files`.
macro_rules! share_script {
    ($($file:literal),+) => {
        $crate::protocol::token_script!("share_lib.lua", $($file),+)
    };
}
pub(crate) use share_script;
