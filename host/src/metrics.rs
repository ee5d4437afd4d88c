//! Prometheus metrics: the call pipeline's counters
//! ([`toolhost_core::counters`]: calls by tool, agent and outcome; latency
//! by tool) and what is read at scrape time (demoted tools, the result
//! cache, instance slots in use, upstream servers, the voice relay's
//! sessions and what they hold). [`render`] writes them
//! in the OpenMetrics text format (which Prometheus scrapes) through
//! `prometheus-client`; the HTTP front serves them at `/metrics`.

use crate::Host;
use crate::bridge::relay::Relay;
use crate::mcp_client::ExternalServers;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::sync::Arc;
pub use toolhost_core::counters::{BUCKETS, CallMetrics, MAX_TOOLS, OPERATOR, OTHER, OUTCOMES, UNKNOWN_TOOL};

/// Everything a scrape reads: the host, its external servers and its
/// voice relay.
#[derive(Debug)]
struct Scrape {
    host: Arc<Host>,
    servers: Option<Arc<ExternalServers>>,
    voice: Option<Arc<Relay>>,
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
        let tools = host.pipeline().metrics().totals();
        {
            let mut calls = encoder.encode_descriptor(
                "toolhost_tool_calls",
                "Tool calls by tool, agent and outcome (ok, refused, timeout, capacity_exceeded, ...)",
                None,
                MetricType::Counter,
            )?;
            for t in &tools {
                for (agent, counts) in &t.calls {
                    for (n, outcome) in counts.iter().copied().zip(OUTCOMES) {
                        if n > 0 {
                            let labels = CallLabels { tool: t.tool.clone(), agent: agent.clone(), outcome };
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
            for t in &tools {
                let l = &t.latency;
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
                    .encode_family(&ToolLabel { tool: t.tool.clone() })?
                    .encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, total, &buckets, None)?;
            }
        }
        // Health demotion, now.
        let catalog = host.pipeline().registry().snapshot();
        {
            let mut demoted = encoder.encode_descriptor(
                "toolhost_tool_demoted",
                "How many callers (agents, the operator) see the tool moved one tier slower by their own calls' error and timeout rate",
                None,
                MetricType::Gauge,
            )?;
            for t in catalog.tools().take(MAX_TOOLS) {
                let d = i64::try_from(host.pipeline().budget().status(&t.def).demoted_for).unwrap_or(i64::MAX);
                ConstGauge::new(d).encode(demoted.encode_family(&ToolLabel { tool: t.def.name.clone() })?)?;
            }
        }
        // The result cache.
        let cache = host.pipeline().result_cache().stats();
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
        // The voice relay.
        if let Some(relay) = &self.voice {
            gauge(&mut encoder, "toolhost_voice_sessions", "Voice sessions relayed now", relay.open_sessions() as i64)?;
            gauge(
                &mut encoder,
                "toolhost_voice_buffered_bytes",
                "What all voice sessions' queues hold now (each message counting 128 bytes more than its payload)",
                relay.buffered_bytes() as i64,
            )?;
        }
        Ok(())
    }
}

/// The metrics of `host` (and its external servers), in the OpenMetrics
/// text format, ending with `# EOF`.
pub fn render(host: Arc<Host>, servers: Option<Arc<ExternalServers>>, voice: Option<Arc<Relay>>) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Scrape { host, servers, voice }));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
