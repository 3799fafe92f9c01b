# distlock tasks. `just test` is the one CI runs.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List the recipes.
default:
    @just --list

# Install missing backend servers (as root), then run every test against real servers.
test:
    if [ "$(id -u)" = 0 ]; then scripts/install-backends; fi
    cargo test --workspace --all-features

# fmt check, clippy with warnings as errors, and the architecture checks (module cycles, files over
# 400 lines, the paths and adapter files ARCHITECTURE.md names).
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --all-features -- -D warnings
    cargo test --workspace --all-features --test architecture

# The flash-sale and paused-holder demo on the in-memory backend (or --url).
demo *ARGS:
    cargo run -q -p distlock-cli -- demo {{ARGS}}

# Conformance suite for the in-memory backend only.
test-memory:
    cargo test -p distlock-tests --all-features --test conformance -- memory::

# Fenced writes: every fence case on every store (memory, Redis, MySQL), and the paused holder under every lock backend.
test-fences:
    cargo test -p distlock-tests --all-features --test fences

# The history checker under faults: every backend (or those FILTER names, e.g. `redis::`) for SECS
# seconds with random server, proxy and holder faults, and a 3-member etcd and a ZooKeeper ensemble
# (`etcd_cluster::chaos`, `zk_ensemble::chaos`) under partitions, kills and pauses of a member, a Redis
# Cluster with replicas failed over (`redis_cluster::chaos`), a MariaDB and a PostgreSQL primary
# failed over to their asynchronous replica (`mysql_replica::chaos`, `postgres_replica::chaos`; in
# `::lagging` the replica runs 500 ms behind),
# Redlock's node clocks jumped forward (`redlock::clock_jump`), and server clocks stepped back after
# names were collected (`<backend>::clock_step_back`); prints each history file and the table.
chaos SECS="60" *FILTER:
    DISTLOCK_CHAOS_SECS={{SECS}} cargo test -p distlock-tests --all-features --test chaos -- {{FILTER}}

# Re-check a history file written by a chaos run (target/tmp/chaos/*.history); exit 1 on a violation.
chaos-check FILE:
    cargo test -p distlock-tests --all-features --test chaos -- --check "$(realpath {{FILE}})"

# Redis (one node): conformance cases plus the adapter's own tests against launched servers.
test-redis:
    cargo test -p distlock-tests --features redis --test conformance -- redis::
    cargo test -p distlock-redis

# Redis through Sentinel (a launched primary, replica and three Sentinels):
# conformance cases plus the failover tests.
test-redis-sentinel:
    cargo test -p distlock-tests --features redis --test conformance -- redis_sentinel::
    cargo test -p distlock-redis --test redis_sentinel -- --nocapture

# The fair (FIFO) Redis lock, `fair=true`: the whole lock suite, `fifo_order` included.
test-redis-fair:
    cargo test -p distlock-tests --features redis --test conformance -- redis_fair::

# Redis Cluster (three launched primaries): conformance cases plus the reshard,
# wake-up, check and TLS tests (and the Sentinel TLS test).
test-redis-cluster:
    cargo test -p distlock-tests --features redis --test conformance -- redis_cluster::
    cargo test -p distlock-tests --features redis --test conformance -- redis_cluster_fair::
    cargo test -p distlock-redis --test redis_cluster -- --nocapture
    cargo test -p distlock-redis --test redis_cluster_tls --test redis_cluster_faults --test redis_cluster_round_trips --test redis_cluster_primitives --test redis_sentinel_tls

# Redlock (five launched nodes): conformance cases plus the quorum tests.
test-redlock:
    cargo test -p distlock-tests --features redlock --test conformance -- redlock::
    cargo test -p distlock-redis --test redlock_quorum

# ZooKeeper (launched standalone, tickTime 200 ms): conformance cases plus the adapter's own tests.
test-zookeeper:
    cargo test -p distlock-tests --features zookeeper --test conformance -- zookeeper::
    cargo test -p distlock-zookeeper --all-features

# etcd: conformance cases plus the adapter's own tests (3-member leader kill, faults, costs).
test-etcd:
    cargo test -p distlock-tests --features etcd --test conformance -- etcd::
    cargo test -p distlock-etcd --all-features

# Any backend NAME with a crate distlock-NAME: its conformance cases plus the adapter's own tests
# (`just test-backend etcd`).
test-backend NAME:
    cargo test -p distlock-tests --all-features --test conformance -- {{NAME}}::
    cargo test -p distlock-{{NAME}} --all-features

# Other ecosystems' real clients against ours: Apache Curator's recipes (`curator::`, a Java holder compiled
# at test time) on ZooKeeper and `etcdctl lock` (`etcdctl::`) on etcd, both directions and under contention.
test-interop *FILTER:
    cargo test -p distlock-tests --all-features --test interop -- {{FILTER}}

# MySQL on a launched MariaDB: the three strategies' conformance suites (mysql::, mysql_unique_insert::,
# mysql_for_update::) plus the adapter's own tests (KILL, tokens, 16-way takeover, schema, round trips).
test-mysql:
    cargo test -p distlock-tests --features mysql --test conformance -- mysql
    cargo test -p distlock-mysql --all-features

# PostgreSQL on a launched server: both strategies' conformance suites (postgres::, postgres_advisory::)
# plus the adapter's own tests (a holder's backend terminated, key collisions, round trips).
test-postgres:
    cargo test -p distlock-tests --features postgres --test conformance -- postgres
    cargo test -p distlock-postgres --all-features

# TLS on every backend, with certificates made at test time: each adapter's TLS tests, the facade's, the CLI's.
test-tls:
    cargo test --all-features -p distlock-redis --test redis_tls -p distlock-etcd --test etcd_tls -p distlock-mysql --test tls -p distlock-postgres --test tls -p distlock-zookeeper --test tls -p distlock --test tls -p distlock-cli --test tls

# Benchmarks (criterion); they report, they do not assert.
bench:
    cargo bench --workspace --all-features

# distlock next to etcd's Lock API, rslock, zookeeper-client's lock recipe and hand-written PostgreSQL on the same launched servers,
# one markdown table (`--cell 3s`, `--runs 5` interleaved runs shown as medians, `--only etcd,postgres`, `--ops N` fixed turns for callgrind, `--impls distlock,peer,floor`, `--operations cycle`); `just bench-peers --write docs/performance.md` regenerates the page's table.
bench-peers *ARGS:
    cargo run -q --release -p distlock-peers -- {{ARGS}}

# Bounded state, not run by CI: lock NAMES distinct names once each on URL and print the server's memory and
# per-name records before, at the peak and after the URL's state_ttl (`just bench-names 'redis://127.0.0.1:6379?state_ttl=5s' 1000000`).
bench-names URL NAMES="100000" *ARGS:
    cargo run -q --release -p distlock-cli -- bench --url '{{URL}}' --names {{NAMES}} --clients 64 {{ARGS}}

# Pack every publishable crate, build each from its package alone, then run the packed crates' own tests
# in a scratch workspace (`--no-test` to only build): what users of the published crates get.
package *ARGS:
    scripts/package-check {{ARGS}}

# API docs for the workspace; a broken link or a doc warning fails it.
docs:
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps

# Start every docker/ topology (docker/*.yml and docker/images/*/compose.yml) and wait until its
# healthchecks pass (needs Docker).
docker-up:
    for f in docker/*.yml docker/images/*/compose.yml; do docker compose -f "$f" up -d --wait; done

# The whole conformance suite with every server in a container of the local images (`just images`
# first; a Docker engine, no registry): DISTLOCK_LAUNCHER=docker, same cases as `just test`, one backend
# at a time with a summary line each; only FILTER (`just test-docker redis::`); or `--smoke`, the 9 cases that
# drive the container launcher, once per set of servers (one strategy stands for its siblings; what CI runs).
test-docker *FILTER:
    scripts/test-docker {{FILTER}}

# Clustered servers in containers on a private network: a 3-member etcd, a ZooKeeper ensemble, MariaDB
# killed under a holder, Redis primary + replica + 3 Sentinels failed over, and the two clustered chaos
# trials in containers (`just images` first).
test-topologies *FILTER:
    cargo test -p distlock-tests --all-features --test topologies -- {{FILTER}}

# Run the suite against the `just docker-up` servers (Compose v2): MySQL 8 for every test, then MariaDB for the MySQL cases.
# A docker/images/<server>/compose.yml gives its URL as `x-distlock-test-url:` (DISTLOCK_TEST_<SERVER>_URL).
test-compose-servers:
    for f in docker/images/*/compose.yml; do \
        server=$(basename "$(dirname "$f")"); \
        url=$(sed -n 's/^x-distlock-test-url:[[:space:]]*//p' "$f"); \
        [ -z "$url" ] || export "DISTLOCK_TEST_${server^^}_URL=$url"; \
    done; \
    DISTLOCK_TEST_REDIS_URL=redis://127.0.0.1:16379 \
    DISTLOCK_TEST_REDLOCK_URL=redis://127.0.0.1:16381,redis://127.0.0.1:16382,redis://127.0.0.1:16383,redis://127.0.0.1:16384,redis://127.0.0.1:16385 \
    DISTLOCK_TEST_ETCD_URL=etcd://127.0.0.1:12379 \
    DISTLOCK_TEST_ZOOKEEPER_URL=zk://127.0.0.1:12181 \
    DISTLOCK_TEST_MYSQL_URL=mysql://root:distlock-test@127.0.0.1:13306/distlock \
    DISTLOCK_TEST_POSTGRES_URL=postgres://postgres:distlock-test@127.0.0.1:15432/distlock \
    cargo test --workspace --all-features
    DISTLOCK_TEST_MYSQL_URL=mysql://root:distlock-test@127.0.0.1:13307/distlock \
    cargo test -p distlock-tests --all-features --test conformance -- mysql

# Stop and remove the docker/ servers and their data.
docker-down:
    for f in docker/*.yml docker/images/*/compose.yml; do docker compose -f "$f" down -v; done

# Build the local Debian-based server images for docker/ (no registry; skips unchanged ones).
images *ARGS:
    scripts/build-images {{ARGS}}

# The README's first command in a clean Debian container (the local base image, rustup's
# toolchain mounted read-only, a fresh `git archive`, an empty target dir); prints the time.
first-run: images
    scripts/first-run

# Start each docker/ topology on the local images, check it from the host, remove it.
test-compose *TOPOLOGIES: images
    scripts/test-compose {{TOPOLOGIES}}

# Fuzz the parsers (keys, durations, every scheme's URL, the CLI's arguments): 1M executions per target, or `just fuzz --ci`.
fuzz *ARGS:
    scripts/fuzz {{ARGS}}

# The adapters' `leaks` tests (nothing left on the server or in the process after churn with cancelled
# acquires) at CYCLES cycles each; `just test` runs 2,000.
leaks CYCLES="10000":
    DISTLOCK_LEAK_CYCLES={{CYCLES}} cargo test --workspace --all-features --test leaks

# Find flaky cases: each backend's conformance cases alone N times (default 5), then the full target N times; `just soak 1 memory`.
soak *ARGS:
    scripts/soak {{ARGS}}
