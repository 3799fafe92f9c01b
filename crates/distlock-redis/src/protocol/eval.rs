//! A script call written straight into its `EVALSHA` command, for the steps
//! every lock cycle sends (acquire, renew, release). The `redis` crate's
//! `ScriptInvocation` allocates each key and argument on its own and copies
//! them all into a command when sent; this writes them once, into one buffer.

use crate::command::CommandConn;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};
use std::future::Future;

/// What [`crate::protocol::ServerClient::invoke_on`] sends: a script call of
/// either shape, reloading the script on `NOSCRIPT` (after a server restart or
/// `SCRIPT FLUSH`).
pub(crate) trait Invocation: Send + Sync {
    fn call<'a, T: FromRedisValue + Send + 'static>(
        &'a self,
        conn: &'a mut CommandConn,
    ) -> impl Future<Output = RedisResult<T>> + Send + 'a;
}

impl Invocation for redis::ScriptInvocation<'_> {
    fn call<'a, T: FromRedisValue + Send + 'static>(
        &'a self,
        conn: &'a mut CommandConn,
    ) -> impl Future<Output = RedisResult<T>> + Send + 'a {
        self.invoke_async(conn)
    }
}

/// `EVALSHA` of one script with its keys, then its arguments
/// ([`Eval::arg`]).
pub(crate) struct Eval {
    cmd: Cmd,
    script: &'static Script,
}

/// Room for the arguments of the lock's scripts without growing.
const ARGS: usize = 12;
const BYTES: usize = 256;

impl Eval {
    /// `script` with `keys`; its arguments follow.
    pub fn new(script: &'static Script, keys: &[&str]) -> Self {
        let mut cmd = Cmd::with_capacity(ARGS, BYTES);
        cmd.arg("EVALSHA")
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys);
        Eval { cmd, script }
    }

    /// Adds the script's next argument (`ARGV[i]`).
    pub fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }
}

impl Invocation for Eval {
    async fn call<'a, T: FromRedisValue + Send + 'static>(
        &'a self,
        conn: &'a mut CommandConn,
    ) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.cmd.query_async(conn).await
            }
            reply => reply,
        }
    }
}
