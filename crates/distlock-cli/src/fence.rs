//! `distlock fence`: one fenced write from a shell, typically from a child of
//! `distlock run`, which passes its token in `$DISTLOCK_FENCING_TOKEN`:
//!
//! ```text
//! distlock run --url etcd://e1/locks --key stock -- \
//!   distlock fence --url redis://cache --resource stock:sku-42 --add -1 --floor 0
//! ```

use crate::args::{UrlArg, fence_stores, parse_positive_duration};
use crate::exit::{self, Failure};
use distlock::{FencedWrite, FencingToken, LockError, WriteOutcome};
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("write").required(true))]
pub struct FenceArgs {
    #[command(flatten)]
    url: UrlArg,
    #[arg(long, value_name = "NAME", help = resource_help())]
    resource: String,
    /// The writer's fencing token (default: $DISTLOCK_FENCING_TOKEN, set by `distlock run`).
    #[arg(long, env = "DISTLOCK_FENCING_TOKEN", value_name = "N")]
    token: u64,
    /// Set the value.
    #[arg(long, group = "write", value_name = "VALUE")]
    set: Option<String>,
    /// With --set: the value expires after this long (the token record never does).
    #[arg(long, requires = "set", value_parser = parse_positive_duration)]
    expire: Option<Duration>,
    /// Delete the value.
    #[arg(long, group = "write")]
    delete: bool,
    /// Add N (negative to take away) to an integer value; a missing value counts as 0.
    #[arg(long, group = "write", value_name = "N", allow_hyphen_values = true)]
    add: Option<i64>,
    /// With --add: write nothing if the result would drop below this, and exit 65.
    #[arg(long, requires = "add", value_name = "N", allow_hyphen_values = true)]
    floor: Option<i64>,
    /// Set a field of a hash (Redis, memory).
    #[arg(long, group = "write", num_args = 2, value_names = ["FIELD", "VALUE"])]
    hset: Option<Vec<String>>,
    /// MySQL/MariaDB: run this statement in the transaction that admits the
    /// token; it commits only if the token is admitted. Prints the rows it
    /// matched. DDL commits on its own in MySQL, so fence only DML.
    #[arg(long, group = "write", value_name = "STATEMENT")]
    sql: Option<String>,
}

/// `--resource`'s help, with the stores --url may name.
fn resource_help() -> String {
    format!(
        "The fenced resource: its key or record name in the --url store, one of {}.",
        fence_stores()
    )
}

impl FenceArgs {
    fn write(&self) -> Option<FencedWrite> {
        if let Some(value) = &self.set {
            return Some(FencedWrite::Set {
                value: value.clone(),
                expire: self.expire,
            });
        }
        if let Some(delta) = self.add {
            return Some(FencedWrite::Add {
                delta,
                floor: self.floor,
            });
        }
        if let Some([field, value]) = self.hset.as_deref() {
            return Some(FencedWrite::hash_set(field, value));
        }
        self.delete.then_some(FencedWrite::Delete)
    }
}

pub async fn fence(args: FenceArgs) -> Result<u8, Failure> {
    let url = args.url.require()?;
    let token = FencingToken::new(args.token);
    let outcome = match (&args.sql, args.write()) {
        (Some(statement), _) => sql(url, &args.resource, token, statement).await,
        (None, Some(write)) => {
            let store = distlock::connect_fence(url).await?;
            store.write(&args.resource, token, write).await
        }
        (None, None) => {
            return Err(Failure::usage(
                "give one write: --set, --delete, --add, --hset or --sql",
            ));
        }
    };
    match outcome {
        Ok(WriteOutcome::Counter(value)) => println!("{value}"),
        Ok(WriteOutcome::BelowFloor { current }) => {
            eprintln!("distlock: not written: {current} is at the floor (token {token} admitted)");
            return Ok(exit::BELOW_FLOOR);
        }
        Ok(_) => {}
        Err(error @ LockError::StaleToken { .. }) => {
            return Err(Failure::new(exit::STALE_TOKEN, exit::describe(&error)));
        }
        Err(error) => return Err(error.into()),
    }
    Ok(exit::OK)
}

/// `--sql`: the statement in the transaction that admits the token, on the
/// MySQL or PostgreSQL server of `url`.
async fn sql(
    url: &str,
    resource: &str,
    token: FencingToken,
    statement: &str,
) -> Result<WriteOutcome, LockError> {
    let store = distlock::connect_fence(url).await?;
    let rows = store.execute(resource, token, statement).await?;
    println!("{rows}");
    Ok(WriteOutcome::Written)
}
