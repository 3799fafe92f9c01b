//! The Lua helpers of every script that keeps expiring members in a sorted set
//! (`scripts/share_lib.lua`): the semaphore's and read-write lock's shares,
//! and the fair lock's queue places.

/// The helpers every share script starts with, then `files` (an acquire
/// script the restart guard checks is preceded by `restart_guard.lua`).
macro_rules! share_script {
    ($($file:literal),+) => {
        concat!(
            include_str!("../scripts/share_lib.lua"),
            $(include_str!(concat!("../scripts/", $file))),+
        )
    };
}
pub(crate) use share_script;
