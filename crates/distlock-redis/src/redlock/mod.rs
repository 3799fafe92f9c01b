//! Redlock: one lock over N independent Redis servers, each speaking the
//! single-server protocol; the quorum and the fence round are all it adds.

/// The backend name in errors.
pub(crate) const BACKEND: &str = "redlock";

pub(crate) mod backend;
pub(crate) mod config;
mod inspect;
mod round;
mod tally;
