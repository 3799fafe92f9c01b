//! A write to your own table that commits only if its fencing token is
//! admitted, then the same write with an older token, refused and rolled back.
//!
//! `cargo run -p distlock-sql --example sql_fence -- [URL]` (default
//! `mysql://root:secret@127.0.0.1:3306/distlock`).

use distlock_core::{FencingToken, LockError};
use distlock_sql::SqlFence;
use sqlx::Connection;

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mysql://root:secret@127.0.0.1:3306/distlock".into());
    let mut conn = distlock_sql::connect(&url).await?;
    let fence = SqlFence::new();
    fence.create_table(&mut conn).await?;
    for token in [FencingToken::new(2), FencingToken::new(1)] {
        let mut tx = conn.begin().await.map_err(distlock_sql::map_error)?;
        match fence.admit(&mut tx, "examples/ledger", token).await {
            Ok(()) => {
                // Your statements go here, in `tx`.
                tx.commit().await.map_err(distlock_sql::map_error)?;
                println!("token {token}: admitted and committed");
            }
            Err(refused @ LockError::StaleToken { .. }) => println!("token {token}: {refused}"),
            Err(other) => return Err(other),
        }
    }
    Ok(())
}
