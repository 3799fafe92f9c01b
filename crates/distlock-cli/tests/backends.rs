//! `distlock run`, `check` and `bench` against every backend's real server:
//! contending processes take turns, busy and timed-out runs exit 75, a signalled
//! run releases on the way out, the live check passes and the bench reports.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point
#![cfg_attr(not(feature = "full"), allow(dead_code, unused_imports))]

mod support;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;
#[allow(unused_imports)]
use support::servers;
use support::{Running, assert_code, distlock, output, run, stderr, stdout};

/// A key no other test or run uses.
fn fresh_key(what: &str) -> String {
    format!("cli-test/{:08x}/{what}", rand_u32())
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    hasher.finish() as u32
}

/// `distlock run --url URL --key KEY` and then `rest`.
fn run_on(url: &str, key: &str, rest: &[&str]) -> Command {
    let mut cmd = distlock();
    cmd.args(["run", "--url", url, "--key", key]).args(rest);
    cmd
}

/// A `--no-wait` run of `true`: exit 0 when the lock is free, 75 when held.
fn no_wait_run(url: &str, key: &str) -> Output {
    output(&mut run_on(url, key, &["--no-wait", "--", "true"]))
}

/// A command that holds the lock until `go` exists, announcing itself first.
fn hold_until(go: &Path) -> String {
    format!(
        "echo holding $DISTLOCK_FENCING_TOKEN; while [ ! -e '{}' ]; do sleep 0.05; done",
        go.display()
    )
}

/// Two `distlock run` processes started together on one key: their critical
/// sections never overlap and the second holder's token is higher.
pub fn contending_runs_take_turns(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let key = fresh_key("contend");
    let section = format!(
        "echo start $DISTLOCK_FENCING_TOKEN >> '{0}'; sleep 0.3; echo end $DISTLOCK_FENCING_TOKEN >> '{0}'",
        log.display()
    );
    let spawn = || {
        run_on(
            url,
            &key,
            &["--ttl", "5s", "--wait", "60s", "--", "sh", "-c", &section],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_code(&out, 0);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<(&str, u64)> = text
        .lines()
        .map(|l| {
            let (what, token) = l.split_once(' ').unwrap();
            (what, token.trim().parse().unwrap())
        })
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(
        (lines[0].0, lines[1].0, lines[2].0, lines[3].0),
        ("start", "end", "start", "end"),
        "overlap:\n{text}"
    );
    assert_eq!(lines[0].1, lines[1].1, "{text}");
    assert_eq!(lines[2].1, lines[3].1, "{text}");
    assert!(lines[2].1 > lines[0].1, "tokens did not rise:\n{text}");
}

/// While one run holds the lock, `--no-wait` and an expiring `--wait` exit 75
/// with one line on stderr; after the holder ends, `--no-wait` succeeds at once.
pub fn busy_and_timed_out_runs_exit_75(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let key = fresh_key("busy");
    let mut holder = Running::start(&mut run_on(
        url,
        &key,
        &["--ttl", "5s", "--", "sh", "-c", &hold_until(&go)],
    ));
    holder.wait_line("holding", Duration::from_secs(30));
    let out = no_wait_run(url, &key);
    assert_code(&out, 75);
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&key), "{err}");
    let out = output(&mut run_on(url, &key, &["--wait", "500ms", "--", "true"]));
    assert_code(&out, 75);
    assert!(stderr(&out).contains("not acquired"), "{}", stderr(&out));
    std::fs::write(&go, "").unwrap();
    let (status, err) = holder.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{err}");
    assert_code(&no_wait_run(url, &key), 0);
}

/// SIGTERM to distlock reaches the command, whose status distlock returns, and
/// the lock is free as soon as distlock has exited.
pub fn signalled_run_forwards_and_releases(url: &str) {
    let key = fresh_key("signal");
    let script = "trap 'exit 42' TERM; echo holding; while :; do sleep 0.05; done";
    let mut holder = Running::start(&mut run_on(
        url,
        &key,
        &["--ttl", "5s", "--", "sh", "-c", script],
    ));
    holder.wait_line("holding", Duration::from_secs(30));
    holder.signal("TERM");
    let (status, err) = holder.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(42), "{err}");
    assert_code(&no_wait_run(url, &key), 0);
}

/// While a `--read` run holds, another `--read --no-wait` run gets in and a
/// `--write --no-wait` run exits 75; once the reader ends, the writer gets in.
#[cfg(any(feature = "etcd", feature = "redis"))]
pub fn readers_share_and_a_writer_waits(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let key = fresh_key("rw");
    let mut reader = Running::start(&mut run_on(
        url,
        &key,
        &["--read", "--ttl", "5s", "--", "sh", "-c", &hold_until(&go)],
    ));
    reader.wait_line("holding", Duration::from_secs(30));
    let share = |mode: &str| output(&mut run_on(url, &key, &[mode, "--no-wait", "--", "true"]));
    assert_code(&share("--read"), 0);
    assert_code(&share("--write"), 75);
    std::fs::write(&go, "").unwrap();
    let (status, err) = reader.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{err}");
    assert_code(&share("--write"), 0);
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_readers_share_and_a_writer_waits() {
    readers_share_and_a_writer_waits(&servers::etcd_url());
}

#[cfg(feature = "redis")]
#[test]
fn redis_readers_share_and_a_writer_waits() {
    readers_share_and_a_writer_waits(&servers::redis_url());
}

/// `--read` on a backend without read-write locks is a usage error naming why.
#[cfg(feature = "redlock")]
#[test]
fn redlock_read_without_a_read_write_lock_exits_2() {
    let out = output(&mut run_on(
        &servers::redlock_url(),
        &fresh_key("rw"),
        &["--read", "--", "true"],
    ));
    assert_code(&out, 2);
    assert!(stderr(&out).contains("read-write lock"), "{}", stderr(&out));
}

pub fn check_passes(url: &str) {
    let out = run(&["check", "--url", url]);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("check: 5 of 5 passed"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
    assert!(text.contains("state records: "), "{text}");
}

/// The requests one protocol floor costs as the backend declares them
/// (`Inspect::floor`), from the bench's JSON.
fn floor_requests(json: &str) -> f64 {
    let (_, rest) = json
        .split_once("\"floor_requests\":")
        .unwrap_or_else(|| panic!("no floor_requests: {json}"));
    let value = rest.split(',').next().unwrap();
    value
        .parse()
        .unwrap_or_else(|_| panic!("floor_requests {value:?}: {json}"))
}

/// `"field":value` of the phase `phase` in the bench's JSON, as a number.
fn phase_number(json: &str, phase: &str, field: &str) -> f64 {
    let start = json.find(&format!("\"phase\":\"{phase}\"")).unwrap();
    let object = json[start..].split('}').next().unwrap();
    let (_, rest) = object.split_once(&format!("\"{field}\":")).unwrap();
    let value = rest.split(',').next().unwrap();
    value
        .parse()
        .unwrap_or_else(|_| panic!("{phase}: {field} {value:?}: {json}"))
}

/// One bench at a time: benches side by side share servers (and the machine's
/// cores), so they would count each other's requests, and more of them the
/// slower a loaded machine runs them.
fn one_bench_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static BENCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    BENCH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn bench_reports_every_phase(url: &str) {
    let _alone = one_bench_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("bench.svg");
    let out = run(&[
        "bench",
        "--url",
        url,
        "--duration",
        "2s",
        "--clients",
        "4",
        "--json",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert_code(&out, 0);
    let json = stdout(&out);
    let phases = [
        "protocol floor",
        "read round trip",
        "uncontended cycle",
        "contended hand-off",
    ];
    for phase in phases {
        assert!(phase_number(&json, phase, "ops") > 0.0, "{phase}: {json}");
    }
    assert!(
        json.contains("\"floor\":\""),
        "the floor is not named: {json}"
    );
    // Counted by the server: each line costs at least what the protocol needs
    // (a little less at most, for the counter's own reads taken off), and other
    // tests on the same server add a little, never a multiple.
    let floor = floor_requests(&json);
    let reads = if url.starts_with("redlock") { 3.0 } else { 1.0 };
    let per_op = |phase| phase_number(&json, phase, "server_requests_per_op");
    for (phase, expected) in [("protocol floor", floor), ("read round trip", reads)] {
        let counted = per_op(phase);
        let about = expected - 0.25..2.0 * expected + 1.0;
        assert!(
            about.contains(&counted),
            "{phase}: {counted} per op: {json}"
        );
    }
    // Only a cycle is held to the floor: a hand-off's waiting and retries
    // fall across acquisitions (MySQL `unique_insert`'s, doorbell included,
    // counted about 4.2 statements an acquisition against a floor of 5).
    let cycle = per_op("uncontended cycle");
    assert!(
        cycle >= floor - 0.25,
        "uncontended cycle: {cycle} < {floor}: {json}"
    );
    assert_eq!(
        phase_number(&json, "protocol floor", "p50_ratio_to_floor"),
        1.0,
        "{json}"
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert_eq!(svg.matches("<polyline").count(), phases.len(), "{svg}");
}

/// The demo on a real backend: on a data store (Redis, MySQL, PostgreSQL) the stock lives
/// there and that store refuses the paused holder's write; elsewhere it lives
/// in process memory.
pub fn demo_runs(url: &str) {
    let out = run(&["demo", "--url", url, "--items", "5", "--buyers", "20"]);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("REJECTED by the store"), "{text}");
    assert!(text.contains("exactly 5"), "{text}");
    let scheme = url.split("://").next().unwrap_or_default();
    let stores_fenced_data = distlock::BackendKind::from_scheme(scheme)
        .and_then(|kind| kind.registration())
        .is_some_and(|registration| registration.has_fence());
    let store = if stores_fenced_data { scheme } else { "memory" };
    assert!(text.contains(&format!("stock in {store}://")), "{text}");
}

macro_rules! against {
    ($backend:ident, $feature:literal, $url:ident) => {
        #[cfg(feature = $feature)]
        mod $backend {
            against!(@cases $url:
                contending_runs_take_turns,
                busy_and_timed_out_runs_exit_75,
                signalled_run_forwards_and_releases,
                check_passes,
                bench_reports_every_phase,
                demo_runs
            );
        }
    };
    (@cases $url:ident: $($case:ident),*) => {
        $(
            #[test]
            fn $case() {
                super::$case(&super::servers::$url());
            }
        )*
    };
}

against!(redis, "redis", redis_url);
against!(redlock, "redlock", redlock_url);
against!(etcd, "etcd", etcd_url);
against!(zookeeper, "zookeeper", zookeeper_url);
against!(mysql, "mysql", mysql_url);
against!(mysql_unique_insert, "mysql", mysql_unique_insert_url);
against!(mysql_for_update, "mysql", mysql_for_update_url);
against!(postgres, "postgres", postgres_url);
against!(postgres_advisory, "postgres", postgres_advisory_url);

#[cfg(feature = "postgres")]
mod postgres_pgbouncer {
    use super::{assert_code, run, servers, stderr};

    against!(@cases postgres_pgbouncer_url:
        contending_runs_take_turns,
        busy_and_timed_out_runs_exit_75,
        signalled_run_forwards_and_releases,
        check_passes,
        bench_reports_every_phase
    );

    /// The demo's stock, a fenced store, is refused through the pooler (it
    /// keeps prepared statements) with the reason; on the server itself the
    /// demo runs with its locks through the pooler.
    #[test]
    fn demo_runs_with_its_store_on_the_server_itself() {
        let url = servers::postgres_pgbouncer_url();
        let refused = run(&["demo", "--url", &url, "--items", "5", "--buyers", "20"]);
        assert_code(&refused, 2);
        assert!(
            stderr(&refused).contains("fenced store"),
            "{}",
            stderr(&refused)
        );
        let store = servers::pgbouncer_postgres_url();
        let args = ["--items", "5", "--buyers", "20", "--store", &store];
        let out = run(&[&["demo", "--url", &url][..], &args[..]].concat());
        assert_code(&out, 0);
        let text = super::stdout(&out);
        assert!(text.contains("REJECTED by the store"), "{text}");
        assert!(text.contains("exactly 5"), "{text}");
    }
}

/// `check` through PgBouncer without `pooler=transaction`: a configuration
/// error (exit 2) that names the setting, not a hang or a lock left behind.
#[cfg(feature = "postgres")]
#[test]
fn postgres_pgbouncer_check_without_the_setting_names_it() {
    let url = servers::pgbouncer_url();
    let out = run(&["check", "--url", &url]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("pooler=transaction"),
        "{}",
        stderr(&out)
    );
}

/// `bench --names`: the run's names are counted at the peak, and none is left
/// once `state_ttl` has passed.
#[cfg(feature = "redis")]
#[test]
fn redis_bench_names_peaks_and_collects() {
    let url = servers::redis_url();
    let joint = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{joint}state_ttl=2s");
    let out = run(&["bench", "--url", &url, "--names", "300", "--clients", "4"]);
    assert_code(&out, 0);
    let text = stdout(&out);
    let records = |row: &str| -> usize {
        let line = text.lines().find(|l| l.starts_with(row)).unwrap();
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    assert!(text.contains("locked 300 names"), "{text}");
    assert_eq!(records("before"), 0, "{text}");
    assert!(records("peak") > 0, "{text}");
    assert_eq!(records("after state_ttl"), 0, "{text}");
    assert!(
        text.contains("used_memory") && text.contains("no state record left"),
        "{text}"
    );
}

/// A lock deleted by an operator while the command runs: SIGTERM, exit 69.
#[cfg(feature = "redis")]
#[test]
fn redis_lock_deleted_under_a_running_command_exits_69() {
    let url = servers::redis_url();
    let key = fresh_key("deleted");
    let mut holder = Running::start(&mut run_on(
        &url,
        &key,
        &["--ttl", "3s", "--", "sh", "-c", "echo holding; sleep 60"],
    ));
    holder.wait_line("holding", Duration::from_secs(30));
    // The operator's force-unlock, through the adapter's own inspection.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let deleted = runtime.block_on(async {
        let operator = distlock::connect(&url).await.unwrap();
        let inspect = operator
            .inspect()
            .unwrap_or_else(|| panic!("the redis client offers no Inspect"));
        let key = distlock::LockKey::new(&key).unwrap();
        inspect.delete_holder(&key).await.unwrap()
    });
    assert!(deleted, "no holder of {key} to delete");
    let (status, err) = holder.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(69), "{err}");
    assert!(err.contains("lost"), "{err}");
}

/// `check` warns about a Redis that may evict lock keys, and still passes.
#[cfg(feature = "redis")]
#[test]
fn redis_check_warns_about_an_evicting_maxmemory_policy() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(distlock_testkit::servers::RedisServer::start())
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    let evicting = redis_command(server.addr(), "CONFIG SET maxmemory-policy allkeys-lru");
    assert_eq!(evicting.trim(), "+OK");
    let out = run(&["check", "--url", &server.url()]);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains("warning:") && text.contains("maxmemory-policy is allkeys-lru"),
        "{text}"
    );
    let safe = redis_command(server.addr(), "CONFIG SET maxmemory-policy noeviction");
    assert_eq!(safe.trim(), "+OK");
    let out = run(&["check", "--url", &server.url()]);
    assert!(
        !stdout(&out).contains("maxmemory-policy"),
        "{}",
        stdout(&out)
    );
}

/// Sends one inline command to a Redis server; returns its one-line reply.
#[cfg(feature = "redis")]
fn redis_command(addr: std::net::SocketAddr, command: &str) -> String {
    use std::io::{BufRead, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(format!("{command}\r\n").as_bytes())
        .unwrap();
    let mut reply = String::new();
    std::io::BufReader::new(stream)
        .read_line(&mut reply)
        .unwrap();
    reply
}

/// A database index the server does not have is a configuration error: exit 2
/// with a short reason, not 1 as for an unreachable server.
#[cfg(feature = "redis")]
#[test]
fn redis_database_index_out_of_range_exits_2() {
    let url = format!("{}/99999", servers::redis_url().trim_end_matches('/'));
    let out = output(&mut run_on(&url, &fresh_key("db"), &["--", "true"]));
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(err.contains("no such database"), "{err}");
    assert!(err.lines().count() == 1 && err.len() < 400, "{err}");
}

/// A ttl in the URL is `distlock run`'s default ttl when `--ttl` is not given:
/// the server holds the lock for at most that long, not the built-in 30 s.
#[cfg(feature = "redis")]
#[test]
fn redis_url_ttl_is_the_default_of_run() {
    let url = format!("{}?ttl=7s", servers::redis_url());
    let key = fresh_key("url-ttl");
    let mut holder = Running::start(&mut run_on(
        &url,
        &key,
        &["--", "sh", "-c", "echo holding; sleep 60"],
    ));
    holder.wait_line("holding", Duration::from_secs(30));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let remaining = runtime.block_on(async {
        let operator = distlock::connect(&url).await.unwrap();
        assert_eq!(operator.default_options().get_ttl(), Duration::from_secs(7));
        let inspect = operator.inspect().expect("the redis client offers Inspect");
        let key = distlock::LockKey::new(&key).unwrap();
        let holder = inspect
            .holder(&key)
            .await
            .unwrap()
            .expect("the run holds the key");
        holder.expires_in.expect("a redis lock has a ttl")
    });
    assert!(
        remaining <= Duration::from_secs(7) && remaining > Duration::ZERO,
        "the held key expires in {remaining:?}, not within the URL's 7 s"
    );
    holder.signal("TERM");
    let (status, err) = holder.wait(Duration::from_secs(30));
    assert!(status.code().is_some(), "{err}");
}
