//! Rate limits: token buckets by key, and the per-agent tool-call limits
//! every call through [`crate::Host`] passes.
//!
//! What is counted where:
//! - **Tool calls**, per agent ([`CallRates`]): `npcs[].rate_limit`, else
//!   `server.rate_limit`; the operator's calls only when
//!   `server.operator_rate_limit` is set. Protocol traffic (initialize,
//!   notifications, streams, DELETE) spends nothing here.
//! - **HTTP requests per connection**, failed authentication and live
//!   sessions: see the `toolhost` crate's `mcp::http`.

use serde::Deserialize;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token bucket's settings: `per_minute` sustained, `burst` at once.
/// `per_minute: 0` turns the limit off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Allowed per minute, sustained (0: no limit).
    pub per_minute: u32,
    /// Allowed at once before the sustained rate applies.
    pub burst: u32,
    /// Whose share a tool-call limit is: each agent's, or each identity's
    /// behind an agent (a static token, an OAuth subject and client), so
    /// that two players behind one NPC do not spend each other's calls
    /// [default: agent]. Only tool-call limits read it.
    pub per: RatePer,
}

/// [`RateLimitConfig::per`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RatePer {
    /// One share per agent, whoever calls as it.
    #[default]
    Agent,
    /// One share per identity and agent; a caller without one (stdio, the
    /// loopback operator) shares the agent's.
    Identity,
}

impl RateLimitConfig {
    /// No limit.
    pub const OFF: RateLimitConfig = RateLimitConfig { per_minute: 0, burst: 0, per: RatePer::Agent };

    /// The default tool-call limit of each agent: 120 calls a minute, 20 at
    /// once. An LLM agent makes a few calls a turn; a parallel batch fits in
    /// the burst.
    pub const AGENT_DEFAULT: RateLimitConfig = RateLimitConfig { per_minute: 120, burst: 20, per: RatePer::Agent };

    /// True when this limits nothing.
    pub fn is_off(&self) -> bool {
        self.per_minute == 0
    }
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig::AGENT_DEFAULT
    }
}

impl std::fmt::Display for RateLimitConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_off() {
            f.write_str("no limit")
        } else {
            write!(f, "{} a minute, {} at once", self.per_minute, self.burst.max(1))?;
            if self.per == RatePer::Identity { f.write_str(", per identity") } else { Ok(()) }
        }
    }
}

/// Token buckets by key, each with the same settings unless a check names
/// its own. Buckets that have refilled are forgotten once there are many.
#[derive(Debug)]
pub struct Buckets<K> {
    default: RateLimitConfig,
    buckets: Mutex<HashMap<K, (f64, Instant)>>,
}

/// How many buckets a [`Buckets`] keeps before forgetting full ones.
const FORGET_AFTER: usize = 10_000;

impl<K: Eq + Hash + Clone> Buckets<K> {
    /// Buckets with `default` settings.
    pub fn new(default: RateLimitConfig) -> Buckets<K> {
        Buckets { default, buckets: Mutex::new(HashMap::new()) }
    }

    /// The settings checks use unless they name their own.
    pub fn settings(&self) -> RateLimitConfig {
        self.default
    }

    /// Takes one token from `key`'s bucket, or says how long until one is
    /// free.
    pub fn take(&self, key: &K) -> Result<(), Duration> {
        self.take_with(key, self.default)
    }

    /// [`Buckets::take`] with settings of its own. The key is copied only
    /// when its bucket is new.
    pub fn take_with<Q>(&self, key: &Q, limit: RateLimitConfig) -> Result<(), Duration>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if limit.is_off() {
            return Ok(());
        }
        let per_second = f64::from(limit.per_minute) / 60.0;
        let burst = f64::from(limit.burst.max(1));
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= FORGET_AFTER {
            let full = Duration::from_secs_f64(burst / per_second);
            buckets.retain(|_, (_, at)| now.duration_since(*at) < full);
        }
        let (tokens, at) = match buckets.get_mut(key) {
            Some(b) => b,
            None => buckets.entry(key.to_owned()).or_insert((burst, now)),
        };
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * per_second).min(burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / per_second))
        }
    }

    /// How long until `key`'s bucket has a token, when it is empty now
    /// (without taking anything).
    pub fn wait(&self, key: &K) -> Option<Duration> {
        let limit = self.default;
        if limit.is_off() {
            return None;
        }
        let per_second = f64::from(limit.per_minute) / 60.0;
        let burst = f64::from(limit.burst.max(1));
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = buckets.get(key)?;
        let tokens = (*tokens + at.elapsed().as_secs_f64() * per_second).min(burst);
        (tokens < 1.0).then(|| Duration::from_secs_f64((1.0 - tokens) / per_second))
    }
}

/// Per-agent tool-call limits.
#[derive(Debug)]
pub struct CallRates {
    /// Swapped whole by a config reload; the buckets stay.
    settings: arc_swap::ArcSwap<RateSettings>,
    /// By agent name; the operator's is "" (no agent may be named "").
    buckets: Buckets<String>,
}

#[derive(Debug)]
struct RateSettings {
    agents: RateLimitConfig,
    operator: RateLimitConfig,
    overrides: HashMap<String, RateLimitConfig>,
}

impl Default for CallRates {
    /// No limits at all (a library host; the binary applies the config's).
    fn default() -> Self {
        CallRates::new(RateLimitConfig::OFF, RateLimitConfig::OFF, HashMap::new())
    }
}

impl CallRates {
    /// `agents` for every agent without an override, `operator` for calls
    /// made as the operator.
    pub fn new(
        agents: RateLimitConfig,
        operator: RateLimitConfig,
        overrides: HashMap<String, RateLimitConfig>,
    ) -> CallRates {
        CallRates {
            settings: arc_swap::ArcSwap::from_pointee(RateSettings { agents, operator, overrides }),
            buckets: Buckets::new(RateLimitConfig::OFF),
        }
    }

    /// Replaces the limits (a config reload). Each agent keeps the tokens
    /// it has left, up to its new burst.
    pub fn reconfigure(
        &self,
        agents: RateLimitConfig,
        operator: RateLimitConfig,
        overrides: HashMap<String, RateLimitConfig>,
    ) {
        self.settings.store(std::sync::Arc::new(RateSettings { agents, operator, overrides }));
    }

    /// The limit that applies to `agent` (`None`: the operator).
    pub fn limit_for(&self, agent: Option<&str>) -> RateLimitConfig {
        let s = self.settings.load();
        match agent {
            None => s.operator,
            Some(a) => s.overrides.get(a).copied().unwrap_or(s.agents),
        }
    }

    /// Spends one call of `agent`'s budget, or says how long until one is
    /// free.
    /// With `per: identity`, `identity`'s own share of it. An OAuth
    /// identity (`oauth:SUB@ISSUER client C`) is its subject at its issuer,
    /// whichever client it uses: registering more clients buys no more.
    pub fn take(&self, agent: Option<&str>, identity: Option<&str>) -> Result<(), Duration> {
        let limit = self.limit_for(agent);
        match identity.map(|i| i.split(" client ").next().unwrap_or(i)) {
            Some(id) if limit.per == RatePer::Identity && !limit.is_off() => {
                // A NUL separates: agent names and identities hold none.
                self.buckets.take_with(format!("{}\0{id}", agent.unwrap_or("")).as_str(), limit)
            }
            _ => self.buckets.take_with(agent.unwrap_or(""), limit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_sustained_rate() {
        let b = Buckets::new(RateLimitConfig { per_minute: 60, burst: 10, per: RatePer::Agent });
        for _ in 0..10 {
            assert!(b.take(&"a").is_ok());
        }
        let wait = b.take(&"a").unwrap_err();
        assert!(wait <= Duration::from_secs(1) && wait > Duration::from_millis(900), "{wait:?}");
        assert!(b.wait(&"a").is_some_and(|w| w <= wait));
        assert!(b.take(&"b").is_ok(), "buckets are per key");
        assert!(b.wait(&"b").is_none());
        assert!(Buckets::new(RateLimitConfig::OFF).take(&"x").is_ok(), "0 turns the limit off");
    }

    #[test]
    fn per_identity_each_identity_has_its_own_share_of_the_agents_limit() {
        let rates = CallRates::new(
            RateLimitConfig { per_minute: 60, burst: 2, per: RatePer::Identity },
            RateLimitConfig::OFF,
            HashMap::new(),
        );
        for _ in 0..2 {
            rates.take(Some("lyra"), Some("alice")).unwrap();
        }
        assert!(rates.take(Some("lyra"), Some("alice")).is_err(), "alice spent hers");
        rates.take(Some("lyra"), Some("bob")).unwrap();
        rates.take(Some("lyra"), None).unwrap();
        let carol = |client: &str| format!("oauth:carol@https://id client {client}");
        rates.take(Some("lyra"), Some(&carol("a"))).unwrap();
        rates.take(Some("lyra"), Some(&carol("b"))).unwrap();
        assert!(rates.take(Some("lyra"), Some(&carol("c"))).is_err(), "one subject, however many clients");
        let shared = CallRates::new(
            RateLimitConfig { per_minute: 60, burst: 2, per: RatePer::Agent },
            RateLimitConfig::OFF,
            HashMap::new(),
        );
        shared.take(Some("lyra"), Some("alice")).unwrap();
        shared.take(Some("lyra"), Some("bob")).unwrap();
        assert!(shared.take(Some("lyra"), Some("carol")).is_err(), "per agent, one share");
    }

    #[test]
    fn agents_have_their_own_limits_and_the_operator_none_by_default() {
        let slow = RateLimitConfig { per_minute: 60, burst: 2, per: RatePer::Agent };
        let rates = CallRates::new(
            RateLimitConfig { per_minute: 60, burst: 3, per: RatePer::Agent },
            RateLimitConfig::OFF,
            HashMap::from([("bartok".to_string(), slow)]),
        );
        for _ in 0..2 {
            rates.take(Some("bartok"), None).unwrap();
        }
        assert!(rates.take(Some("bartok"), None).is_err(), "bartok's own limit");
        for _ in 0..3 {
            rates.take(Some("mira"), None).unwrap();
        }
        assert!(rates.take(Some("mira"), None).is_err(), "the default limit");
        for _ in 0..1000 {
            rates.take(None, None).unwrap();
        }
    }

    #[test]
    fn a_reload_changes_the_limits_and_keeps_what_was_spent() {
        let rates = CallRates::new(
            RateLimitConfig { per_minute: 60, burst: 3, per: RatePer::Agent },
            RateLimitConfig::OFF,
            HashMap::new(),
        );
        for _ in 0..3 {
            rates.take(Some("mira"), None).unwrap();
        }
        assert!(rates.take(Some("mira"), None).is_err());
        rates.reconfigure(
            RateLimitConfig { per_minute: 60, burst: 10, per: RatePer::Agent },
            RateLimitConfig { per_minute: 60, burst: 1, per: RatePer::Agent },
            HashMap::from([("bartok".to_string(), RateLimitConfig::OFF)]),
        );
        assert!(rates.take(Some("mira"), None).is_err(), "the spent tokens stay spent across a reload");
        assert_eq!(rates.limit_for(Some("mira")).burst, 10);
        for _ in 0..100 {
            rates.take(Some("bartok"), None).unwrap();
        }
        rates.take(None, None).unwrap();
        assert!(rates.take(None, None).is_err(), "the operator's new limit applies");
    }
}
