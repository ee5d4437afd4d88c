//! The result cache: a tool that declares `cacheable_seconds > 0` and is
//! idempotent is answered from here when the same agent calls it again
//! with the same arguments (compared as canonical JSON) within that time.
//!
//! Bounded by entries and by bytes; the oldest entries go first. An entry
//! belongs to the provider instance that produced it: once a plugin is
//! swapped or an external server reconnects (either registers a new
//! provider), its old entries never answer again and are dropped on sight.

use crate::tool::{Provider, ToolOutput};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The longest a result is kept, whatever its tool declares: a day.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// What identifies a cached result: who asked, which tool, which arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    agent: Option<String>,
    tool: String,
    arguments: String,
}

#[derive(Debug)]
struct Entry {
    provider: Weak<dyn Provider>,
    output: ToolOutput,
    expires: Instant,
    bytes: usize,
    /// Matches the `order` slot that inserted it (a key re-inserted later
    /// leaves a stale slot behind).
    seq: u64,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Key, Entry>,
    order: VecDeque<(u64, Key)>,
    bytes: usize,
    seq: u64,
    hits: u64,
    misses: u64,
}

/// Hits and misses since the host started, and what the cache holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Calls answered from the cache.
    pub hits: u64,
    /// Cacheable calls that ran the tool.
    pub misses: u64,
    /// Results held.
    pub entries: usize,
    /// Their approximate size in bytes.
    pub bytes: usize,
}

/// A bounded cache of tool results.
#[derive(Debug)]
pub struct ResultCache {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
}

impl ResultCache {
    /// A cache of at most `max_entries` results and `max_bytes` bytes (0
    /// entries: nothing is ever cached).
    pub fn new(max_entries: usize, max_bytes: usize) -> ResultCache {
        ResultCache { inner: Mutex::new(Inner::default()), max_entries, max_bytes }
    }

    /// Whether a result of a tool with this metadata may be cached, and
    /// for how long: what the tool declares, at most `MAX_TTL`.
    pub fn ttl(&self, meta: &crate::tool::ToolMeta) -> Option<Duration> {
        (self.max_entries > 0 && meta.idempotent && meta.cacheable_seconds > 0)
            .then(|| Duration::from_secs(u64::from(meta.cacheable_seconds)).min(MAX_TTL))
    }

    fn key(agent: Option<&str>, tool: &str, arguments: &Value) -> Key {
        Key { agent: agent.map(str::to_string), tool: tool.to_string(), arguments: canonical_json(arguments) }
    }

    /// The cached result of `tool` with `arguments` for `agent`, produced by
    /// `provider` and still fresh. Counts a hit or a miss.
    pub fn get(
        &self,
        provider: &Arc<dyn Provider>,
        agent: Option<&str>,
        tool: &str,
        arguments: &Value,
    ) -> Option<ToolOutput> {
        let key = Self::key(agent, tool, arguments);
        let now = Instant::now();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let found = match inner.map.get(&key) {
            Some(e) if e.expires > now && Weak::ptr_eq(&e.provider, &Arc::downgrade(provider)) => {
                let mut out = e.output.clone();
                out.stats.cached = true;
                Some(out)
            }
            Some(_) => {
                // Expired, or from a provider that has since been replaced.
                if let Some(e) = inner.map.remove(&key) {
                    inner.bytes -= e.bytes;
                }
                None
            }
            None => None,
        };
        match found {
            Some(_) => inner.hits += 1,
            None => inner.misses += 1,
        }
        found
    }

    /// Keeps `output` for `ttl`, evicting the oldest entries past the bounds.
    /// A result larger than the whole cache is not kept.
    pub fn put(
        &self,
        provider: &Arc<dyn Provider>,
        agent: Option<&str>,
        tool: &str,
        arguments: &Value,
        output: &ToolOutput,
        ttl: Duration,
    ) {
        let bytes = output_bytes(output);
        if self.max_entries == 0 || bytes > self.max_bytes {
            return;
        }
        let key = Self::key(agent, tool, arguments);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.seq += 1;
        let seq = inner.seq;
        let entry = Entry {
            provider: Arc::downgrade(provider),
            output: output.clone(),
            expires: Instant::now() + ttl,
            bytes: bytes + key.arguments.len() + key.tool.len(),
            seq,
        };
        inner.bytes += entry.bytes;
        if let Some(old) = inner.map.insert(key.clone(), entry) {
            inner.bytes -= old.bytes;
        }
        inner.order.push_back((seq, key));
        while inner.map.len() > self.max_entries || inner.bytes > self.max_bytes {
            let Some((seq, key)) = inner.order.pop_front() else { break };
            if inner.map.get(&key).is_some_and(|e| e.seq == seq)
                && let Some(e) = inner.map.remove(&key)
            {
                inner.bytes -= e.bytes;
            }
        }
        // Stale slots of re-inserted keys: never more than the live entries.
        if inner.order.len() > 2 * self.max_entries.max(16) {
            let Inner { map, order, .. } = &mut *inner;
            order.retain(|(seq, key)| map.get(key).is_some_and(|e| e.seq == *seq));
        }
    }

    /// Drops every entry produced by a provider called `name` (an operator
    /// removing a plugin or a server).
    pub fn forget_provider(&self, name: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Inner { map, bytes, .. } = &mut *inner;
        map.retain(|_, e| {
            let keep = e.provider.upgrade().is_some_and(|p| p.name() != name);
            if !keep {
                *bytes -= e.bytes;
            }
            keep
        });
    }

    /// Hits, misses and what is held.
    pub fn stats(&self) -> CacheStats {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        CacheStats { hits: inner.hits, misses: inner.misses, entries: inner.map.len(), bytes: inner.bytes }
    }
}

/// `value` as JSON with every object's keys sorted, so that arguments that
/// differ only in key order are the same call.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&o[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// About how many bytes a result holds: its payloads, plus a little for
/// each block's framing.
fn output_bytes(output: &ToolOutput) -> usize {
    64 + output.content.iter().map(|c| 64 + c.len()).sum::<usize>()
        + output.structured.as_ref().map_or(0, |s| s.to_string().len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{CallContext, CallError, CallStats, Content, ProviderKind, ToolDef};
    use serde_json::json;

    #[derive(Debug)]
    struct P(&'static str);
    impl Provider for P {
        fn name(&self) -> &str {
            self.0
        }
        fn kind(&self) -> ProviderKind {
            ProviderKind::Other
        }
        fn tools(&self) -> &[ToolDef] {
            &[]
        }
        fn call(&self, _: &str, _: &Value, _: &CallContext) -> Result<ToolOutput, CallError> {
            unreachable!()
        }
    }

    fn out(text: &str) -> ToolOutput {
        ToolOutput { content: vec![Content::Text(text.into())], structured: None, stats: CallStats::default() }
    }

    #[test]
    fn canonical_json_ignores_key_order() {
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": {"d": [1, {"z": 0, "y": 1}], "c": 2}})),
            canonical_json(&json!({"a": {"c": 2, "d": [1, {"y": 1, "z": 0}]}, "b": 1}))
        );
        assert_ne!(canonical_json(&json!({"a": [1, 2]})), canonical_json(&json!({"a": [2, 1]})));
    }

    #[test]
    fn a_hit_is_marked_and_only_for_the_same_agent_provider_and_arguments() {
        let c = ResultCache::new(10, 1 << 20);
        let p: Arc<dyn Provider> = Arc::new(P("rules"));
        let args = json!({"id": "x", "n": 1});
        assert!(c.get(&p, Some("a"), "get_rule", &args).is_none());
        c.put(&p, Some("a"), "get_rule", &args, &out("fire"), Duration::from_secs(60));
        let hit = c.get(&p, Some("a"), "get_rule", &json!({"n": 1, "id": "x"})).unwrap();
        assert!(hit.stats.cached);
        assert_eq!(hit.content, out("fire").content);
        assert!(c.get(&p, Some("b"), "get_rule", &args).is_none(), "another agent");
        assert!(c.get(&p, None, "get_rule", &args).is_none(), "the operator");
        assert!(c.get(&p, Some("a"), "get_rule", &json!({"id": "y", "n": 1})).is_none());
        // A new provider of the same name (a swap, a reconnect) misses.
        let p2: Arc<dyn Provider> = Arc::new(P("rules"));
        assert!(c.get(&p2, Some("a"), "get_rule", &args).is_none());
        assert!(c.get(&p, Some("a"), "get_rule", &args).is_none(), "the stale entry was dropped");
        assert_eq!(c.stats().entries, 0);
    }

    #[test]
    fn entries_expire() {
        let c = ResultCache::new(10, 1 << 20);
        let p: Arc<dyn Provider> = Arc::new(P("rules"));
        c.put(&p, None, "t", &json!({}), &out("x"), Duration::ZERO);
        assert!(c.get(&p, None, "t", &json!({})).is_none());
    }

    #[test]
    fn bounded_by_entries_and_bytes_oldest_first() {
        let c = ResultCache::new(3, 1 << 20);
        let p: Arc<dyn Provider> = Arc::new(P("rules"));
        for i in 0..5 {
            c.put(&p, None, "t", &json!({ "i": i }), &out("x"), Duration::from_secs(60));
        }
        assert_eq!(c.stats().entries, 3);
        assert!(c.get(&p, None, "t", &json!({"i": 0})).is_none());
        assert!(c.get(&p, None, "t", &json!({"i": 4})).is_some());
        let small = ResultCache::new(100, 1000);
        small.put(&p, None, "t", &json!({}), &out(&"x".repeat(2000)), Duration::from_secs(60));
        assert_eq!(small.stats().entries, 0, "larger than the cache");
        for i in 0..20 {
            small.put(&p, None, "t", &json!({ "i": i }), &out(&"x".repeat(200)), Duration::from_secs(60));
        }
        let s = small.stats();
        assert!(s.bytes <= 1000 && s.entries >= 2, "{s:?}");
        // Re-inserting one key many times never grows the order queue without bound.
        for _ in 0..1000 {
            small.put(&p, None, "t", &json!({"same": 1}), &out("y"), Duration::from_secs(60));
        }
        assert!(small.inner.lock().unwrap().order.len() <= 2 * 100);
    }

    #[test]
    fn forgetting_a_provider_drops_its_entries() {
        let c = ResultCache::new(10, 1 << 20);
        let a: Arc<dyn Provider> = Arc::new(P("a"));
        let b: Arc<dyn Provider> = Arc::new(P("b"));
        c.put(&a, None, "t", &json!({}), &out("x"), Duration::from_secs(60));
        c.put(&b, None, "u", &json!({}), &out("x"), Duration::from_secs(60));
        c.forget_provider("a");
        assert_eq!(c.stats().entries, 1);
        assert!(c.get(&b, None, "u", &json!({})).is_some());
    }
}
