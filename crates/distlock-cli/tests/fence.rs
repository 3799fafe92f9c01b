//! `distlock fence`: fenced writes from a shell against real Redis and MariaDB
//! servers, with the documented exit codes (77 stale token, 65 below the floor),
//! and a child of `distlock run` writing with the token it was handed.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point
#![cfg_attr(not(feature = "full"), allow(dead_code, unused_imports))]

mod support;
#[allow(unused_imports)]
use support::servers;
use support::{assert_code, distlock, output, run, stderr, stdout};

fn fence(url: &str, resource: &str, token: u64, write: &[&str]) -> std::process::Output {
    let token = token.to_string();
    let mut args = vec![
        "fence",
        "--url",
        url,
        "--resource",
        resource,
        "--token",
        &token,
    ];
    args.extend_from_slice(write);
    run(&args)
}

fn fresh(what: &str) -> String {
    format!("cli-fence/{}/{what}", std::process::id() ^ rand_nanos())
}

fn rand_nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

/// Admitted, stale (77, nothing written), below the floor (65, nothing
/// written), and the new value printed by --add.
fn exit_codes_tell_written_stale_and_sold_out_apart(url: &str) {
    let stock = fresh("stock");
    let out = fence(url, &stock, 5, &["--add", "2"]);
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "2");
    let out = fence(url, &stock, 4, &["--add", "-1"]);
    assert_code(&out, 77);
    assert!(
        stderr(&out).contains("stale fencing token 4"),
        "{}",
        stderr(&out)
    );
    let out = fence(url, &stock, 5, &["--add", "-3", "--floor", "0"]);
    assert_code(&out, 65);
    let out = fence(url, &stock, 6, &["--add", "-1", "--floor", "0"]);
    assert_code(&out, 0);
    assert_eq!(
        stdout(&out).trim(),
        "1",
        "the stale and floored writes changed the stock"
    );
}

/// A child of `distlock run` fences its write with `$DISTLOCK_FENCING_TOKEN`.
fn child_of_run_writes_with_its_token(url: &str) {
    let (key, stock) = (fresh("key"), fresh("stock"));
    let script = format!(
        "distlock fence --url '{url}' --resource '{stock}' --add 7 && \
         distlock fence --url '{url}' --resource '{stock}' --token 1 --add 1"
    );
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_distlock"));
    let path = format!(
        "{}:{}",
        exe.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = output(
        distlock()
            .env("PATH", path)
            .args(["run", "--url", "memory://cli-fence", "--key", &key])
            .args(["--", "sh", "-c", &script]),
    );
    // memory:// tokens are far above 1, so the second write is stale: exit 77
    // passes through `distlock run` as the command's own status.
    assert_code(&out, 77);
    assert_eq!(stdout(&out).trim(), "7", "{}", stderr(&out));
}

fn no_token_is_a_usage_error(url: &str) {
    let out = output(distlock().env_remove("DISTLOCK_FENCING_TOKEN").args([
        "fence",
        "--url",
        url,
        "--resource",
        "r",
        "--set",
        "v",
    ]));
    assert_code(&out, 2);
    assert!(stderr(&out).contains("--token"), "{}", stderr(&out));
}

macro_rules! against {
    ($store:ident, $feature:literal, $url:ident) => {
        #[cfg(feature = $feature)]
        mod $store {
            #[test]
            fn exit_codes_tell_written_stale_and_sold_out_apart() {
                super::exit_codes_tell_written_stale_and_sold_out_apart(&super::servers::$url());
            }
            #[test]
            fn child_of_run_writes_with_its_token() {
                super::child_of_run_writes_with_its_token(&super::servers::$url());
            }
            #[test]
            fn no_token_is_a_usage_error() {
                super::no_token_is_a_usage_error(&super::servers::$url());
            }
        }
    };
}

against!(redis, "redis", redis_url);
against!(mysql, "mysql", mysql_url);

/// A statement fenced in the transaction that admits the token: a stale one
/// is rolled back whole.
#[cfg(feature = "mysql")]
#[test]
fn mysql_sql_statement_commits_only_when_admitted() {
    let url = servers::mysql_url();
    let table = format!("cli_fence_{}", rand_nanos());
    let resource = fresh("row");
    let create = format!("CREATE TABLE IF NOT EXISTS {table} (id INT PRIMARY KEY, qty INT)");
    assert_code(&fence(&url, &fresh("ddl"), 1, &["--sql", &create]), 0);
    let insert = format!("INSERT INTO {table} VALUES (1, 10)");
    assert_code(&fence(&url, &resource, 9, &["--sql", &insert]), 0);
    let take = format!("UPDATE {table} SET qty = qty - 1 WHERE id = 1");
    assert_code(&fence(&url, &resource, 8, &["--sql", &take]), 77);
    let out = fence(&url, &resource, 9, &["--sql", &take]);
    assert_code(&out, 0);
    assert_eq!(
        stdout(&out).trim(),
        "1",
        "rows matched by the admitted UPDATE"
    );
    // Exactly one take landed: the row matches qty = 9 (matched rows are
    // printed, so an unchanged row still counts).
    let check = format!("UPDATE {table} SET qty = qty WHERE id = 1 AND qty = 9");
    let out = fence(&url, &resource, 9, &["--sql", &check]);
    assert_eq!(stdout(&out).trim(), "1", "qty is not 9: {}", stderr(&out));
}

/// A lock backend that is not a data store is refused with the stores to use.
#[test]
fn a_lock_only_scheme_is_not_a_store() {
    let out = fence("zk://127.0.0.1:1", "r", 1, &["--set", "v"]);
    assert_code(&out, 2);
}

/// `distlock check --store` proves the store refuses a stale write, and warns
/// that a Redis without append-only persistence forgets fence records.
#[cfg(feature = "redis")]
#[test]
fn check_store_on_redis_refuses_stale_and_warns_about_persistence() {
    let out = run(&[
        "check",
        "--url",
        "memory://check-store",
        "--store",
        &servers::redis_url(),
    ]);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("PASS  fenced store refuses stale"), "{text}");
    assert!(
        text.contains("append-only persistence is off: a restart forgets every fence record"),
        "{text}"
    );
}

#[cfg(feature = "mysql")]
#[test]
fn check_store_on_mysql_refuses_stale() {
    let out = run(&[
        "check",
        "--url",
        "memory://check-store",
        "--store",
        &servers::mysql_url(),
    ]);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("PASS  fenced store refuses stale"),
        "{}",
        stdout(&out)
    );
}
