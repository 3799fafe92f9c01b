//! `distlock-peers` (`just bench-peers`): distlock next to the lock crates
//! users would otherwise pick, on the same servers in one run, as one table:
//! etcd's server-side Lock API (its gRPC `Lock`/`Unlock`), rslock (Redlock, and on one
//! node), zookeeper-client's lock recipe, and distlock on every backend.
//!
//! Each implementation runs an uncontended cycle (every client acquires and
//! releases a key of its own, as fast as it goes) and a hand-off (all clients
//! on one key; latency from a holder's release call to another client holding),
//! at a few client counts, for `--cell` each. The servers are the testkit's
//! native launchers on loopback; the request counts come from the servers'
//! own counters, read through distlock's `Inspect::server_requests`.
//!
//! `--write docs/performance.md` replaces the page's generated section (between
//! two marker comments) with the table and its notes.

mod measure;
mod peers;
mod servers;
mod table;

use clap::Parser;
use distlock::DynLock;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use table::Row;

#[derive(Debug, Parser)]
#[command(about = "distlock next to etcd's Lock API, rslock and zookeeper-client's lock recipe")]
struct Args {
    /// How long each cell of the table runs.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    cell: Duration,
    /// Client counts; a hand-off needs at least 2, so 1 becomes 2 there.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    clients: Vec<usize>,
    /// Backends to run, of redis, redlock, etcd, zookeeper, mysql.
    #[arg(long, value_delimiter = ',', default_values_t = servers::BACKENDS.map(String::from))]
    only: Vec<String>,
    /// Replace the generated section of this page with the table.
    #[arg(long, value_name = "PAGE")]
    write: Option<PathBuf>,
    /// Only launch the servers, print distlock's URL for each, and wait for Ctrl-C.
    #[arg(long)]
    serve: bool,
}

fn parse_duration(raw: &str) -> Result<Duration, String> {
    distlock::toolkit::parse_duration(raw).map_err(|why| format!("`{raw}` {why}"))
}

/// A duration as the table's notes show it (`3s`, `500ms`).
fn show(d: Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{}s", d.as_secs()),
        _ => format!("{}ms", d.as_millis()),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("distlock-peers: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("distlock-peers: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let mut targets = Vec::new();
    for backend in &args.only {
        eprintln!("starting {backend}");
        targets.push(servers::launch(backend).await?);
    }
    if args.serve {
        for target in &targets {
            println!("{}: {}", target.label, target.url);
        }
        let _ = tokio::signal::ctrl_c().await;
        return Ok(());
    }
    let run_id = format!("{:08x}", rand::random::<u32>());
    let mut rows = Vec::new();
    for target in &targets {
        let observer = distlock::connect(&target.url)
            .await
            .map_err(|e| e.to_string())?;
        for (kind, connect_to) in &target.runs {
            for (operation, handoff) in [("cycle", false), ("hand-off", true)] {
                for &clients in &args.clients {
                    let clients = if handoff {
                        clients.max(2)
                    } else {
                        clients.max(1)
                    };
                    eprintln!(
                        "{}: {} {operation}, {clients} clients",
                        target.label,
                        kind.label()
                    );
                    let names: Vec<String> = (0..clients)
                        .map(|i| format!("peers-{run_id}-{operation}-{clients}-{}-{i}", rows.len()))
                        .collect();
                    let mut peers = Vec::new();
                    for _ in 0..clients {
                        peers.push(kind.connect(connect_to).await?);
                    }
                    measure::warm_up(&mut peers, &names).await?;
                    let shared = handoff.then(|| format!("{}-shared", names[0]));
                    let before = requests(&observer).await;
                    let mut cell = measure::run(peers, &names, shared.as_deref(), args.cell).await;
                    let after = requests(&observer).await;
                    if let Some(e) = &cell.first_error {
                        eprintln!("  {} errors, first: {e}", cell.errors);
                    }
                    let per_read = read_cost(&observer).await;
                    let requests = match (before, after, per_read) {
                        (Some(b), Some(a), Some(r)) if cell.turns > 0 => {
                            Some(a.saturating_sub(b).saturating_sub(r) as f64 / cell.turns as f64)
                        }
                        _ => None,
                    };
                    rows.push(Row {
                        backend: target.label.clone(),
                        implementation: kind.label(),
                        operation,
                        clients,
                        p50: cell.quantile(0.50),
                        p99: cell.quantile(0.99),
                        rate: cell.rate,
                        requests,
                        errors: cell.errors,
                    });
                }
            }
        }
    }
    let table = table::markdown(&rows);
    let mut versions: Vec<String> = targets.iter().map(|t| t.version.clone()).collect();
    versions.dedup();
    let mut command = String::from("just bench-peers");
    if args.cell != Duration::from_secs(3) {
        command.push_str(&format!(" --cell {}", show(args.cell)));
    }
    if let Some(page) = &args.write {
        command.push_str(&format!(" --write {}", page.display()));
    }
    let notes = table::notes(&versions, &command, args.cell);
    println!("{table}\n{notes}");
    if let Some(page) = &args.write {
        table::write_section(page, &format!("{table}\n{notes}"))?;
        eprintln!("wrote the table into {}", page.display());
    }
    Ok(())
}

/// The server's request counter, through distlock's inspection of it.
async fn requests(observer: &DynLock) -> Option<u64> {
    observer.inspect()?.server_requests().await.ok()?
}

/// What one reading of the counter adds to it: two readings in a row.
async fn read_cost(observer: &DynLock) -> Option<u64> {
    let first = requests(observer).await?;
    let second = requests(observer).await?;
    Some(second.saturating_sub(first))
}
