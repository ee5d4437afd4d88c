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
    /// The tool failed (trap, crash, handler error, unavailable).
    Error,
    /// The call hit its deadline.
    Timeout,
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
    samples: VecDeque<Sample>,
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
        Window { samples: VecDeque::with_capacity(capacity), capacity, max_age }
    }

    /// Records a sample taken at `at`.
    pub fn record(&mut self, at: Instant, duration: Duration, outcome: Outcome) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample { at, duration, outcome });
    }

    /// Summarises the samples not older than the maximum age at `now`;
    /// `None` when there are none.
    pub fn summary(&self, now: Instant) -> Option<Summary> {
        let live = |s: &&Sample| now.saturating_duration_since(s.at) <= self.max_age;
        let mut durations: Vec<Duration> = self.samples.iter().filter(live).map(|s| s.duration).collect();
        if durations.is_empty() {
            return None;
        }
        let errors = self.samples.iter().filter(live).filter(|s| s.outcome != Outcome::Ok).count();
        let n = durations.len();
        let rank = |q: f64| ((n - 1) as f64 * q).round() as usize;
        let (p50_i, p99_i) = (rank(0.5), rank(0.99));
        // Two partial selections instead of a full sort: this runs on every call.
        let (_, p99, _) = durations.select_nth_unstable(p99_i);
        let p99 = *p99;
        let (_, p50, _) = durations[..=p99_i].select_nth_unstable(p50_i);
        Some(Summary { count: n, p50: *p50, p99, error_permille: (errors * 1000 / n) as u32 })
    }

    /// Drops every sample.
    pub fn clear(&mut self) {
        self.samples.clear();
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
    fn old_samples_age_out() {
        let t0 = Instant::now();
        let mut w = Window::new(100, Duration::from_secs(60));
        w.record(t0, MS, Outcome::Timeout);
        w.record(t0 + Duration::from_secs(50), MS * 3, Outcome::Ok);
        let s = w.summary(t0 + Duration::from_secs(61)).unwrap();
        assert_eq!((s.count, s.error_permille), (1, 0));
        assert_eq!(w.summary(t0 + Duration::from_secs(200)), None);
    }
}
