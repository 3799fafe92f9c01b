//! Clustered servers in containers on a private network, each at its own address:
//! `etcd_cluster::…` (3 members), `zk_ensemble::…` (3 servers), `mariadb::…`,
//! `redis_sentinel::…` (a primary, a replica, 3 Sentinels), and the topologies
//! a backend lists in its `TestBackend::topologies` (tests/src/lib.rs).
//! Leaders are killed and partitioned away (`docker network disconnect`) under
//! held locks, and every case checks a recorded history: no two holders at once,
//! tokens rising; `etcd_cluster::chaos` and `zk_ensemble::chaos` run the history
//! checker's trials on them (`DISTLOCK_CHAOS_SECS`, 10 s by default). Needs the
//! local images (`just images`) and a Docker engine:
//! `cargo test -p distlock-tests --all-features --test topologies`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = libtest_mimic::Arguments::from_args();
    // Each case runs a cluster of JVMs or etcds: a few at a time on 2 cores.
    args.test_threads.get_or_insert(2);
    let holder = env!("CARGO_BIN_EXE_chaos-holder");
    let dir = distlock_tests::chaos::history_dir(env!("CARGO_TARGET_TMPDIR"));
    libtest_mimic::run(&args, distlock_tests::topologies::trials(holder, dir)).exit_code()
}
