//! Latency tiers and the marketplace badges derived from measurements.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

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

/// Budget ceilings per tier: the most a tool's p50 may be to belong to a
/// tier, and the most a call in that tier may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    /// FAST ceiling (seed: 500 ms).
    pub fast: Duration,
    /// STANDARD ceiling (seed: 1500 ms).
    pub standard: Duration,
    /// DEEP ceiling (seed: 4000 ms). A tool slower than this is over budget
    /// for every tier and never shown.
    pub deep: Duration,
}

impl Default for Ceilings {
    fn default() -> Self {
        Ceilings {
            fast: Duration::from_millis(500),
            standard: Duration::from_millis(1500),
            deep: Duration::from_millis(4000),
        }
    }
}

impl Ceilings {
    /// The tier a tool with this p50 belongs to; `None` when it is over
    /// budget for every tier.
    pub fn tier_for(&self, p50: Duration) -> Option<Tier> {
        if p50 <= self.fast {
            Some(Tier::Fast)
        } else if p50 <= self.standard {
            Some(Tier::Standard)
        } else if p50 <= self.deep {
            Some(Tier::Deep)
        } else {
            None
        }
    }

    /// The budget of a tier.
    pub fn of(&self, tier: Tier) -> Duration {
        match tier {
            Tier::Fast => self.fast,
            Tier::Standard => self.standard,
            Tier::Deep => self.deep,
        }
    }
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

/// Marketplace speed badge, from a measured p50.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Badge {
    /// p50 under 50 ms.
    Lightning,
    /// p50 under 200 ms.
    Fast,
    /// p50 under 1 s.
    Standard,
    /// Anything slower.
    Slow,
}

impl Badge {
    /// The badge for a measured p50.
    pub fn for_p50(p50: Duration) -> Badge {
        match p50.as_millis() {
            0..50 => Badge::Lightning,
            50..200 => Badge::Fast,
            200..1000 => Badge::Standard,
            _ => Badge::Slow,
        }
    }

    /// Display name.
    pub fn as_str(self) -> &'static str {
        match self {
            Badge::Lightning => "Lightning",
            Badge::Fast => "Fast",
            Badge::Standard => "Standard",
            Badge::Slow => "Slow",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_follow_the_seed_boundaries() {
        let c = Ceilings::default();
        let ms = Duration::from_millis;
        assert_eq!(c.tier_for(ms(0)), Some(Tier::Fast));
        assert_eq!(c.tier_for(ms(500)), Some(Tier::Fast));
        assert_eq!(c.tier_for(ms(501)), Some(Tier::Standard));
        assert_eq!(c.tier_for(ms(1500)), Some(Tier::Standard));
        assert_eq!(c.tier_for(ms(1501)), Some(Tier::Deep));
        assert_eq!(c.tier_for(ms(4000)), Some(Tier::Deep));
        assert_eq!(c.tier_for(ms(4001)), None);
    }

    #[test]
    fn tiers_are_ordered_and_parse() {
        assert!(Tier::Fast < Tier::Standard && Tier::Standard < Tier::Deep);
        assert_eq!("FAST".parse::<Tier>().unwrap(), Tier::Fast);
        assert!("quick".parse::<Tier>().is_err());
        assert_eq!(Tier::Fast.slower(), Some(Tier::Standard));
        assert_eq!(Tier::Deep.slower(), None);
    }

    #[test]
    fn badges_follow_the_design_thresholds() {
        let ms = Duration::from_millis;
        assert_eq!(Badge::for_p50(ms(49)), Badge::Lightning);
        assert_eq!(Badge::for_p50(ms(50)), Badge::Fast);
        assert_eq!(Badge::for_p50(ms(199)), Badge::Fast);
        assert_eq!(Badge::for_p50(ms(200)), Badge::Standard);
        assert_eq!(Badge::for_p50(ms(999)), Badge::Standard);
        assert_eq!(Badge::for_p50(ms(1000)), Badge::Slow);
    }
}
