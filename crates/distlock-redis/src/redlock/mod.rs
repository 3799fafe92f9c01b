//! Redlock: one lock over N independent Redis servers.

pub(crate) mod config;
mod connect;
pub(crate) mod lock;
mod round;
mod tally;
