//! The marketplace (#50), against a real registry (`docker-registry`, from
//! scripts/install-peers): `toolhost search` over a catalogue of
//! `MARKET_BENCH_N` entries (default 10,000) with a warm local copy, as a
//! user runs it (the process included) and in process (reading the copy
//! and ranking); the cold read of the whole catalogue; publishing entries;
//! and `toolhost install` from the catalogue to the first call over MCP
//! against `toolhost plugin add` of the same file, alternated.
//!
//! `cargo bench -p toolhost-bench --bench marketplace`; `TOOLHOST_BIN`
//! (default `target/release/toolhost`), `MARKET_BENCH_N`,
//! `MARKET_BENCH_RUNS` (default 30). Prints a Markdown table.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use toolhost::catalogue::{Catalogues, Entry, EntryAsks, EntryTool, Publisher, search};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(bin: &Path, dir: &Path, args: &[&str]) -> String {
    let o = Command::new(bin)
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env("TOOLHOST_CACHE_DIR", dir.join("cache"))
        .env("RUST_LOG", "error")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const WORDS: &[&str] = &[
    "dice",
    "rules",
    "spell",
    "monster",
    "initiative",
    "weather",
    "map",
    "loot",
    "tavern",
    "names",
    "quest",
    "travel",
    "calendar",
    "weapon",
    "armor",
    "condition",
    "music",
    "voice",
    "lore",
    "faction",
    "market",
    "inventory",
    "trap",
    "puzzle",
    "riddle",
    "dungeon",
    "forest",
    "city",
    "ship",
    "dragon",
];

/// A synthetic entry, `i` of them, shaped like a real one.
fn entry(i: usize, registry: &str, digest: &str) -> Entry {
    let w = |k: usize| WORDS[(i * 7 + k * 13) % WORDS.len()];
    Entry {
        name: format!("{}_{}_{i}", w(0), w(1)),
        version: format!("1.{}.0", i % 10),
        description: format!("{} and {} for the {} table, with {} support", w(2), w(3), w(4), w(5)),
        publisher: Publisher { key_id: format!("ed25519:{:016x}", i % 50), author: format!("author{}", i % 50) },
        tools: (0..3)
            .map(|t| EntryTool {
                name: format!("{}_{}", w(6 + t), w(7 + t)),
                description: format!(
                    "Looks up the {} of a {} by its {}; returns the {} and the {} as JSON.",
                    w(8 + t),
                    w(9 + t),
                    w(10 + t),
                    w(11 + t),
                    w(12 + t)
                ),
                tier: "FAST".into(),
                estimated_ms: 5,
                max_ms: 50,
            })
            .collect(),
        asks: EntryAsks {
            capabilities: vec!["http".into()],
            http_hosts: vec![format!("https://api{i}.example.org")],
            ..Default::default()
        },
        badge: Default::default(),
        reference: format!("oci://{registry}/bench/{}:1.0.0", w(0)),
        digest: digest.to_string(),
        published: format!("2026-11-29T00:00:{:02}Z", i % 60),
    }
}

/// An MCP session on the host's operator endpoint: `call` times one
/// `tools/call` of `roll`.
struct Mcp {
    http: reqwest::Client,
    url: String,
    session: String,
}

impl Mcp {
    async fn open(url: &str) -> Mcp {
        let http = reqwest::Client::new();
        let r = http
            .post(url)
            .header("Accept", "application/json, text/event-stream")
            .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}))
            .send()
            .await
            .unwrap();
        let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let _ = r.bytes().await;
        let mcp = Mcp { http, url: url.into(), session };
        mcp.post(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        mcp
    }

    async fn post(&self, body: serde_json::Value) -> String {
        let r = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &self.session)
            .header("MCP-Protocol-Version", "2025-11-25")
            .json(&body)
            .send()
            .await
            .unwrap();
        String::from_utf8_lossy(&r.bytes().await.unwrap()).into_owned()
    }

    async fn roll(&self) -> bool {
        let out = self
            .post(serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "roll", "arguments": {"expression": "1d6"}}}))
            .await;
        out.contains("\"isError\":false")
    }
}

fn main() {
    let bin = PathBuf::from(
        std::env::var("TOOLHOST_BIN")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/release/toolhost").to_string()),
    );
    let n = env_or("MARKET_BENCH_N", 10_000);
    let runs = env_or("MARKET_BENCH_RUNS", 30);
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    // The registry.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let registry = format!("127.0.0.1:{port}");
    std::fs::write(
        dir.join("registry.yml"),
        format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {registry}\n",
            dir.join("registry").display()
        ),
    )
    .unwrap();
    let _registry = Kill(
        Command::new("docker-registry")
            .args(["serve", dir.join("registry.yml").to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry (scripts/install-peers)"),
    );
    while std::net::TcpStream::connect(&registry).is_err() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let catalogue = format!("oci://{registry}/bench/catalogue");
    run(&bin, dir, &["keygen", "alice", "--out", "keys"]);
    std::fs::write(
        dir.join("toolhost.yaml"),
        format!(
            "trust:\n  key_files: [keys/alice.pub]\nplugins:\n  builtins: false\nmarketplace:\n  catalogues: [\"{catalogue}\"]\n  refresh_secs: 86400\n  max_entries: {}\n",
            n + 10
        ),
    )
    .unwrap();
    let dice = toolhost::builtin::BUILTINS.iter().find(|b| b.name == "diceroller").unwrap();
    std::fs::create_dir_all(dir.join("p")).unwrap();
    let file = dir.join("p/dice.wasm");
    std::fs::write(&file, dice.bytes).unwrap();
    run(&bin, dir, &["sign", file.to_str().unwrap(), "--key", "keys/alice.key", "--version", "1.0.0"]);

    // One real entry, published as an author does.
    let started = Instant::now();
    run(&bin, dir, &["publish", file.to_str().unwrap(), &format!("oci://{registry}/bench/dice:1.0.0")]);
    let publish_one = started.elapsed();

    // The rest, synthetic, four publishers at once.
    let config = toolhost::config::Config::load(&dir.join("toolhost.yaml")).unwrap();
    let store = toolhost::HostBuilder::new(config).oci_store().unwrap();
    let digest = format!("sha256:{}", "0".repeat(64));
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (store, catalogue, registry, digest) = (&store, &catalogue, &registry, &digest);
            s.spawn(move || {
                let c = Catalogues::new(store, None, 0, n + 10);
                for i in (t..n.saturating_sub(1)).step_by(4) {
                    c.publish(catalogue, &entry(i, registry, digest)).unwrap();
                }
            });
        }
    });
    let publish_rest = started.elapsed();

    // The cold read, into the local copy `search` uses.
    let catalogues = Catalogues::new(&store, Some(&dir.join("cache")), 86_400, n + 10);
    let started = Instant::now();
    let (c, report) = catalogues.read(&catalogue, true).unwrap();
    let cold = started.elapsed();
    assert_eq!(c.entries.len(), n, "{:?}", report.warnings);

    // Warm: in process, and as a user runs it.
    let queries = ["dice", "weather forecast", "initiative order", "dragon lore", "tavern names", "spell"];
    let (mut inproc, mut reads, mut ranks) = (Vec::new(), Vec::new(), Vec::new());
    let mut hits = 0;
    for i in 0..runs {
        let started = Instant::now();
        let (entries, _) = catalogues.read_all(std::slice::from_ref(&catalogue), false);
        let read = started.elapsed();
        hits += search(entries, queries[i % queries.len()]).len();
        inproc.push(started.elapsed());
        reads.push(read);
        ranks.push(started.elapsed() - read);
    }
    // The same, through the index kept beside the copy (what `toolhost
    // search` does): the newest version of each plugin, ten shown.
    let mut indexed = Vec::new();
    for i in 0..runs {
        let started = Instant::now();
        let (found, _) = catalogues.search(std::slice::from_ref(&catalogue), false, queries[i % queries.len()], 10);
        indexed.push(started.elapsed());
        assert!(!found.is_empty() || queries[i % queries.len()] == "dragon lore");
    }
    let mut process = Vec::new();
    for i in 0..runs {
        let started = Instant::now();
        let out = run(&bin, dir, &["search", queries[i % queries.len()], "--limit", "10"]);
        process.push(started.elapsed());
        assert!(out.contains("PLUGIN"), "{out}");
    }

    // Install from the catalogue to the first call, against plugin add.
    let mut serve = Command::new(&bin);
    serve
        .current_dir(dir)
        .env("TOOLHOST_STATE_DIR", dir.join("state"))
        .env("TOOLHOST_CACHE_DIR", dir.join("cache"))
        .env("RUST_LOG", "error")
        .args(["serve", "--http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = serve.spawn().unwrap();
    let mut banner = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut banner).unwrap();
    let _host = Kill(child);
    let base = banner.split_whitespace().last().unwrap().to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mcp = rt.block_on(Mcp::open(&format!("{base}/mcp")));
    let mut first = [Duration::ZERO; 2];
    let (mut install, mut add) = (Vec::new(), Vec::new());
    for round in 0..6 {
        for (k, times) in [&mut install, &mut add].into_iter().enumerate() {
            let started = Instant::now();
            match k {
                0 => run(&bin, dir, &["install", "dice"]),
                _ => run(&bin, dir, &["plugin", "add", file.to_str().unwrap()]),
            };
            assert!(rt.block_on(mcp.roll()), "the first call after {}", ["install", "plugin add"][k]);
            let took = started.elapsed();
            if round == 0 {
                first[k] = took;
            } else {
                times.push(took);
            }
            run(&bin, dir, &["plugin", "remove", "dice"]);
        }
    }
    let (install_p50, add_p50) = (pct(&mut install, 0.5), pct(&mut add, 0.5));

    println!("| What ({n} entries, {runs} runs) | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| `toolhost search`, warm (index), process included | {} | {} |",
        ms(pct(&mut process, 0.5)),
        ms(pct(&mut process, 0.99))
    );
    println!(
        "| read the warm copy + rank, in process | {} | {} |",
        ms(pct(&mut inproc, 0.5)),
        ms(pct(&mut inproc, 0.99))
    );
    println!("| of which reading the copy (JSON) | {} | {} |", ms(pct(&mut reads, 0.5)), ms(pct(&mut reads, 0.99)));
    println!("| of which ranking | {} | {} |", ms(pct(&mut ranks, 0.5)), ms(pct(&mut ranks, 0.99)));
    let (full, fast) = (pct(&mut inproc, 0.5), pct(&mut indexed, 0.5));
    println!(
        "| search through the index, in process (newest per plugin, 10 shown) | {} | {} |",
        ms(fast),
        ms(pct(&mut indexed, 0.99))
    );
    println!("| ratio index / copy + rank (p50) | {:.2} | |", fast.as_secs_f64() / full.as_secs_f64());
    println!();
    println!("| Once | Time |");
    println!("|---|---|");
    println!("| `toolhost publish` of one plugin (push + entry, process included) | {} |", ms(publish_one));
    println!(
        "| {} entries published by 4 publishers at once (library) | {} ({:.0} entries/s) |",
        n - 1,
        ms(publish_rest),
        (n - 1) as f64 / publish_rest.as_secs_f64()
    );
    println!("| cold read of the whole catalogue ({} fetched) | {} |", report.fetched, ms(cold));
    println!();
    println!("| To the first call over MCP (process included; median of 5 after the first) | first | median |");
    println!("|---|---|---|");
    println!("| `toolhost install dice` (catalogue, verify, add by digest) | {} | {} |", ms(first[0]), ms(install_p50));
    println!("| `toolhost plugin add dice.wasm` | {} | {} |", ms(first[1]), ms(add_p50));
    println!("| ratio install / plugin add | | {:.2} |", install_p50.as_secs_f64() / add_p50.as_secs_f64());
    eprintln!("({hits} hits in all)");
}
