//! End-to-end tests: through the library API with real components, and
//! through the `toolhost` binary as a user runs it.
//!
//! - `common`: shared hosts and a builder for the binary.
//! - `live`: a running `serve --http` and an MCP client that counts list_changed.
//! - `live_budget`: stats, agents and DM overrides against the running host, saved measurements, background calibration.
//! - `plugins`: the built-in tools' happy paths and errors.
//! - `prefix`: `plugins.prefix`, and a clash exposing the later plugin's tool as `<plugin>_<tool>`.
//! - `plugin_limits`: `plugins.limits.<plugin>`, one plugin's limits in place of the operator's.
//! - `grants`: deny-by-default capabilities, the fileio sandbox, the grants report.
//! - `hostile`: misbehaving plugins are stopped with typed errors and the host keeps serving.
//! - `invariants`: one test per invariant of ARCHITECTURE.md, named after it.
//! - `loading`: bad files are refused with a message naming the problem; the compile cache.
//! - `audit`: one record per call.
//! - `budget`: agent allow-lists, tiers, calibration, batches.
//! - `memory`: the memory tools over both stores (SQLite, and PostgreSQL in a throwaway cluster), moving a campaign between them, the memory grants.
//! - `pg`: the throwaway PostgreSQL cluster (initdb as `toolhost-peer`, a Unix socket), a database per test.
//! - `failover`: the official SDKs' clients of a fleet behind HAProxy go on, never re-initializing, through `kill -9` of their host (sessions restored from the control plane), SIGTERM (no call fails) and a 20 s database outage (dice roll on, memory fails fast, `/readyz` stays ready).
//! - `fleet`: three hosts on one PostgreSQL behind HAProxy with `deploy/haproxy.cfg`: changes through any host reach every host, a late host starts with them, forged changes are ignored, kill -9 loses no acknowledged write, SIGTERM finishes calls in flight.
//! - `mcp`: the MCP server front over stdio and streamable HTTP, and its hardening.
//! - `body_limit`: `server.max_body_bytes` over HTTP: a body over it gets 413 once read, and the client keeps its session; over 64 MiB, the connection is closed.
//! - `guide`: docs/authoring.md run as written; the Python plugin built and called.
//! - `quickstart`: the README's quick starts (the DM, the plugin author, the reviewer) run as written; every example folder built from a copy of itself.
//! - `harm`: no plugin can take the host down or act as the operator: host-side resources counted, DNS of its own, loopback grants exact, toolhost's own listeners unreachable, the address policy's special-purpose ranges.
//! - `front`: no client can take the HTTP front down: connection caps and header timeouts, body budgets and deadlines, small errors, stdio refusals a client can match.
//! - `http`: plugins' outgoing HTTP through wasi:http: granted origins only, the address policy, TLS with the operator's CA, per-call bounds.
//! - `hotload`: plugins replaced under load, the plugins directory, signed packages.
//! - `external`: external MCP servers: crashes, deadlines, run-time changes, auth.
//! - `proxied`: external servers proxied faithfully: per-server deadlines and tiers, results and definitions as sent, resources, prompts and completions per agent.
//! - `peers`: third-party peers: the conformance suite, the Python client, the Inspector CLI, reference servers.
//! - `client_conformance`: toolhost as an MCP client against the conformance suite's client scenarios, OAuth discovery.
//! - `cli`: the binary's subcommands and their output.
//! - `limits`: the HTTP front's rate limits, session cap, failed-auth throttle and local-user check.
//! - `probes`: docs/http-probes.md's toolhost column, probed anew by tests/peers/http_probe.py.
//! - `trust`: the compile cache, package identity, fair sharing, private files.
//! - `turns`: turns over MCP: the tier selector per session, turn caps, the result cache, long tools.
//! - `bridge`: the S2S bridge: OpenAI Realtime and Gemini Live function-call events, shaped by hand from the public API references (fixtures/bridge/README.md), not recorded, through `toolhost::bridge`.
//! - `oci`: plugins from OCI registries against a real registry on loopback: push, show, pull, the lock file, hot add and upgrade, hostile registries, the cache, basic auth, interop with ORAS.
//! - `sigstore`: publisher identities through Sigstore, keyless and keyed, against the tests' private instance (tests/peers/sigstore_instance.py), with sigstore-python verifying the same bundles.
//! - `marketplace`: catalogues in a real registry: three publishers (two at once), `search` ranking, `install` holding what is not granted and refusing entries that lie; hostile catalogues (endless, silent, circular, unbounded, a 1 GiB entry).
//! - `doctor`: `toolhost doctor` on what a start loads: `oci://` entries from the cache, plugins added at run time, trusted signatures; clean when correct, the one broken entry when not.
//! - `ops`: operating a live game: a quiet watcher, run-time changes that persist, `/metrics`, `toolhost doctor`.
//! - `review`: the reviewer's view: `inspect` of plugins not granted what they ask, inert imports, over-grants.
//! - `weather`: the example marketplace plugin signed with its asks, held for its secret, loaded by `toolhost secret set`, answering through its grant only; secrets redacted and private to their plugin.
//! - `ui`: the DM's page in headless Chromium (playwright-core), and its API's access rules.

mod audit;
mod audit_gate;
mod body_limit;
mod bridge;
mod budget;
mod canary;
mod cli;
mod client_conformance;
mod common;
mod doctor;
mod external;
mod failover;
mod fairness;
mod first_call;
mod fleet;
mod front;
mod fsguard;
mod grants;
mod guide;
mod harm;
mod hostile;
mod hotload;
mod http;
mod invariants;
mod languages;
mod limits;
mod live;
mod live_budget;
mod loading;
mod marketplace;
mod marketplace_page;
mod mcp;
mod memory;
mod oauth;
mod oci;
mod offers;
mod operator;
mod ops;
mod peers;
mod pg;
mod plugin_limits;
mod plugins;
mod prefix;
mod probes;
mod proxied;
mod quickstart;
mod reload;
mod review;
mod revocations;
mod sigstore;
mod tasks;
mod traces;
mod trust;
mod turns;
mod ui;
mod upstream;
mod upstream_questions;
mod voice;
mod walls;
mod weather;
