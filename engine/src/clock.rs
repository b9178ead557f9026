//! Time as the engine sees it. Every engine decision reads a [`Clock`] it is given, so the simulated
//! cluster can run hours of training in a minute and tests never sleep for real timeouts.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// A source of "now" and a way to wait for a span of that clock's time.
pub trait Clock: Send + Sync {
    /// The current time on this clock.
    fn now(&self) -> DateTime<Utc>;
    /// How long to really wait for `span` of this clock's time to pass.
    fn real_duration(&self, span: Duration) -> Duration;
}

/// Wall-clock time, for production.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn real_duration(&self, span: Duration) -> Duration {
        span
    }
}

/// A clock that runs `speed` times faster than wall time from a fixed origin.
///
/// The origin is kept by the simulated cluster, so an engine restarted mid-run continues the same
/// simulated timeline instead of jumping back.
#[derive(Debug, Clone, Copy)]
pub struct AcceleratedClock {
    /// Simulated time at `real_origin`.
    sim_origin: DateTime<Utc>,
    /// Wall time the simulated timeline started from.
    real_origin: DateTime<Utc>,
    speed: f64,
}

impl AcceleratedClock {
    /// A clock where `sim_origin` was the simulated time at wall time `real_origin`.
    pub fn new(sim_origin: DateTime<Utc>, real_origin: DateTime<Utc>, speed: f64) -> Self {
        let speed = if speed.is_finite() && speed > 0.0 {
            speed
        } else {
            1.0
        };
        Self {
            sim_origin,
            real_origin,
            speed,
        }
    }

    pub fn speed(&self) -> f64 {
        self.speed
    }
}

impl Clock for AcceleratedClock {
    fn now(&self) -> DateTime<Utc> {
        let real_elapsed = (Utc::now() - self.real_origin)
            .num_microseconds()
            .unwrap_or(0);
        let sim_elapsed = (real_elapsed as f64 * self.speed) as i64;
        self.sim_origin + TimeDelta::microseconds(sim_elapsed)
    }

    fn real_duration(&self, span: Duration) -> Duration {
        span.div_f64(self.speed)
    }
}

/// A clock that only moves when told to: for tests.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, span: Duration) {
        let mut now = crate::sync::lock(&self.now);
        *now += TimeDelta::from_std(span).unwrap_or(TimeDelta::zero());
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *crate::sync::lock(&self.now)
    }

    /// A manual clock does not advance by itself, so waiting on it only yields.
    fn real_duration(&self, _span: Duration) -> Duration {
        Duration::from_millis(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accelerated_clock_scales_waits_and_starts_at_its_origin() {
        let origin = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap();
        let clock = AcceleratedClock::new(origin, Utc::now(), 60.0);
        assert!(clock.now() >= origin);
        assert!(clock.now() < origin + TimeDelta::seconds(60));
        assert_eq!(
            clock.real_duration(Duration::from_secs(60)),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let origin = Utc::now();
        let clock = ManualClock::new(origin);
        assert_eq!(clock.now(), origin);
        clock.advance(Duration::from_secs(120));
        assert_eq!(clock.now(), origin + TimeDelta::seconds(120));
    }
}
