//! Prometheus metrics: what the call pipeline counts (calls by tool, agent
//! and outcome; latency by tool), recorded with atomics on the call path,
//! and what is read at scrape time (demoted tools, the result cache,
//! instance slots in use, upstream servers). [`render`] writes them in the
//! OpenMetrics text format (which Prometheus scrapes) through
//! `prometheus-client`; the HTTP front serves them at `/metrics`.
//!
//! Labels stay bounded: a tool label is a registered tool's name (a call to
//! a name the registry does not have is counted as `(unknown)`, and past
//! [`MAX_TOOLS`] names every new one is `(other)`); an agent label is an
//! agent of the config, `(operator)`, or `(other)`; outcomes are a fixed
//! set. Nothing else reaches a label: never arguments, tokens or results.

use crate::Host;
use crate::mcp::ExternalServers;
use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most distinct tool labels; later names are counted as `(other)`.
pub const MAX_TOOLS: usize = 512;
/// The tool label of calls to names no provider has.
pub const UNKNOWN_TOOL: &str = "(unknown)";
/// The label of names past the caps.
pub const OTHER: &str = "(other)";
/// The agent label of the operator's calls.
pub const OPERATOR: &str = "(operator)";

/// Every outcome label: `ok`, `refused` (not visible to the caller) and
/// each [`crate::tool::CallError::kind`].
pub const OUTCOMES: [&str; 16] = [
    "ok",
    "refused",
    "unknown_tool",
    "invalid_input",
    "not_found",
    "forbidden",
    "failed",
    "timeout",
    "out_of_fuel",
    "memory_limit",
    "stack_overflow",
    "guest_panic",
    "output_too_large",
    "trap",
    "unavailable",
    "capacity_exceeded",
];

/// Upper bounds of the latency buckets, in seconds (the tiers' ceilings
/// fall between them).
pub const BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Copies of each counter, one per caller thread (round robin): a call
/// adds to its thread's copy, so calls on different cores never write the
/// same cache line; a scrape adds the copies up.
const STRIPES: usize = 16;

/// A value on cache lines of its own (128 bytes: x86 prefetches lines in
/// pairs).
#[repr(align(128))]
#[derive(Debug, Default)]
struct Padded<T>(T);

/// This thread's stripe, given out round robin on first use.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

#[derive(Debug, Default)]
struct LatencyStripe {
    /// Per bucket (not cumulative), then one past the last bound.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

#[derive(Debug, Default)]
struct Latency {
    stripes: [Padded<LatencyStripe>; STRIPES],
}

/// A latency histogram as read at scrape time.
struct LatencyTotals {
    buckets: [u64; BUCKETS.len() + 1],
    count: u64,
    sum_micros: u64,
}

impl Latency {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS.iter().position(|b| secs <= *b).unwrap_or(BUCKETS.len());
        let s = &self.stripes[stripe()].0;
        s.buckets[i].fetch_add(1, Ordering::Relaxed);
        s.count.fetch_add(1, Ordering::Relaxed);
        s.sum_micros.fetch_add(d.as_micros().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    fn totals(&self) -> LatencyTotals {
        let mut t = LatencyTotals { buckets: [0; BUCKETS.len() + 1], count: 0, sum_micros: 0 };
        for s in &self.stripes {
            for (b, n) in t.buckets.iter_mut().zip(&s.0.buckets) {
                *b += n.load(Ordering::Relaxed);
            }
            t.count += s.0.count.load(Ordering::Relaxed);
            t.sum_micros = t.sum_micros.wrapping_add(s.0.sum_micros.load(Ordering::Relaxed));
        }
        t
    }
}

/// Calls by outcome for one tool and agent, striped.
#[derive(Debug, Default)]
struct Counts([Padded<[AtomicU64; OUTCOMES.len()]>; STRIPES]);

impl Counts {
    fn add(&self, outcome: usize) {
        self.0[stripe()].0[outcome].fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self, outcome: usize) -> u64 {
        self.0.iter().map(|s| s.0[outcome].load(Ordering::Relaxed)).sum()
    }
}

/// A map read on every call and written once per new key: readers load a
/// snapshot (no lock, no shared write), a writer copies it with the key
/// added, under a lock only writers take.
#[derive(Debug)]
struct ReadMostly<V> {
    map: ArcSwap<HashMap<Box<str>, Arc<V>>>,
    writer: Mutex<()>,
}

impl<V> Default for ReadMostly<V> {
    fn default() -> Self {
        ReadMostly { map: ArcSwap::from_pointee(HashMap::new()), writer: Mutex::new(()) }
    }
}

impl<V: Default> ReadMostly<V> {
    /// Runs `f` on the value of `key`, adding it first when missing (as
    /// `cap_key` when there are `cap` keys already).
    fn with<R>(&self, key: &str, cap: Option<(usize, &str)>, f: impl FnOnce(&V) -> R) -> R {
        if let Some(v) = self.map.load().get(key) {
            return f(v);
        }
        let _w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let cur = self.map.load_full();
        let key = match cap {
            Some((cap, other)) if cur.len() >= cap && !cur.contains_key(key) => other,
            _ => key,
        };
        let v = match cur.get(key) {
            Some(v) => v.clone(),
            None => {
                let v = Arc::new(V::default());
                let mut next = (*cur).clone();
                next.insert(key.into(), v.clone());
                self.map.store(Arc::new(next));
                v
            }
        };
        f(&v)
    }

    /// The entries now.
    fn entries(&self) -> Vec<(String, Arc<V>)> {
        self.map.load().iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }
}

#[derive(Debug, Default)]
struct ToolCells {
    by_agent: ReadMostly<Counts>,
    latency: Latency,
}

/// The call pipeline's counters (see the module docs). Recording takes no
/// lock and writes only the calling thread's copy of each counter (see
/// `STRIPES`), so it costs the same with one caller or many.
#[derive(Debug, Default)]
pub struct CallMetrics {
    tools: ReadMostly<ToolCells>,
}

fn outcome_index(outcome: &str) -> usize {
    OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(OUTCOMES.iter().position(|o| *o == "failed").unwrap_or(0))
}

impl CallMetrics {
    /// Counts one call. `tool` and `agent` are labels already bounded by
    /// the caller ([`Host`] passes a registered name or [`UNKNOWN_TOOL`],
    /// a configured agent, [`OPERATOR`] or [`OTHER`]); `duration` is
    /// observed for calls that reached a provider.
    pub fn record(&self, tool: &str, agent: &str, outcome: &str, duration: Option<Duration>) {
        self.tools.with(tool, Some((MAX_TOOLS, OTHER)), |cells| {
            cells.by_agent.with(agent, None, |counts| counts.add(outcome_index(outcome)));
            if let Some(d) = duration {
                cells.latency.observe(d);
            }
        });
    }

    /// Calls counted for `tool` (all agents, all outcomes): for tests.
    pub fn calls(&self, tool: &str) -> u64 {
        self.tools.map.load().get(tool).map_or(0, |c| {
            c.by_agent.entries().iter().map(|(_, counts)| (0..OUTCOMES.len()).map(|i| counts.get(i)).sum::<u64>()).sum()
        })
    }
}

/// Everything a scrape reads: the host and its external servers.
#[derive(Debug)]
struct Scrape {
    host: Arc<Host>,
    servers: Option<Arc<ExternalServers>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct CallLabels {
    tool: String,
    agent: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ServerLabels {
    server: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ServerLabel {
    server: String,
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let host = &self.host;
        // Calls, by tool, agent and outcome; latency by tool.
        let tools: Vec<(String, Arc<ToolCells>)> = host.metrics().tools.entries();
        {
            let mut calls = encoder.encode_descriptor(
                "toolhost_tool_calls",
                "Tool calls by tool, agent and outcome (ok, refused, timeout, capacity_exceeded, ...)",
                None,
                MetricType::Counter,
            )?;
            for (tool, cells) in &tools {
                for (agent, counts) in cells.by_agent.entries() {
                    for (i, outcome) in OUTCOMES.iter().enumerate() {
                        let n = counts.get(i);
                        if n > 0 {
                            let labels = CallLabels { tool: tool.clone(), agent: agent.clone(), outcome };
                            ConstCounter::new(n).encode(calls.encode_family(&labels)?)?;
                        }
                    }
                }
            }
        }
        {
            let mut latency = encoder.encode_descriptor(
                "toolhost_tool_call_duration_seconds",
                "How long tool calls took, from the host's view (queueing, validation and the provider)",
                None,
                MetricType::Histogram,
            )?;
            for (tool, cells) in &tools {
                let l = cells.latency.totals();
                if l.count == 0 {
                    continue;
                }
                // Per bucket: the encoder adds them up.
                let mut buckets: Vec<(f64, u64)> =
                    BUCKETS.iter().enumerate().map(|(i, b)| (*b, l.buckets[i])).collect();
                buckets.push((f64::INFINITY, l.buckets[BUCKETS.len()]));
                let total: u64 = buckets.iter().map(|(_, n)| n).sum();
                let sum = l.sum_micros as f64 / 1e6;
                latency
                    .encode_family(&ToolLabel { tool: tool.clone() })?
                    .encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, total, &buckets, None)?;
            }
        }
        // Health demotion, now.
        let catalog = host.registry().snapshot();
        {
            let mut demoted = encoder.encode_descriptor(
                "toolhost_tool_demoted",
                "1 for a tool moved one tier slower by its error and timeout rate",
                None,
                MetricType::Gauge,
            )?;
            for t in catalog.tools().take(MAX_TOOLS) {
                let d = i64::from(host.budget().status(&t.def).demoted);
                ConstGauge::new(d).encode(demoted.encode_family(&ToolLabel { tool: t.def.name.clone() })?)?;
            }
        }
        // The result cache.
        let cache = host.result_cache().stats();
        let counter = |enc: &mut DescriptorEncoder, name, help, v: u64| -> Result<(), std::fmt::Error> {
            ConstCounter::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
        };
        let gauge = |enc: &mut DescriptorEncoder, name, help, v: i64| -> Result<(), std::fmt::Error> {
            ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
        };
        counter(&mut encoder, "toolhost_result_cache_hits", "Calls answered from the result cache", cache.hits)?;
        counter(&mut encoder, "toolhost_result_cache_misses", "Cacheable calls that ran the tool", cache.misses)?;
        gauge(&mut encoder, "toolhost_result_cache_entries", "Results held", cache.entries as i64)?;
        gauge(&mut encoder, "toolhost_result_cache_bytes", "Approximate size of the results held", cache.bytes as i64)?;
        // Instance slots per plugin.
        {
            let plugins: Vec<(String, u32, u32)> = catalog
                .providers()
                .filter_map(|p| {
                    let any: &dyn std::any::Any = &**p;
                    let w = any.downcast_ref::<crate::runtime::WasmPlugin>()?;
                    let (busy, limit) = w.calls_in_flight();
                    Some((p.name().to_string(), busy, limit))
                })
                .collect();
            {
                let mut in_use = encoder.encode_descriptor(
                    "toolhost_plugin_instances_in_use",
                    "Calls running now per plugin (limits.plugin_concurrency slots taken)",
                    None,
                    MetricType::Gauge,
                )?;
                for (name, busy, _) in &plugins {
                    ConstGauge::new(i64::from(*busy))
                        .encode(in_use.encode_family(&PluginLabel { plugin: name.clone() })?)?;
                }
            }
            let mut limit = encoder.encode_descriptor(
                "toolhost_plugin_instances_limit",
                "Concurrent calls allowed per plugin (limits.plugin_concurrency)",
                None,
                MetricType::Gauge,
            )?;
            for (name, _, l) in &plugins {
                ConstGauge::new(i64::from(*l)).encode(limit.encode_family(&PluginLabel { plugin: name.clone() })?)?;
            }
        }
        // Upstream servers.
        if let Some(servers) = &self.servers {
            let status = servers.status();
            {
                let mut state = encoder.encode_descriptor(
                    "toolhost_upstream_state",
                    "1 for each external MCP server's current state (connecting, up, down)",
                    None,
                    MetricType::Gauge,
                )?;
                for s in &status {
                    for st in ["connecting", "up", "down"] {
                        let labels = ServerLabels { server: s.name.clone(), state: st.to_string() };
                        ConstGauge::new(i64::from(s.state == st)).encode(state.encode_family(&labels)?)?;
                    }
                }
            }
            {
                let mut conns = encoder.encode_descriptor(
                    "toolhost_upstream_connections",
                    "Successful connections to each external MCP server (above 1: it reconnected)",
                    None,
                    MetricType::Counter,
                )?;
                for s in &status {
                    ConstCounter::new(u64::from(s.connections))
                        .encode(conns.encode_family(&ServerLabel { server: s.name.clone() })?)?;
                }
            }
            let mut tools = encoder.encode_descriptor(
                "toolhost_upstream_tools",
                "Tools each external MCP server has registered",
                None,
                MetricType::Gauge,
            )?;
            for s in &status {
                ConstGauge::new(s.tools.len() as i64)
                    .encode(tools.encode_family(&ServerLabel { server: s.name.clone() })?)?;
            }
        }
        Ok(())
    }
}

/// The metrics of `host` (and its external servers), in the OpenMetrics
/// text format, ending with `# EOF`.
pub fn render(host: Arc<Host>, servers: Option<Arc<ExternalServers>>) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Scrape { host, servers }));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_labels_are_capped() {
        let m = CallMetrics::default();
        for i in 0..MAX_TOOLS + 10 {
            m.record(&format!("t{i}"), OPERATOR, "ok", None);
        }
        assert_eq!(m.tools.map.load().len(), MAX_TOOLS + 1);
        assert_eq!(m.calls(OTHER), 10);
    }

    #[test]
    fn recordings_from_many_threads_add_up() {
        let m = CallMetrics::default();
        let (threads, each) = (2 * STRIPES + 3, 1_000u64);
        std::thread::scope(|s| {
            for t in 0..threads {
                let m = &m;
                s.spawn(move || {
                    for _ in 0..each {
                        m.record(
                            "roll",
                            if t % 2 == 0 { OPERATOR } else { "npc" },
                            "ok",
                            Some(Duration::from_millis(3)),
                        );
                    }
                });
            }
        });
        assert_eq!(m.calls("roll"), threads as u64 * each);
        let tools = m.tools.entries();
        let latency = tools[0].1.latency.totals();
        assert_eq!(latency.count, threads as u64 * each);
        assert_eq!(latency.buckets[BUCKETS.iter().position(|b| *b == 0.005).unwrap()], latency.count);
    }

    #[test]
    fn every_recording_is_counted_once() {
        // What a recording costs is measured by a benchmark, not asserted
        // here (BENCHMARKS.md); this checks only that none is lost.
        let m = CallMetrics::default();
        let n: u64 = 10_000;
        for _ in 0..n {
            m.record("roll", OPERATOR, "ok", Some(Duration::from_micros(700)));
        }
        assert_eq!(m.calls("roll"), n);
    }
}
