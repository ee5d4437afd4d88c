//! The call pipeline's counters: calls by tool, agent and outcome, and
//! latency by tool, recorded with atomics on the call path and read whole
//! at scrape time ([`CallMetrics::totals`]). The `toolhost` crate encodes
//! them for Prometheus at `/metrics`.
//!
//! Labels stay bounded: a tool label is a registered tool's name (a call to
//! a name the registry does not have is counted as `(unknown)`, and past
//! [`MAX_TOOLS`] names every new one is `(other)`); an agent label is an
//! agent of the config, `(operator)`, or `(other)`; outcomes are a fixed
//! set. Nothing else reaches a label: never arguments, tokens or results.

use crate::runtime::stripes::Striped;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
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
pub const OUTCOMES: [&str; 18] = [
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
    "table_limit",
    "stack_overflow",
    "guest_panic",
    "output_too_large",
    "trap",
    "unavailable",
    "capacity_exceeded",
    "cancelled",
];

/// Upper bounds of the latency buckets, in seconds (the tiers' ceilings
/// fall between them).
pub const BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// One copy of a tool's latency counters: each counter is striped, one
/// copy per caller thread (round robin), so calls on different cores never
/// write the same cache line; a scrape adds the copies up.
#[derive(Debug, Default)]
struct LatencyStripe {
    /// Per bucket (not cumulative), then one past the last bound.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

#[derive(Debug, Default)]
struct Latency {
    stripes: Striped<LatencyStripe>,
}

/// A latency histogram as read at scrape time.
#[derive(Debug, Clone)]
pub struct LatencyTotals {
    /// Calls per bucket of [`BUCKETS`] (not cumulative), then past the last bound.
    pub buckets: [u64; BUCKETS.len() + 1],
    /// Calls observed.
    pub count: u64,
    /// Their summed duration, in microseconds.
    pub sum_micros: u64,
}

impl Latency {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS.iter().position(|b| secs <= *b).unwrap_or(BUCKETS.len());
        let s = self.stripes.local();
        s.buckets[i].fetch_add(1, Ordering::Relaxed);
        s.count.fetch_add(1, Ordering::Relaxed);
        s.sum_micros.fetch_add(d.as_micros().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    fn totals(&self) -> LatencyTotals {
        let mut t = LatencyTotals { buckets: [0; BUCKETS.len() + 1], count: 0, sum_micros: 0 };
        for s in self.stripes.iter() {
            for (b, n) in t.buckets.iter_mut().zip(&s.buckets) {
                *b += n.load(Ordering::Relaxed);
            }
            t.count += s.count.load(Ordering::Relaxed);
            t.sum_micros = t.sum_micros.wrapping_add(s.sum_micros.load(Ordering::Relaxed));
        }
        t
    }
}

/// Calls by outcome for one tool and agent, striped.
#[derive(Debug, Default)]
struct Counts(Striped<[AtomicU64; OUTCOMES.len()]>);

impl Counts {
    fn add(&self, outcome: usize) {
        self.0.local()[outcome].fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self, outcome: usize) -> u64 {
        self.0.iter().map(|s| s[outcome].load(Ordering::Relaxed)).sum()
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
/// [`Striped`]), so it costs the same with one caller or many.
#[derive(Debug, Default)]
pub struct CallMetrics {
    tools: ReadMostly<ToolCells>,
}

fn outcome_index(outcome: &str) -> usize {
    OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(OUTCOMES.iter().position(|o| *o == "failed").unwrap_or(0))
}

impl CallMetrics {
    /// Counts one call. `tool` and `agent` are labels already bounded by
    /// the caller ([`crate::Host`] passes a registered name or [`UNKNOWN_TOOL`],
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

/// One tool's counters as read at scrape time.
#[derive(Debug, Clone)]
pub struct ToolTotals {
    /// The tool label.
    pub tool: String,
    /// Calls per agent label, by outcome (indexed as [`OUTCOMES`]).
    pub calls: Vec<(String, [u64; OUTCOMES.len()])>,
    /// The tool's latency histogram.
    pub latency: LatencyTotals,
}

impl CallMetrics {
    /// Every tool's counters now, summed over the stripes.
    pub fn totals(&self) -> Vec<ToolTotals> {
        self.tools
            .entries()
            .into_iter()
            .map(|(tool, cells)| ToolTotals {
                tool,
                calls: cells
                    .by_agent
                    .entries()
                    .into_iter()
                    .map(|(agent, counts)| (agent, std::array::from_fn(|i| counts.get(i))))
                    .collect(),
                latency: cells.latency.totals(),
            })
            .collect()
    }
}

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
        let (threads, each) = (2 * crate::runtime::stripes::STRIPES + 3, 1_000u64);
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
