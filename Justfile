# Contributors' recipes. The README's two commands need none of this.

# Build the host and every guest component.
build:
    cargo build --release

# Build only the built-in guest components (wasm32-wasip2), into target/guests.
build-plugins:
    cargo build --locked --target wasm32-wasip2 --profile guest --target-dir target/guests -p diceroller -p ruleslookup -p fileio -p memorytool

# A release build with line tables, for perf and callgrind.
build-profiling:
    cargo build --locked --profile profiling

# The whole test suite (what CI runs).
test:
    ./scripts/test

# Benchmarks: the runtime latency report and the criterion medians.
bench:
    cargo bench -p toolhost-bench --bench runtime

# MCP tools/call round trips, toolhost vs the Node and Python peers (after scripts/install-peers).
bench-mcp:
    cargo build --release
    cargo bench -p toolhost-bench --bench mcp

# MCP round trips as each client sees them: rmcp, the Python and TypeScript SDKs, a plain client (stdio).
bench-clients:
    cargo build --release
    cargo bench -p toolhost-bench --bench clients

# What the voice relay adds per event and per tool call, against a direct
# connection to the scripted upstream (needs scripts/install-peers).
bench-voice:
    cargo build --release
    tests/peers/.venv/bin/python crates/bench/voice/relay_bench.py

# What tracing (off, sampling 0, sampling 1) and the audit gate cost a
# call over stdio (needs scripts/install-peers).
bench-telemetry:
    cargo build --release
    cargo bench -p toolhost-bench --bench telemetry

# A call with an OAuth access token (JWT) checked, against a static token,
# over streamable HTTP (needs scripts/install-peers).
bench-oauth:
    cargo build --release
    cargo bench -p toolhost-bench --bench oauth

# The memory tools on PostgreSQL against SQLite, beside a throwaway
# PostgreSQL cluster (needs scripts/install-peers).
bench-memory:
    cargo bench -p toolhost-bench --bench memory --no-run
    crates/bench/memory/with-postgres cargo bench -p toolhost-bench --bench memory

# A fleet of three hosts on a throwaway PostgreSQL, behind HAProxy: change
# propagation, and roll calls/s through HAProxy against direct.
bench-fleet:
    cargo build --release
    cargo bench -p toolhost-bench --bench fleet --no-run
    crates/bench/memory/with-postgres cargo bench -p toolhost-bench --bench fleet

# Lints, as CI-clean as the code must be.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    # examples/weather is a workspace of its own.
    cargo fmt --manifest-path examples/weather/Cargo.toml --all -- --check
    cargo clippy --manifest-path examples/weather/Cargo.toml --all-targets -- -D warnings
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p toolhost -p toolhost-types -p toolhost-base -p toolhost-runtime -p toolhost-core -p toolhost-admission -p toolhost-config -p toolhost-mcp -p toolhost-mcp-wire -p toolhost-mcp-client -p toolhost-memory -p toolhost-dist -p toolhost-bridge

fmt:
    cargo fmt --all
    cargo fmt --manifest-path examples/weather/Cargo.toml --all

# Regenerate the rules data from the SRD SQLite file.
gen-srd DB:
    python3 scripts/gen_srd.py {{DB}}
