# distlock tasks. `just test` is the one CI runs.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List the recipes.
default:
    @just --list

# Install missing backend servers (as root), then run every test against real servers.
test:
    if [ "$(id -u)" = 0 ]; then scripts/install-backends; fi
    cargo test --workspace --all-features

# fmt check and clippy with warnings as errors.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --all-features -- -D warnings

# The flash-sale and paused-holder demo on the in-memory backend (or --url).
demo *ARGS:
    cargo run -q -p distlock-cli -- demo {{ARGS}}

# Conformance suite for the in-memory backend only.
test-memory:
    cargo test -p distlock-tests --all-features --test conformance -- memory::

# Benchmarks (criterion); they report, they do not assert.
bench:
    cargo bench --workspace --all-features

# API docs for the workspace.
docs:
    cargo doc --workspace --all-features --no-deps
