//! The latency tiers: the names every layer uses for "how long may this
//! take". The ceilings that give them meaning (500 / 1500 / 4000 ms by
//! default) are the operator's, in the host's budget.

use std::fmt;
use std::str::FromStr;

/// A latency budget tier. Ordered: `Fast < Standard < Deep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// p50 <= 500 ms: fits a normal conversational turn.
    Fast,
    /// p50 <= 1500 ms: rule questions, memory lookups.
    Standard,
    /// p50 <= the DEEP ceiling (4000 ms by default): deliberate requests.
    Deep,
}

impl Tier {
    /// Every tier, fastest first.
    pub const ALL: [Tier; 3] = [Tier::Fast, Tier::Standard, Tier::Deep];

    /// The next slower tier; `None` from DEEP.
    pub fn slower(self) -> Option<Tier> {
        match self {
            Tier::Fast => Some(Tier::Standard),
            Tier::Standard => Some(Tier::Deep),
            Tier::Deep => None,
        }
    }

    /// Lowercase name, as in configs and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Fast => "fast",
            Tier::Standard => "standard",
            Tier::Deep => "deep",
        }
    }

    /// The marketplace compatibility tag of a tool in this tier.
    pub fn compatibility(tier: Option<Tier>) -> &'static str {
        match tier {
            Some(Tier::Fast) => "FAST compatible",
            Some(Tier::Standard) => "STANDARD",
            Some(Tier::Deep) => "DEEP only",
            None => "over budget",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tier name that is not `fast`, `standard` or `deep`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tier {0:?}: use fast, standard or deep")]
pub struct UnknownTier(pub String);

impl FromStr for Tier {
    type Err = UnknownTier;
    fn from_str(s: &str) -> Result<Tier, UnknownTier> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fast" => Ok(Tier::Fast),
            "standard" => Ok(Tier::Standard),
            "deep" => Ok(Tier::Deep),
            _ => Err(UnknownTier(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_are_ordered_and_parse() {
        assert!(Tier::Fast < Tier::Standard && Tier::Standard < Tier::Deep);
        assert_eq!("FAST".parse::<Tier>().unwrap(), Tier::Fast);
        assert!("quick".parse::<Tier>().is_err());
        assert_eq!(Tier::Fast.slower(), Some(Tier::Standard));
        assert_eq!(Tier::Deep.slower(), None);
    }
}
