//! How often the scheduler is asked. A busy production controller serves thousands of jobs and many
//! users: runguard lists its watched jobs at most once per poll interval whatever the logs do (a log
//! wake-up re-reads logs and decides on what is already known), asks about nodes less often still, and
//! stretches both while the controller answers slowly.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// An answer slower than this (or than a quarter of the gap) counts as a controller under load.
const SLOW_ANSWER: Duration = Duration::from_secs(1);

/// While slow, the next call waits this many times the last answer's duration...
const SLOW_FACTOR: u32 = 10;

/// ...but never more than this many poll intervals.
const MAX_STRETCH: u32 = 12;

/// The pace of scheduler calls of one engine.
#[derive(Debug, Clone)]
pub(super) struct Pace {
    /// The configured poll interval: the shortest gap between two listings.
    poll: TimeDelta,
    /// The shortest gap between two node-state queries.
    node_poll: TimeDelta,
    /// The gap in force now: the poll interval, or longer while the controller is slow.
    gap: TimeDelta,
    last_listing: Option<DateTime<Utc>>,
    last_nodes: Option<DateTime<Utc>>,
    /// When a failure in a log last brought a listing forward.
    last_expedited: Option<DateTime<Utc>>,
    /// A listing was brought forward and has not been made yet.
    expedited: bool,
    /// When every log was last read and every workflow looked at.
    last_full_pass: Option<DateTime<Utc>>,
}

/// What one answer said about the controller's load.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Load {
    /// As before: normal, or still slow at the same pace.
    Steady,
    /// Slower than it should be: the next calls wait longer (the new gap is given). Said when a slow
    /// spell begins or the gap grows, not at every slow answer.
    Slow(Duration),
    /// Back to normal after a slow spell.
    Recovered,
}

fn delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).unwrap_or(TimeDelta::MAX)
}

impl Pace {
    pub(super) fn new(poll: Duration, node_poll: Duration) -> Self {
        let poll = delta(poll);
        Self {
            poll,
            node_poll: delta(node_poll).max(poll),
            gap: poll,
            last_listing: None,
            last_nodes: None,
            last_expedited: None,
            expedited: false,
            last_full_pass: None,
        }
    }

    /// A listing is due: the first one, or one gap after the last.
    pub(super) fn listing_due(&self, now: DateTime<Utc>) -> bool {
        self.expedited
            || self
                .last_listing
                .is_none_or(|last| now - last >= self.gap || now < last)
    }

    /// When the jobs were last listed.
    pub(super) fn listed_at(&self) -> Option<DateTime<Utc>> {
        self.last_listing
    }

    /// A node-state query is due (asked only together with a listing).
    pub(super) fn nodes_due(&self, now: DateTime<Utc>) -> bool {
        let gap = self.node_poll.max(self.gap);
        self.last_nodes
            .is_none_or(|last| now - last >= gap || now < last)
    }

    /// A log just showed a failure (an error line, a traceback): the scheduler is asked at the next
    /// tick rather than at the end of the interval, so that the job's end is seen and recovered at once
    /// — but at most once per interval, so that a job that keeps printing errors cannot turn its log
    /// into a stream of listings. Routine log activity never does this.
    /// The backend's own cache says a job changed: its listing costs the controller nothing, so it is
    /// listed at the next tick (the loop's minimum gap between ticks still bounds how often).
    pub(super) fn jobs_changed(&mut self, now: DateTime<Utc>) {
        if !self.listing_due(now) {
            self.expedited = true;
        }
    }

    pub(super) fn expedite(&mut self, now: DateTime<Utc>) {
        let allowed = self
            .last_expedited
            .is_none_or(|last| now - last >= self.gap || now < last);
        if allowed && !self.listing_due(now) {
            self.last_expedited = Some(now);
            self.expedited = true;
        }
    }

    /// A pass over every log and workflow is due: once per poll interval, however many wake-ups.
    pub(super) fn full_pass_due(&self, now: DateTime<Utc>) -> bool {
        self.last_full_pass
            .is_none_or(|last| now - last >= self.poll || now < last)
    }

    pub(super) fn full_pass(&mut self, now: DateTime<Utc>) {
        self.last_full_pass = Some(now);
    }

    pub(super) fn nodes_asked(&mut self, now: DateTime<Utc>) {
        self.last_nodes = Some(now);
    }

    /// Records a listing that took `took` of real time, and says whether the controller is slow.
    pub(super) fn listed(&mut self, now: DateTime<Utc>, took: Duration) -> Load {
        self.last_listing = Some(now);
        self.expedited = false;
        let threshold = SLOW_ANSWER.max(self.poll.to_std().unwrap_or_default() / 4);
        let was_slow = self.gap > self.poll;
        if took >= threshold {
            let stretched =
                delta(took * SLOW_FACTOR).clamp(self.poll, self.poll * MAX_STRETCH as i32);
            let grew = stretched > self.gap;
            self.gap = stretched;
            if grew {
                Load::Slow(stretched.to_std().unwrap_or_default())
            } else {
                Load::Steady
            }
        } else {
            self.gap = self.poll;
            if was_slow {
                Load::Recovered
            } else {
                Load::Steady
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(seconds)
    }

    #[test]
    fn listings_are_at_most_one_per_poll_interval() {
        let mut pace = Pace::new(Duration::from_secs(5), Duration::from_secs(15));
        assert!(pace.listing_due(at(0)));
        assert_eq!(pace.listed(at(0), Duration::from_millis(40)), Load::Steady);
        for second in 1..5 {
            assert!(!pace.listing_due(at(second)), "{second}");
        }
        assert!(pace.listing_due(at(5)));
    }

    #[test]
    fn node_queries_keep_their_own_longer_gap() {
        let mut pace = Pace::new(Duration::from_secs(5), Duration::from_secs(15));
        assert!(pace.nodes_due(at(0)));
        pace.nodes_asked(at(0));
        assert!(!pace.nodes_due(at(10)));
        assert!(pace.nodes_due(at(15)));
        // Never more often than the listings.
        let pace = Pace::new(Duration::from_secs(5), Duration::from_secs(1));
        assert_eq!(pace.node_poll, TimeDelta::seconds(5));
    }

    #[test]
    fn a_change_in_the_backends_cache_lists_at_the_next_tick_however_often() {
        let mut pace = Pace::new(Duration::from_secs(5), Duration::from_secs(30));
        pace.listed(at(0), Duration::ZERO);
        assert!(!pace.listing_due(at(1)));
        pace.jobs_changed(at(1));
        assert!(pace.listing_due(at(1)));
        pace.listed(at(1), Duration::ZERO);
        pace.jobs_changed(at(2));
        assert!(
            pace.listing_due(at(2)),
            "not once per interval: every change"
        );
        pace.listed(at(2), Duration::ZERO);
        assert!(!pace.listing_due(at(3)), "nothing changed");
    }

    #[test]
    fn a_slow_controller_stretches_the_gap_within_bounds_and_recovers() {
        let mut pace = Pace::new(Duration::from_secs(5), Duration::from_secs(15));
        assert_eq!(
            pace.listed(at(0), Duration::from_secs(2)),
            Load::Slow(Duration::from_secs(20))
        );
        assert!(!pace.listing_due(at(19)));
        assert!(pace.listing_due(at(20)));
        // Node queries follow the stretched gap too.
        pace.nodes_asked(at(0));
        assert!(!pace.nodes_due(at(19)));
        // Never more than twelve poll intervals however slow.
        assert_eq!(
            pace.listed(at(20), Duration::from_secs(30)),
            Load::Slow(Duration::from_secs(60))
        );
        assert_eq!(pace.listed(at(80), Duration::from_secs(3)), Load::Steady);
        assert_eq!(
            pace.listed(at(140), Duration::from_millis(100)),
            Load::Recovered
        );
        assert!(pace.listing_due(at(145)));
    }

    #[test]
    fn a_failure_in_a_log_brings_one_listing_forward_per_interval() {
        let mut pace = Pace::new(Duration::from_secs(5), Duration::from_secs(15));
        pace.listed(at(0), Duration::ZERO);
        pace.expedite(at(1));
        assert!(pace.listing_due(at(1)));
        pace.listed(at(1), Duration::ZERO);
        // Another error a second later waits for the interval.
        pace.expedite(at(2));
        assert!(!pace.listing_due(at(2)));
        assert!(pace.listing_due(at(6)));
    }

    #[test]
    fn a_clock_that_went_back_does_not_stop_the_listings() {
        let mut pace = Pace::new(Duration::from_secs(5), Duration::from_secs(15));
        pace.listed(at(100), Duration::ZERO);
        assert!(pace.listing_due(at(50)));
    }
}
