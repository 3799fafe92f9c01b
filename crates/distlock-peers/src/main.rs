//! `distlock-peers` (`just bench-peers`): distlock next to the lock crates
//! users would otherwise pick, on the same servers in one run, as one table:
//! etcd's server-side Lock API (its gRPC `Lock`/`Unlock`), rslock (Redlock, and on one
//! node), zookeeper-client's lock recipe, hand-written statements on PostgreSQL,
//! hand-written KV calls on NATS, and distlock on every backend.
//!
//! Each implementation runs an uncontended cycle (every client acquires and
//! releases a key of its own, as fast as it goes) and a hand-off (all clients
//! on one key; latency from a holder's release call to another client holding),
//! at a few client counts, for `--cell` each, `--runs` times with the
//! implementations taking turns (the table shows medians, and the process's
//! own CPU time per operation). The servers are the testkit's
//! native launchers on loopback; the request counts come from the servers'
//! own counters, read through distlock's `Inspect::server_requests` (on NATS,
//! which has none a client can read, from the server's monitoring port).
//!
//! `--write docs/performance.md` replaces the page's generated section (between
//! two marker comments) with the table and its notes.

mod measure;
mod nats;
mod peers;
mod postgres;
mod servers;
mod table;

use clap::{Parser, ValueEnum};
use distlock::DynLock;
use peers::Kind;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use table::{Measured, Row};

/// Runs of every cell by default; the table shows their medians.
const DEFAULT_RUNS: usize = 5;

#[derive(Debug, Parser)]
#[command(
    about = "distlock next to etcd's Lock API, rslock, zookeeper-client's lock recipe and hand-written PostgreSQL and NATS locks"
)]
struct Args {
    /// How long each cell of the table runs.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    cell: Duration,
    /// Instead of timing the cells: every client takes this many turns per
    /// cell, a fixed amount of work (count instructions with callgrind).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "cell")]
    ops: Option<u64>,
    /// Which implementations to run: distlock, the peer, and the protocol's
    /// floor (`Inspect::floor_cycle` raw, on the cycle rows only).
    #[arg(long, value_delimiter = ',', default_value = "distlock,peer")]
    impls: Vec<Side>,
    /// Runs of each cell, the implementations of a backend taking turns; the
    /// table shows the medians.
    #[arg(long, default_value_t = DEFAULT_RUNS)]
    runs: usize,
    /// Client counts; a hand-off needs at least 2, so 1 becomes 2 there.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    clients: Vec<usize>,
    /// Operations to run, of cycle and hand-off.
    #[arg(long, value_delimiter = ',', default_value = "cycle,hand-off")]
    operations: Vec<Operation>,
    /// Backends to run, of redis, redlock, etcd, zookeeper, mysql, postgres, nats.
    #[arg(long, value_delimiter = ',', default_values_t = servers::BACKENDS.map(String::from))]
    only: Vec<String>,
    /// Of those backends, only the groups whose label contains this text
    /// (`version_cas`, `advisory`, `lock_in` on PostgreSQL).
    #[arg(long)]
    group: Option<String>,
    /// Replace the generated section of this page with the table.
    #[arg(long, value_name = "PAGE")]
    write: Option<PathBuf>,
    /// Only launch the servers, print distlock's URL for each, and wait for Ctrl-C.
    #[arg(long)]
    serve: bool,
}

/// The two operations of the table, for `--operations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Operation {
    Cycle,
    HandOff,
}

/// One side of a table row, for `--impls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Side {
    Distlock,
    Peer,
    Floor,
}

impl Side {
    fn of(kind: Kind) -> Side {
        match kind {
            Kind::Distlock | Kind::DistlockTx => Side::Distlock,
            Kind::Floor => Side::Floor,
            _ => Side::Peer,
        }
    }
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
        targets.extend(servers::launch(backend).await?);
    }
    if let Some(group) = &args.group {
        targets.retain(|target| target.label.contains(group.as_str()));
    }
    for target in &mut targets {
        // The floor of distlock's lease, on the targets that measure one.
        if target
            .runs
            .first()
            .is_some_and(|(kind, _)| *kind == Kind::Distlock)
        {
            target.runs.push((Kind::Floor, target.url.clone()));
        }
        target
            .runs
            .retain(|(kind, _)| args.impls.contains(&Side::of(*kind)));
    }
    let length = match args.ops {
        Some(turns) => measure::Length::Turns(turns),
        None => measure::Length::Time(args.cell),
    };
    if args.serve {
        for target in &targets {
            println!("{}: {}", target.label, target.url);
        }
        let _ = tokio::signal::ctrl_c().await;
        return Ok(());
    }
    let run_id = format!("{:08x}", rand::random::<u32>());
    let runs = args.runs.max(1);
    let mut rows = Vec::new();
    let mut cells = 0;
    for target in &targets {
        let observer = distlock::connect(&target.url)
            .await
            .map_err(|e| e.to_string())?;
        for picked in [Operation::Cycle, Operation::HandOff] {
            if !args.operations.contains(&picked) {
                continue;
            }
            let (operation, handoff) = match picked {
                Operation::Cycle => ("cycle", false),
                Operation::HandOff => ("hand-off", true),
            };
            for &clients in &args.clients {
                let clients = if handoff {
                    clients.max(2)
                } else {
                    clients.max(1)
                };
                // Each implementation's cells, interleaved: run after run, the
                // implementations take turns, the first of one run last in the
                // next, so that every one of them sees the same noise.
                // The floor is one client's raw cycle: no hand-off.
                let kinds: Vec<&(Kind, String)> = target
                    .runs
                    .iter()
                    .filter(|(kind, _)| !handoff || *kind != Kind::Floor)
                    .collect();
                let mut measured: Vec<Vec<Measured>> = vec![Vec::new(); kinds.len()];
                for round in 0..runs {
                    let mut order: Vec<usize> = (0..kinds.len()).collect();
                    if round % 2 == 1 {
                        order.reverse();
                    }
                    for i in order {
                        let (kind, connect_to) = kinds[i];
                        eprintln!(
                            "{}: {} {operation}, {clients} clients, run {}/{runs}",
                            target.label,
                            kind.label(),
                            round + 1
                        );
                        let names: Vec<String> = (0..clients)
                            .map(|c| format!("peers-{run_id}-{cells}-{c}"))
                            .collect();
                        cells += 1;
                        let cell = Setup {
                            counter: Counter {
                                observer: &observer,
                                varz: target.varz,
                            },
                            kind: *kind,
                            connect_to,
                            names: &names,
                            handoff,
                            length,
                        };
                        measured[i].push(cell.measure().await?);
                    }
                }
                for ((kind, _), cells) in kinds.into_iter().zip(measured) {
                    rows.push(Row::median(
                        target.label.clone(),
                        kind.label(),
                        operation,
                        clients,
                        &cells,
                    ));
                }
            }
        }
    }
    let table = table::markdown(&rows);
    let mut versions: Vec<String> = targets.iter().map(|t| t.version.clone()).collect();
    versions.dedup();
    let mut command = String::from("just bench-peers");
    if let Some(turns) = args.ops {
        command.push_str(&format!(" --ops {turns}"));
    } else if args.cell != Duration::from_secs(3) {
        command.push_str(&format!(" --cell {}", show(args.cell)));
    }
    if runs != DEFAULT_RUNS {
        command.push_str(&format!(" --runs {runs}"));
    }
    if args.impls != [Side::Distlock, Side::Peer] {
        let names: Vec<String> = (args.impls.iter())
            .filter_map(|side| Some(side.to_possible_value()?.get_name().to_owned()))
            .collect();
        command.push_str(&format!(" --impls {}", names.join(",")));
    }
    if args.only != servers::BACKENDS {
        command.push_str(&format!(" --only {}", args.only.join(",")));
    }
    if let Some(group) = &args.group {
        command.push_str(&format!(" --group {group}"));
    }
    if let Some(page) = &args.write {
        command.push_str(&format!(" --write {}", page.display()));
    }
    let notes = table::notes(&versions, &command, &length.to_string(), runs);
    println!("{table}\n{notes}");
    if let Some(page) = &args.write {
        table::write_section(page, &format!("{table}\n{notes}"))?;
        eprintln!("wrote the table into {}", page.display());
    }
    Ok(())
}

/// One cell to measure: clients of one implementation on one operation.
struct Setup<'a> {
    counter: Counter<'a>,
    kind: Kind,
    connect_to: &'a str,
    /// A key per client (a hand-off shares one derived from the first).
    names: &'a [String],
    handoff: bool,
    length: measure::Length,
}

impl Setup<'_> {
    /// Connects the clients, warms them up, and runs the cell.
    async fn measure(&self) -> Result<Measured, String> {
        let mut peers = Vec::new();
        for _ in self.names {
            peers.push(self.kind.connect(self.connect_to).await?);
        }
        measure::warm_up(&mut peers, self.names).await?;
        let shared = self.handoff.then(|| format!("{}-shared", self.names[0]));
        let before = self.counter.requests().await;
        let mut cell = measure::run(peers, self.names, shared.as_deref(), self.length).await;
        let after = self.counter.requests().await;
        if let Some(e) = &cell.first_error {
            eprintln!("  {} errors, first: {e}", cell.errors);
        }
        let per_read = self.counter.read_cost().await;
        let turns = cell.turns.max(1);
        let requests = match (before, after, per_read) {
            (Some(b), Some(a), Some(r)) if cell.turns > 0 => {
                Some(a.saturating_sub(b).saturating_sub(r) as f64 / turns as f64)
            }
            _ => None,
        };
        Ok(Measured {
            p50: cell.quantile(0.50),
            p99: cell.quantile(0.99),
            rate: cell.rate,
            requests,
            cpu: (cell.turns > 0).then(|| cell.cpu / u32::try_from(turns).unwrap_or(u32::MAX)),
            errors: cell.errors,
        })
    }
}

/// Where the server's request counter is read.
struct Counter<'a> {
    /// distlock's inspection of the server.
    observer: &'a DynLock,
    /// nats-server's monitoring port, read instead when given.
    varz: Option<SocketAddr>,
}

impl Counter<'_> {
    /// The server's request counter.
    async fn requests(&self) -> Option<u64> {
        match self.varz {
            Some(monitor) => nats::messages_received(monitor).await,
            None => self.observer.inspect()?.server_requests().await.ok()?,
        }
    }

    /// What one reading of the counter adds to it: two readings in a row.
    async fn read_cost(&self) -> Option<u64> {
        let first = self.requests().await?;
        let second = self.requests().await?;
        Some(second.saturating_sub(first))
    }
}
