//! User scripts behind the token check: [`FenceScript`] and
//! [`RedisFence::write_script`].

use super::reply::{self, Reply};
use super::{CHECK_LUA, RedisFence};
use crate::error::CommandError;
use distlock_core::fence::{invalid_write, stale, validate_resource};
use distlock_core::{FencedWrite, FencingToken, LockError};
use redis::{ErrorKind, Script, ServerErrorKind, Value};
use std::borrow::Cow;

/// Between the check and the body: the token is recorded before the body runs,
/// since Redis keeps whatever a failing script wrote before it failed, and such
/// a write must not let a lower token in after it.
const OPEN: &str = "admit()\nlocal function body()\n";
/// After the body: its value is wrapped, so that only the check can answer
/// `stale`; an error it returned (`redis.error_reply`) answers `failed`.
const CLOSE: &str = "\nend\nlocal result = body()\n\
    if type(result) == 'table' and result.err then\n  return {'failed', result.err}\nend\n\
    return {'ok', result}\n";

/// A Lua body that [`RedisFence::write_script`] runs only if the writer's token
/// is admitted, in the same script as the check: one atomic step, one round
/// trip (`EVALSHA`, loaded on `NOSCRIPT`).
///
/// The body sees:
/// - `KEYS[1]`: the resource (the data key), `KEYS[2]`: its fence record (do
///   not write it), `KEYS[3..]`: the `extra_keys`, in order. On Redis Cluster
///   every key must hash to the resource's slot: give them its hash tag.
/// - `ARGV[1]`: the token, in decimal; `ARGV[2..]`: the `args`, in order.
///
/// It runs after the token was recorded, as the body of a Lua function: its
/// `return` value (converted by Redis as any script's) is what `write_script`
/// gives back, `nil` when it returns nothing, and an error it raises or returns
/// (`redis.error_reply`) becomes [`LockError::InvalidWrite`]. Redis does not roll
/// back a failing script: what the body wrote before failing stays, and so does
/// the token. The check's locals `token`, `highest` and `admit` are in scope.
/// Redis reports errors at `user_script:<line>`, counting the check; the body
/// starts at line [`FenceScript::first_line`].
///
/// ```
/// use distlock_redis::FenceScript;
/// // Appends to a list, and keeps it to the newest 100 entries.
/// let push = FenceScript::new(
///     "redis.call('LPUSH', KEYS[1], ARGV[2])\n\
///      redis.call('LTRIM', KEYS[1], 0, 99)\n\
///      return redis.call('LLEN', KEYS[1])",
/// )?;
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Clone)]
pub struct FenceScript {
    script: Script,
    body_len: usize,
}

impl std::fmt::Debug for FenceScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceScript")
            .field("hash", &self.script.get_hash())
            .field("body_len", &self.body_len)
            .finish()
    }
}

impl FenceScript {
    /// Wraps `body` behind the token check. A body over
    /// [`FencedWrite::MAX_PAYLOAD`] bytes is refused with
    /// [`LockError::InvalidWrite`]; one that does not compile is refused by the
    /// first `write_script`, before anything runs.
    pub fn new(body: &str) -> Result<Self, LockError> {
        if body.len() > FencedWrite::MAX_PAYLOAD {
            return Err(invalid_write(format!(
                "the script body is {} bytes, the limit is {} bytes",
                body.len(),
                FencedWrite::MAX_PAYLOAD
            )));
        }
        let source = [CHECK_LUA, OPEN, body, CLOSE].concat();
        Ok(FenceScript {
            script: Script::new(&source),
            body_len: body.len(),
        })
    }

    /// The SHA1 Redis knows the whole script (check and body) by.
    pub fn hash(&self) -> &str {
        self.script.get_hash()
    }

    /// The line of the whole script where the body starts, for reading Redis's
    /// `user_script:<line>` in errors.
    pub fn first_line() -> usize {
        [CHECK_LUA, OPEN].concat().lines().count() + 1
    }
}

impl RedisFence {
    /// Runs `script`'s body if `token` is at least the highest token admitted
    /// for `resource` (recording it), in one atomic step, and returns what the
    /// body returned. See [`FenceScript`] for `KEYS` and `ARGV`.
    ///
    /// Refused before any I/O: a resource this fence cannot fence or an extra
    /// key that is not a valid name ([`LockError::InvalidKey`]), an argument
    /// over [`FencedWrite::MAX_PAYLOAD`] bytes ([`LockError::InvalidWrite`]). A
    /// lower token gives [`LockError::StaleToken`] and the body does not run.
    /// Not resent after a dropped connection (see the module docs).
    pub async fn write_script(
        &self,
        resource: &str,
        token: FencingToken,
        script: &FenceScript,
        extra_keys: &[&str],
        args: &[&str],
    ) -> Result<Value, LockError> {
        let record = self.record_key(resource)?;
        for key in extra_keys {
            validate_resource(key)?;
        }
        if let Some((at, arg)) = args
            .iter()
            .enumerate()
            .find(|(_, arg)| arg.len() > FencedWrite::MAX_PAYLOAD)
        {
            return Err(invalid_write(format!(
                "script argument ARGV[{}] is {} bytes, the limit is {} bytes; store large data \
                 elsewhere and pass a reference to it",
                at + 2,
                arg.len(),
                FencedWrite::MAX_PAYLOAD
            )));
        }
        let args: Vec<Cow<'_, str>> = args.iter().map(|arg| Cow::Borrowed(*arg)).collect();
        let keys = (resource, record.as_str());
        let reply = self
            .fenced(&script.script, keys, token, (extra_keys, &args), false)
            .await
            .map_err(|e| self.script_error(e))?;
        match reply::parse(reply).map_err(|e| self.error(e))? {
            Reply::Stale(highest) => Err(stale(resource, token, highest)),
            Reply::Ok(value) => Ok(value),
            Reply::Failed(message) => Err(invalid_write(format!(
                "the script returned the error {message:?}; the token was recorded, and what \
                 the body wrote before returning stays"
            ))),
            other => Err(self.error(CommandError::Reply(format!("{other:?} to a fenced script")))),
        }
    }

    /// A failing body is the script's fault, not the server's.
    fn script_error(&self, e: CommandError) -> LockError {
        let CommandError::Redis(error) = &e else {
            return self.error(e);
        };
        let from_script = matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ResponseError) | ErrorKind::Extension
        );
        let text = error.to_string();
        if from_script && text.contains("Error compiling script") {
            invalid_write(format!(
                "the script does not compile ({text}; its body starts at line {}); nothing ran",
                FenceScript::first_line()
            ))
        } else if from_script && text.contains("user_script") {
            invalid_write(format!(
                "the script failed ({text}; its body starts at line {}); the token was recorded, \
                 and what the body wrote before failing stays (Redis does not roll back a script)",
                FenceScript::first_line()
            ))
        } else {
            self.error(e)
        }
    }
}
