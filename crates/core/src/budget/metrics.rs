//! Per-tool measurements: a rolling window of the last calls, kept apart for
//! real calls and calibration probes.
//!
//! Unlike the Go original, errors age out: a sample leaves the window when
//! 100 newer ones arrive or when it is older than the window's maximum age,
//! so a demoted tool that recovers (or is simply not called for a while) gets
//! its tier back.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How a call ended, for the health score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Success (or a tool-reported error such as invalid input or not
    /// found: the tool answered in time, which is what latency health cares about).
    Ok,
    /// The tool failed (trap, crash, handler error). A call refused
    /// because its upstream was down is no outcome of the tool: it is
    /// not recorded.
    Error,
    /// The call hit its deadline.
    Timeout,
}

impl Outcome {
    /// Lowercase name, as stored: `ok`, `error`, `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
        }
    }

    /// The outcome named `s` (see [`Outcome::as_str`]).
    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "ok" => Some(Outcome::Ok),
            "error" => Some(Outcome::Error),
            "timeout" => Some(Outcome::Timeout),
            _ => None,
        }
    }
}

/// A sample as it outlives the process: how long ago it was taken instead
/// of an [`Instant`] (which means nothing in another process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgedSample {
    /// How long before "now" the sample was taken.
    pub age: Duration,
    /// How long the call took.
    pub duration: Duration,
    /// How it ended.
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    duration: Duration,
    outcome: Outcome,
}

/// A rolling window of samples.
#[derive(Debug, Clone)]
pub struct Window {
    /// Oldest first; each taken no earlier than the one before it.
    samples: VecDeque<Sample>,
    /// The samples' durations, sorted: a summary reads its percentiles
    /// there instead of selecting them (every call's tier is read after
    /// its sample is recorded, so a summary is made per call).
    sorted: Vec<Duration>,
    /// Samples whose outcome is not [`Outcome::Ok`].
    errors: usize,
    capacity: usize,
    max_age: Duration,
}

/// A summary of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Samples counted.
    pub count: usize,
    /// Median duration of all samples.
    pub p50: Duration,
    /// 99th percentile duration.
    pub p99: Duration,
    /// Errors and timeouts, per mille of samples.
    pub error_permille: u32,
}

impl Summary {
    /// Error and timeout rate, 0.0 to 1.0.
    pub fn error_rate(&self) -> f64 {
        f64::from(self.error_permille) / 1000.0
    }
}

impl Window {
    /// A window of at most `capacity` samples, none older than `max_age`.
    pub fn new(capacity: usize, max_age: Duration) -> Window {
        Window {
            samples: VecDeque::with_capacity(capacity),
            sorted: Vec::with_capacity(capacity),
            errors: 0,
            capacity,
            max_age,
        }
    }

    /// Records a sample taken at `at` (or when the newest sample was
    /// taken, if that is later: callers race to record, and the window
    /// stays in time order).
    pub fn record(&mut self, at: Instant, duration: Duration, outcome: Outcome) {
        if self.capacity == 0 {
            return;
        }
        if self.samples.len() == self.capacity
            && let Some(old) = self.samples.pop_front()
        {
            self.forget(&old);
        }
        let at = self.samples.back().map_or(at, |newest| at.max(newest.at));
        self.samples.push_back(Sample { at, duration, outcome });
        let i = self.sorted.partition_point(|d| *d < duration);
        self.sorted.insert(i, duration);
        self.errors += usize::from(outcome != Outcome::Ok);
    }

    /// Takes a sample that left the window out of the running tallies.
    fn forget(&mut self, old: &Sample) {
        let i = self.sorted.partition_point(|d| *d < old.duration);
        self.sorted.remove(i);
        self.errors -= usize::from(old.outcome != Outcome::Ok);
    }

    /// Summarises the samples not older than the maximum age at `now`;
    /// `None` when there are none.
    pub fn summary(&self, now: Instant) -> Option<Summary> {
        let live = |s: &&Sample| now.saturating_duration_since(s.at) <= self.max_age;
        let rank = |n: usize, q: f64| ((n - 1) as f64 * q).round() as usize;
        // Every sample live (the oldest is): the tallies are the summary.
        if self.samples.front().is_some_and(|oldest| live(&oldest)) {
            let n = self.sorted.len();
            return Some(Summary {
                count: n,
                p50: self.sorted[rank(n, 0.5)],
                p99: self.sorted[rank(n, 0.99)],
                error_permille: (self.errors * 1000 / n) as u32,
            });
        }
        let mut durations: Vec<Duration> = self.samples.iter().filter(live).map(|s| s.duration).collect();
        if durations.is_empty() {
            return None;
        }
        let errors = self.samples.iter().filter(live).filter(|s| s.outcome != Outcome::Ok).count();
        let n = durations.len();
        let (p50_i, p99_i) = (rank(n, 0.5), rank(n, 0.99));
        // Some samples have aged out (after a quiet spell): two partial
        // selections over the live ones.
        let (_, p99, _) = durations.select_nth_unstable(p99_i);
        let p99 = *p99;
        let (_, p50, _) = durations[..=p99_i].select_nth_unstable(p50_i);
        Some(Summary { count: n, p50: *p50, p99, error_permille: (errors * 1000 / n) as u32 })
    }

    /// Drops every sample.
    pub fn clear(&mut self) {
        self.samples.clear();
        self.sorted.clear();
        self.errors = 0;
    }

    /// The samples not older than the maximum age at `now`, oldest first,
    /// each with its age.
    pub fn aged(&self, now: Instant) -> Vec<AgedSample> {
        self.samples
            .iter()
            .map(|s| AgedSample { age: now.saturating_duration_since(s.at), duration: s.duration, outcome: s.outcome })
            .filter(|s| s.age <= self.max_age)
            .collect()
    }

    /// Records a sample taken `sample.age` before `now` (one restored from
    /// disk). A sample already past the maximum age, or older than this
    /// machine's monotonic clock can express, is dropped: returns whether it
    /// was kept. Restore oldest first, like [`Window::record`].
    pub fn record_aged(&mut self, now: Instant, sample: AgedSample) -> bool {
        if sample.age > self.max_age {
            return false;
        }
        let Some(at) = now.checked_sub(sample.age) else { return false };
        self.record(at, sample.duration, sample.outcome);
        true
    }

    /// The ages of the newest and the oldest live sample at `now`.
    pub fn ages(&self, now: Instant) -> Option<(Duration, Duration)> {
        let live = self.aged(now);
        Some((live.last()?.age, live.first()?.age))
    }

    /// Samples held (live or not yet dropped).
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether the window holds no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// When the newest sample was taken.
    pub fn newest(&self) -> Option<Instant> {
        self.samples.back().map(|s| s.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn percentiles_and_error_rate() {
        let t0 = Instant::now();
        let mut w = Window::new(100, Duration::from_secs(600));
        for i in 1..=100u32 {
            let outcome = if i <= 20 { Outcome::Error } else { Outcome::Ok };
            w.record(t0, MS * i, outcome);
        }
        let s = w.summary(t0).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50, MS * 51);
        assert_eq!(s.p99, MS * 99);
        assert_eq!(s.error_permille, 200);
    }

    #[test]
    fn only_the_last_100_count() {
        let t0 = Instant::now();
        let mut w = Window::new(100, Duration::from_secs(600));
        for _ in 0..100 {
            w.record(t0, MS, Outcome::Error);
        }
        for _ in 0..100 {
            w.record(t0, MS, Outcome::Ok);
        }
        assert_eq!(w.summary(t0).unwrap().error_permille, 0, "old errors left the window");
    }

    #[test]
    fn aged_samples_round_trip_and_keep_ageing() {
        let t0 = Instant::now() + Duration::from_secs(3600);
        let mut w = Window::new(100, Duration::from_secs(60));
        w.record(t0, MS * 7, Outcome::Ok);
        w.record(t0 + Duration::from_secs(30), MS * 9, Outcome::Timeout);
        let now = t0 + Duration::from_secs(40);
        let aged = w.aged(now);
        assert_eq!(aged.iter().map(|s| s.age.as_secs()).collect::<Vec<_>>(), [40, 10]);
        // Another process, 15 s later: the ages grow by the time it was down.
        let later = Instant::now() + Duration::from_secs(7200);
        let mut restored = Window::new(100, Duration::from_secs(60));
        for s in &aged {
            assert!(restored.record_aged(later, AgedSample { age: s.age + Duration::from_secs(15), ..*s }));
        }
        assert_eq!(restored.ages(later), Some((Duration::from_secs(25), Duration::from_secs(55))));
        assert_eq!(restored.summary(later).unwrap().count, 2);
        // 6 s on, the first one (61 s old) has aged out like any other.
        let s = restored.summary(later + Duration::from_secs(6)).unwrap();
        assert_eq!((s.count, s.p50, s.error_permille), (1, MS * 9, 1000));
        // Too old to keep at all.
        assert!(!restored.record_aged(later, AgedSample { age: Duration::from_secs(61), ..aged[0] }));
    }

    #[test]
    fn old_samples_age_out() {
        let t0 = Instant::now();
        let mut w = Window::new(100, Duration::from_secs(60));
        w.record(t0, MS, Outcome::Timeout);
        w.record(t0 + Duration::from_secs(50), MS * 3, Outcome::Ok);
        let s = w.summary(t0 + Duration::from_secs(61)).unwrap();
        assert_eq!((s.count, s.error_permille), (1, 0));
        assert_eq!(w.summary(t0 + Duration::from_secs(200)), None);
    }

    /// The running tallies give what a selection over the samples gives,
    /// through evictions, ties and errors.
    #[test]
    fn the_tallies_match_a_selection_over_the_samples() {
        let t0 = Instant::now();
        let mut w = Window::new(100, Duration::from_secs(600));
        let mut seed = 7u64;
        for i in 0..1000u32 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let duration = Duration::from_micros((seed >> 33) % 50);
            let outcome = if (seed >> 20).is_multiple_of(7) { Outcome::Error } else { Outcome::Ok };
            w.record(t0 + MS * i, duration, outcome);
            let now = t0 + MS * i;
            let mut d: Vec<Duration> = w.samples.iter().map(|s| s.duration).collect();
            d.sort();
            let n = d.len();
            let rank = |q: f64| ((n - 1) as f64 * q).round() as usize;
            let errors = w.samples.iter().filter(|s| s.outcome != Outcome::Ok).count();
            let want =
                Summary { count: n, p50: d[rank(0.5)], p99: d[rank(0.99)], error_permille: (errors * 1000 / n) as u32 };
            assert_eq!(w.summary(now), Some(want), "after {} samples", i + 1);
        }
        // After a quiet spell some have aged out: the live ones only.
        let later = t0 + Duration::from_secs(600) + MS * 950;
        let mut live: Vec<Duration> = w
            .samples
            .iter()
            .filter(|s| later.saturating_duration_since(s.at) <= w.max_age)
            .map(|s| s.duration)
            .collect();
        live.sort();
        assert_eq!(live.len(), 50);
        let got = w.summary(later).unwrap();
        assert_eq!((got.count, got.p50, got.p99), (50, live[25], live[49]));
        // A sample recorded "before" the newest keeps the window in order.
        w.record(t0, MS, Outcome::Ok);
        assert!(w.samples.back().unwrap().at >= t0 + MS * 999);
    }
}
