//! The one deadline rule. A call's deadline is what the tool wants (its
//! declared max duration, or its measured p99 with a margin), raised to the
//! operator's floor, and never above the operator's ceiling nor the
//! ceiling of the tier the tool is in. The budget computes what is wanted;
//! the runtime and every provider apply this rule, nothing else.

use std::time::Duration;

/// The operator's floor and ceiling on every call's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlinePolicy {
    /// Shortest deadline a call gets: absorbs scheduler noise for tools that
    /// declare a very small max duration.
    pub floor: Duration,
    /// Longest deadline any call gets.
    pub ceiling: Duration,
}

impl Default for DeadlinePolicy {
    fn default() -> Self {
        DeadlinePolicy { floor: Duration::from_millis(100), ceiling: Duration::from_secs(30) }
    }
}

impl DeadlinePolicy {
    /// The deadline for a call that wants `wanted` (`None`: as long as
    /// allowed), under an extra `cap` (a tier's ceiling, or a caller's own
    /// deadline). The floor never lifts a deadline above the ceilings.
    pub fn deadline(&self, wanted: Option<Duration>, cap: Option<Duration>) -> Duration {
        let ceiling = cap.map_or(self.ceiling, |c| c.min(self.ceiling));
        wanted.unwrap_or(ceiling).max(self.floor).min(ceiling)
    }

    /// The deadline for a tool that declares `max_duration_ms`, with no tier.
    pub fn for_declared(&self, max_duration_ms: Option<u32>) -> Duration {
        self.deadline(max_duration_ms.map(|ms| Duration::from_millis(u64::from(ms))), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_bound_within_floor_and_ceilings() {
        let at = |ms: u64| Some(Duration::from_millis(ms));
        let p = DeadlinePolicy::default();
        let tight = DeadlinePolicy { floor: Duration::from_millis(200), ceiling: Duration::from_millis(100) };
        // (policy, wanted, cap, deadline, why)
        let cases = [
            (p, at(500), None, 500, "the declared bound"),
            (p, at(20), None, 100, "raised to the floor"),
            (p, at(u64::from(u32::MAX)), None, 30_000, "capped at the ceiling"),
            (p, None, None, 30_000, "nothing declared: the ceiling"),
            (p, at(2000), at(1500), 1500, "capped at the tier"),
            (p, None, at(500), 500, "nothing declared: the tier's ceiling"),
            (p, at(10), at(50), 50, "the floor never lifts above a cap"),
            (tight, at(5), None, 100, "a floor above the ceiling yields to it"),
        ];
        for (policy, wanted, cap, want, why) in cases {
            assert_eq!(policy.deadline(wanted, cap), Duration::from_millis(want), "{why}");
        }
        assert_eq!(p.for_declared(Some(500)), Duration::from_millis(500));
    }
}
