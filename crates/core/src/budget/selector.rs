//! The tier selector: cheap heuristics (no model calls) that pick a latency
//! tier for each utterance, in the seed's priority order:
//!
//! 1. an explicit DM override wins unconditionally;
//! 2. a DEEP keyword gives DEEP, demoted to STANDARD when a DEEP selection
//!    happened less than `min_deep_interval` ago (anti-spam);
//! 3. a queue of `queue_threshold` or more waiting players gives FAST
//!    (beats STANDARD keywords, not DEEP ones);
//! 4. a STANDARD keyword gives STANDARD;
//! 5. the first turn of a conversation gives STANDARD;
//! 6. otherwise FAST.
//!
//! Keywords match case-insensitively on word boundaries ("rules" matches
//! "the Rules?" but not "overrules").

use super::Tier;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A source of the current time, injectable for tests.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock(Mutex<Instant>);

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock(Mutex::new(Instant::now()))
    }
}

impl ManualClock {
    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Selector settings (the seed's options).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SelectorConfig {
    /// Phrases that ask for deliberate, slow work.
    pub deep_keywords: Vec<String>,
    /// Phrases that ask for memory or rules.
    pub standard_keywords: Vec<String>,
    /// Shortest time between two DEEP selections, in seconds.
    pub min_deep_interval_secs: u64,
    /// Waiting players at which FAST is forced.
    pub queue_threshold: u32,
}

impl Default for SelectorConfig {
    fn default() -> Self {
        let s = |v: &[&str]| v.iter().map(|k| k.to_string()).collect();
        SelectorConfig {
            deep_keywords: s(&["think carefully", "take your time", "deep search", "generate image", "search the web"]),
            standard_keywords: s(&["remember", "last time", "rules", "rule", "quest", "who is", "tell me about"]),
            min_deep_interval_secs: 30,
            queue_threshold: 3,
        }
    }
}

/// What the selector knows about the turn besides the words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Turn {
    /// A DM override, if one is in force.
    pub dm_override: Option<Tier>,
    /// Players waiting for a response.
    pub queue_depth: u32,
    /// The first turn of the conversation.
    pub first_turn: bool,
}

/// Which rule decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Rule 1.
    DmOverride,
    /// Rule 2, with the keyword.
    DeepKeyword(String),
    /// Rule 2's anti-spam demotion, with the keyword and the time since the last DEEP selection.
    DeepDemoted(String, Duration),
    /// Rule 3, with the queue depth.
    QueueDepth(u32),
    /// Rule 4, with the keyword.
    StandardKeyword(String),
    /// Rule 5.
    FirstTurn,
    /// Rule 6.
    Default,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::DmOverride => write!(f, "DM override"),
            Reason::DeepKeyword(k) => write!(f, "DEEP keyword {k:?}"),
            Reason::DeepDemoted(k, ago) => write!(
                f,
                "DEEP keyword {k:?}, demoted to STANDARD: the last DEEP selection was {:.1} s ago",
                ago.as_secs_f64()
            ),
            Reason::QueueDepth(n) => write!(f, "{n} players waiting"),
            Reason::StandardKeyword(k) => write!(f, "STANDARD keyword {k:?}"),
            Reason::FirstTurn => write!(f, "first turn of the conversation"),
            Reason::Default => write!(f, "no trigger: default"),
        }
    }
}

/// The selector's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The tier chosen.
    pub tier: Tier,
    /// Why.
    pub reason: Reason,
}

/// Keywords as word sequences, for boundary-respecting matching.
#[derive(Debug, Clone)]
struct Keywords(Vec<(String, Vec<String>)>);

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

impl Keywords {
    fn new(list: &[String]) -> Keywords {
        Keywords(list.iter().map(|k| (k.clone(), words(k))).filter(|(_, w)| !w.is_empty()).collect())
    }

    fn find(&self, utterance: &[String]) -> Option<&str> {
        self.0.iter().find(|(_, kw)| utterance.windows(kw.len()).any(|w| w == kw.as_slice())).map(|(k, _)| k.as_str())
    }
}

/// A tier selector for one conversation (one agent): it remembers when it
/// last chose DEEP.
#[derive(Debug, Clone)]
pub struct Selector {
    deep: Keywords,
    standard: Keywords,
    min_deep_interval: Duration,
    queue_threshold: u32,
    clock: Arc<dyn Clock>,
    last_deep: Arc<Mutex<Option<Instant>>>,
}

impl Selector {
    /// A selector with `config` and the system clock.
    pub fn new(config: &SelectorConfig) -> Selector {
        Selector::with_clock(config, Arc::new(SystemClock))
    }

    /// A selector with an injected clock.
    pub fn with_clock(config: &SelectorConfig, clock: Arc<dyn Clock>) -> Selector {
        Selector {
            deep: Keywords::new(&config.deep_keywords),
            standard: Keywords::new(&config.standard_keywords),
            min_deep_interval: Duration::from_secs(config.min_deep_interval_secs),
            queue_threshold: config.queue_threshold,
            clock,
            last_deep: Arc::new(Mutex::new(None)),
        }
    }

    /// Picks the tier for `utterance`.
    pub fn select(&self, utterance: &str, turn: Turn) -> Selection {
        if let Some(tier) = turn.dm_override {
            return Selection { tier, reason: Reason::DmOverride };
        }
        let said = words(utterance);
        if let Some(k) = self.deep.find(&said) {
            let now = self.clock.now();
            let mut last = self.last_deep.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(ago) = last.map(|t| now.saturating_duration_since(t))
                && ago < self.min_deep_interval
            {
                return Selection { tier: Tier::Standard, reason: Reason::DeepDemoted(k.to_string(), ago) };
            }
            *last = Some(now);
            return Selection { tier: Tier::Deep, reason: Reason::DeepKeyword(k.to_string()) };
        }
        if turn.queue_depth >= self.queue_threshold {
            return Selection { tier: Tier::Fast, reason: Reason::QueueDepth(turn.queue_depth) };
        }
        if let Some(k) = self.standard.find(&said) {
            return Selection { tier: Tier::Standard, reason: Reason::StandardKeyword(k.to_string()) };
        }
        if turn.first_turn {
            return Selection { tier: Tier::Standard, reason: Reason::FirstTurn };
        }
        Selection { tier: Tier::Fast, reason: Reason::Default }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector() -> (Selector, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::default());
        (Selector::with_clock(&SelectorConfig::default(), clock.clone()), clock)
    }

    fn turn() -> Turn {
        Turn::default()
    }

    #[test]
    fn default_is_fast() {
        let (s, _) = selector();
        assert_eq!(s.select("what's your name?", turn()), Selection { tier: Tier::Fast, reason: Reason::Default });
    }

    #[test]
    fn dm_override_wins_over_everything() {
        let (s, _) = selector();
        let t = Turn { dm_override: Some(Tier::Fast), queue_depth: 0, first_turn: true };
        assert_eq!(s.select("think carefully about the rules", t).tier, Tier::Fast);
        let t = Turn { dm_override: Some(Tier::Deep), queue_depth: 9, first_turn: false };
        assert_eq!(s.select("hi", t), Selection { tier: Tier::Deep, reason: Reason::DmOverride });
    }

    #[test]
    fn deep_keywords_give_deep_and_beat_queue_depth() {
        let (s, _) = selector();
        let t = Turn { queue_depth: 5, ..turn() };
        let sel = s.select("Think carefully, sage!", t);
        assert_eq!(sel, Selection { tier: Tier::Deep, reason: Reason::DeepKeyword("think carefully".into()) });
    }

    #[test]
    fn a_second_deep_request_within_30_s_is_demoted_to_standard() {
        let (s, clock) = selector();
        assert_eq!(s.select("take your time", turn()).tier, Tier::Deep);
        clock.advance(Duration::from_secs(29));
        let sel = s.select("deep search the archives", turn());
        assert_eq!(sel.tier, Tier::Standard);
        assert!(
            matches!(sel.reason, Reason::DeepDemoted(ref k, ago) if k == "deep search" && ago == Duration::from_secs(29))
        );
        // The demoted request does not restart the window.
        clock.advance(Duration::from_secs(1));
        assert_eq!(s.select("think carefully", turn()).tier, Tier::Deep);
    }

    #[test]
    fn the_anti_spam_window_reopens_after_30_s() {
        let (s, clock) = selector();
        assert_eq!(s.select("think carefully", turn()).tier, Tier::Deep);
        clock.advance(Duration::from_secs(30));
        assert_eq!(s.select("think carefully", turn()).tier, Tier::Deep);
    }

    #[test]
    fn queue_depth_beats_standard_keywords_and_first_turn() {
        let (s, _) = selector();
        let t = Turn { queue_depth: 3, first_turn: true, ..turn() };
        assert_eq!(s.select("remember the quest?", t), Selection { tier: Tier::Fast, reason: Reason::QueueDepth(3) });
        let t = Turn { queue_depth: 2, ..turn() };
        assert_eq!(s.select("remember the quest?", t).tier, Tier::Standard);
    }

    #[test]
    fn standard_keywords_give_standard() {
        let (s, _) = selector();
        let sel = s.select("Do you REMEMBER me?", turn());
        assert_eq!(sel, Selection { tier: Tier::Standard, reason: Reason::StandardKeyword("remember".into()) });
        assert_eq!(s.select("Who is the baron?", turn()).tier, Tier::Standard);
    }

    #[test]
    fn first_turn_gives_standard() {
        let (s, _) = selector();
        let t = Turn { first_turn: true, ..turn() };
        assert_eq!(s.select("hello there", t), Selection { tier: Tier::Standard, reason: Reason::FirstTurn });
    }

    #[test]
    fn keywords_match_on_word_boundaries_only() {
        // A fresh selector per check: the anti-spam window is not under test here.
        let tier = |u: &str| selector().0.select(u, turn()).tier;
        assert_eq!(tier("the king overrules you"), Tier::Fast);
        assert_eq!(tier("unremembered things"), Tier::Fast);
        assert_eq!(tier("think, carefully"), Tier::Deep, "punctuation is a boundary");
        assert_eq!(tier("Think... carefully!"), Tier::Deep);
        assert_eq!(tier("thinking carefully"), Tier::Fast);
    }

    #[test]
    fn keyword_lists_are_configurable() {
        let cfg = SelectorConfig {
            deep_keywords: vec!["ponder".into()],
            standard_keywords: vec!["lore".into()],
            ..SelectorConfig::default()
        };
        let s = Selector::new(&cfg);
        assert_eq!(s.select("ponder this", turn()).tier, Tier::Deep);
        assert_eq!(s.select("any lore?", turn()).tier, Tier::Standard);
        assert_eq!(s.select("think carefully", turn()).tier, Tier::Fast);
    }
}
