//! Exit codes, and how a failure becomes one. The numbers follow sysexits(3)
//! where one fits, so shell scripts and schedulers can tell the cases apart.

use distlock::LockError;
use distlock::toolkit::with_causes;

/// Success.
pub const OK: u8 = 0;
/// Anything else that went wrong: the backend is unreachable or failed, a check failed.
pub const FAILURE: u8 = 1;
/// Bad usage, key, ttl, URL or configuration (clap uses 2 for usage errors too).
pub const USAGE: u8 = 2;
/// EX_DATAERR: `distlock fence --add … --floor …` wrote nothing because the
/// result would have dropped below the floor (sold out, not stale).
pub const BELOW_FLOOR: u8 = 65;
/// EX_UNAVAILABLE: the lock was lost while the command ran.
pub const LOST: u8 = 69;
/// EX_TEMPFAIL: the lock was not acquired (busy, or the wait timed out).
pub const NOT_ACQUIRED: u8 = 75;
/// EX_NOPERM: the fenced store refused the write because a higher fencing token
/// was admitted before: the writer lost its lock and must stop.
pub const STALE_TOKEN: u8 = 77;
/// The command exists but could not be executed (as in POSIX shells).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as in POSIX shells).
pub const NOT_FOUND: u8 = 127;

/// A failure to report on stderr, with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }
}

impl From<LockError> for Failure {
    fn from(error: LockError) -> Self {
        let code = match &error {
            LockError::Busy { .. } | LockError::Timeout { .. } => NOT_ACQUIRED,
            LockError::InvalidKey { .. }
            | LockError::InvalidOptions { .. }
            | LockError::InvalidWrite { .. }
            | LockError::Config { .. }
            | LockError::LimitMismatch { .. } => USAGE,
            LockError::Lost { .. } => LOST,
            LockError::StaleToken { .. } => STALE_TOKEN,
            _ => FAILURE,
        };
        Failure::new(code, describe(&error))
    }
}

/// The error and every source not already quoted in its message, on one line.
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    with_causes(&error.to_string(), error.source()).replace('\n', " ")
}
