//! Latency tiers (the names are the vocabulary's, [`Tier`]), their
//! ceilings, and the marketplace badges derived from measurements.

use std::time::Duration;
pub use toolhost_types::{Tier, UnknownTier};

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
