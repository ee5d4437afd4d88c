//! Helpers for tests against a running `toolhost serve --http`: the
//! process guard, start-up, an MCP client that counts
//! `tools/list_changed`, and bounded polling.

use crate::common::toolhost;
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A child process killed (and reaped) on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` (a `toolhost serve --http 127.0.0.1:0`) and returns it with
/// the base URL from its banner. Its stdout keeps being drained.
pub fn spawn_serving(cmd: std::process::Command) -> (Proc, String) {
    spawn_serving_logged(cmd, Stdio::null())
}

/// [`spawn_serving`], its log (stderr) going to `log`.
pub fn spawn_serving_logged(mut cmd: std::process::Command, log: impl Into<Stdio>) -> (Proc, String) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(log).spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    std::thread::spawn(move || for _ in out.lines() {});
    let url = first.split_whitespace().last().unwrap_or_else(|| panic!("banner: {first}")).to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "banner: {first}");
    (Proc(child), url)
}

/// `toolhost serve --http 127.0.0.1:0` in `dir` (its toolhost.yaml, state in `dir/state`).
pub fn serve(dir: &Path) -> (Proc, String) {
    let mut cmd = toolhost();
    cmd.current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(["serve", "--http", "127.0.0.1:0"]);
    spawn_serving(cmd)
}

/// Counts `notifications/tools/list_changed`.
#[derive(Clone, Default)]
pub struct Watcher(pub Arc<AtomicUsize>);

impl ClientHandler for Watcher {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// An MCP client session over streamable HTTP.
pub type Client = RunningService<RoleClient, Watcher>;

/// Connects to `<url>/mcp`; returns the session and its list_changed count.
pub async fn connect(url: &str) -> (Client, Arc<AtomicUsize>) {
    let w = Watcher::default();
    let count = w.0.clone();
    (w.serve(StreamableHttpClientTransport::from_uri(format!("{url}/mcp"))).await.expect("initialize"), count)
}

/// The tool names the session sees.
pub async fn names(c: &Client) -> Vec<String> {
    c.list_all_tools().await.unwrap().iter().map(|t| t.name.to_string()).collect()
}

/// Polls `f` every 100 ms until it holds; fails after 30 s.
pub async fn eventually<F: AsyncFn() -> bool>(what: &str, f: F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Calls of `plugin` running now on the host at `url`
/// (`toolhost_plugin_instances_in_use` of its `/metrics`, read as the
/// operator: the same Unix user on loopback).
pub async fn running(url: &str, plugin: &str) -> u64 {
    let text = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    let series = format!("toolhost_plugin_instances_in_use{{plugin=\"{plugin}\"}} ");
    let line = text.lines().find_map(|l| l.strip_prefix(series.as_str()));
    line.unwrap_or_else(|| panic!("no {series}in:\n{text}")).trim().parse().unwrap()
}

/// Waits until the log at `path` has a line containing `what` (bounded as
/// [`eventually`]).
pub async fn logged(path: &Path, what: &str) {
    eventually(&format!("{what:?} in the log"), async || {
        std::fs::read_to_string(path).is_ok_and(|log| log.contains(what))
    })
    .await;
}

/// An operator command against the host serving from `dir`.
pub fn admin(dir: &Path, args: &[&str]) -> std::process::Output {
    toolhost().current_dir(dir).env("TOOLHOST_STATE_DIR", dir.join("state")).args(args).output().unwrap()
}

/// Copies `from` to `to` atomically (a temp file, then a rename).
pub fn place(from: &str, to: &Path) {
    let tmp = to.with_extension("tmp-copy");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

/// Waits (at most 120 s) until every plugin of the host serving from `dir`
/// runs its optimized code: what a test measuring the host's memory
/// needs, so that a background compile does not count as a call's.
pub fn optimized(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let o = admin(dir, &["status", "--json"]);
        let status: Option<serde_json::Value> = serde_json::from_slice(&o.stdout).ok().filter(|_| o.status.success());
        let providers = status.as_ref().and_then(|s| s["providers"].as_array());
        if providers.is_some_and(|ps| ps.iter().all(|p| p["code"] != "fast")) {
            return;
        }
        assert!(Instant::now() < deadline, "plugins still on quick-compiled code after 120 s: {status:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
