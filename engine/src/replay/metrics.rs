//! What a replay measures: each failure's downtime by phase, and per policy the effective training
//! time ratio (progress kept / wall time), repeats on nodes already implicated, pages.

use serde::Serialize;

use super::Policy;

/// Who acted on a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Handler {
    Runguard,
    Blind,
    Person,
    /// Nobody acted before the replay ended.
    Nobody,
}

/// One interruption of the run, in seconds from the replay's start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureRecord {
    /// The cause of the trace, and the node whose fault it was.
    pub cause: String,
    pub node: String,
    /// When the fault struck the run (its onset, or for a fault that stays, its recurrence).
    pub fault_s: f64,
    /// When the failure's first log line was written: the earliest moment anything reading the
    /// logs could know (unknown when the fault cannot be told from the simulator's record).
    pub shown_s: Option<f64>,
    /// When the job ended as the scheduler shows it (or was ended by the action).
    pub exit_s: f64,
    /// When the recovering action ran.
    pub action_s: Option<f64>,
    /// When the next attempt began training (its start plus the run's start-up).
    pub resumed_s: Option<f64>,
    /// Iterations done since the checkpoint the next attempt resumed from.
    pub lost_iterations: u64,
    /// The node had failed the run before.
    pub repeat: bool,
    pub handler: Handler,
    /// Wall time of the engine's passes from the failure to its action (runguard only).
    pub engine_wall_ms: f64,
}

/// A failure's downtime by phase, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Downtime {
    /// From the fault to the job's end (a collective timeout runs its course here).
    pub failing: f64,
    /// From the job's end to the recovering action: detection, analysis, decision, or a person's
    /// reaction.
    pub response: f64,
    /// From the action to training again: the scheduler's requeue and the run's start-up.
    pub restart: f64,
    /// Work redone: the steps since the last checkpoint.
    pub lost_work: f64,
}

impl Downtime {
    pub fn total(&self) -> f64 {
        self.failing + self.response + self.restart + self.lost_work
    }

    fn add(&mut self, other: &Downtime) {
        self.failing += other.failing;
        self.response += other.response;
        self.restart += other.restart;
        self.lost_work += other.lost_work;
    }

    fn scaled(&self, by: f64) -> Downtime {
        Downtime {
            failing: self.failing * by,
            response: self.response * by,
            restart: self.restart * by,
            lost_work: self.lost_work * by,
        }
    }
}

impl FailureRecord {
    /// The phases of this failure's downtime; an action taken before the job ended cuts the failing
    /// phase short and leaves no response time.
    pub fn downtime(&self, seconds_per_iteration: f64) -> Downtime {
        let ended = match self.action_s {
            Some(action) => action.min(self.exit_s),
            None => self.exit_s,
        };
        Downtime {
            failing: (ended - self.fault_s).max(0.0),
            response: self
                .action_s
                .map_or(0.0, |action| (action - ended).max(0.0)),
            restart: match (self.action_s, self.resumed_s) {
                (Some(action), Some(resumed)) => (resumed - action).max(0.0),
                _ => 0.0,
            },
            lost_work: self.lost_iterations as f64 * seconds_per_iteration,
        }
    }
}

impl FailureRecord {
    /// runguard's own share of this failure's downtime: from when the failure could be seen to the
    /// action (from the fault itself when it acted before the job ended, since all of that was its
    /// detection; else from the job's end), plus the wall time of its passes.
    pub fn own_share_s(&self, seconds_per_iteration: f64) -> f64 {
        let d = self.downtime(seconds_per_iteration);
        let acted_first = self.action_s.is_some_and(|action| action <= self.exit_s);
        let seen_after = if acted_first { d.failing } else { d.response };
        seen_after + self.engine_wall_ms / 1000.0
    }

    /// The part of the own share after the failure's first log line: from that line to the action,
    /// plus the wall time of the passes. What comes before the line is the fault's own delay (an
    /// IB transport's retries, a driver's report), which no reader of the logs can shorten.
    pub fn from_line_s(&self) -> Option<f64> {
        let (shown, action) = (self.shown_s?, self.action_s?);
        Some((action - shown).max(0.0) + self.engine_wall_ms / 1000.0)
    }
}

/// One policy's replay at one checkpoint interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyResult {
    pub policy: Policy,
    pub checkpoint_minutes: f64,
    pub wall_s: f64,
    /// Training time kept at the end: the run's progress times the step time.
    pub productive_s: f64,
    /// Effective training time ratio: productive / wall.
    pub ettr: f64,
    /// The ratio of a run without failures at this interval (only checkpoint saves cost time).
    pub ettr_without_failures: f64,
    pub failures: Vec<FailureRecord>,
    pub repeats: usize,
    /// Failures a person acted on.
    pub pages: usize,
    /// Mean downtime per failure by phase.
    pub mean_downtime: Downtime,
    /// runguard's own share per failure it handled (response on the simulated clock plus the wall
    /// time of its passes), mean and largest, seconds.
    pub own_share_mean_s: Option<f64>,
    pub own_share_max_s: Option<f64>,
    /// The same from the failure's first log line rather than from the fault, mean and largest.
    pub from_line_mean_s: Option<f64>,
    pub from_line_max_s: Option<f64>,
    /// Downtime not in any failure's phases: checkpoint saves, start-ups, step jitter.
    pub other_s: f64,
    /// Nodes left out of the run at the end.
    pub excluded_nodes: usize,
}

/// Inputs of [`summarize`] beyond the failures.
#[derive(Debug, Clone, Copy)]
pub struct RunTotals {
    pub policy: Policy,
    pub checkpoint_minutes: f64,
    pub wall_s: f64,
    /// Iterations the run kept (completed by the running attempt, or its last checkpoint).
    pub kept_iterations: u64,
    pub seconds_per_iteration: f64,
    pub save_s: f64,
    pub excluded_nodes: usize,
}

/// The policy's figures from its failures and totals.
pub fn summarize(totals: RunTotals, failures: Vec<FailureRecord>) -> PolicyResult {
    let spi = totals.seconds_per_iteration;
    let productive_s = totals.kept_iterations as f64 * spi;
    let ettr = if totals.wall_s > 0.0 {
        productive_s / totals.wall_s
    } else {
        0.0
    };
    let interval_s = totals.checkpoint_minutes * 60.0;
    let ettr_without_failures = interval_s / (interval_s + totals.save_s);
    let mut sum = Downtime::default();
    for failure in &failures {
        sum.add(&failure.downtime(spi));
    }
    let count = failures.len();
    let mean_downtime = if count > 0 {
        sum.scaled(1.0 / count as f64)
    } else {
        Downtime::default()
    };
    let own: Vec<f64> = failures
        .iter()
        .filter(|failure| failure.handler == Handler::Runguard)
        .map(|failure| failure.own_share_s(spi))
        .collect();
    let own_share_mean_s = mean(&own);
    let own_share_max_s = own.iter().copied().reduce(f64::max);
    let from_line: Vec<f64> = failures
        .iter()
        .filter(|failure| failure.handler == Handler::Runguard)
        .filter_map(FailureRecord::from_line_s)
        .collect();
    let from_line_mean_s = mean(&from_line);
    let from_line_max_s = from_line.iter().copied().reduce(f64::max);
    PolicyResult {
        policy: totals.policy,
        checkpoint_minutes: totals.checkpoint_minutes,
        wall_s: totals.wall_s,
        productive_s,
        ettr,
        ettr_without_failures,
        repeats: failures.iter().filter(|failure| failure.repeat).count(),
        pages: failures
            .iter()
            .filter(|failure| failure.handler == Handler::Person)
            .count(),
        mean_downtime,
        own_share_mean_s,
        own_share_max_s,
        from_line_mean_s,
        from_line_max_s,
        other_s: (totals.wall_s - productive_s - sum.total()).max(0.0),
        excluded_nodes: totals.excluded_nodes,
        failures,
    }
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(fault: f64, exit: f64, action: f64, resumed: f64, lost: u64) -> FailureRecord {
        FailureRecord {
            cause: "Faulty GPU".into(),
            node: "node-01".into(),
            fault_s: fault,
            shown_s: None,
            exit_s: exit,
            action_s: Some(action),
            resumed_s: Some(resumed),
            lost_iterations: lost,
            repeat: false,
            handler: Handler::Runguard,
            engine_wall_ms: 500.0,
        }
    }

    #[test]
    fn downtime_phases_add_up_by_hand() {
        // Fault at 1000 s, job ends at 1010, action at 1015, training at 1315; 12 steps of 30 s lost.
        let d = failure(1000.0, 1010.0, 1015.0, 1315.0, 12).downtime(30.0);
        assert_eq!(
            d,
            Downtime {
                failing: 10.0,
                response: 5.0,
                restart: 300.0,
                lost_work: 360.0
            }
        );
        assert_eq!(d.total(), 675.0);
        // Acting before the job ends (a fatal kernel event under a running job) cuts the failing phase.
        let early = failure(1000.0, 1600.0, 1004.0, 1300.0, 0).downtime(30.0);
        assert_eq!(
            (early.failing, early.response, early.restart),
            (4.0, 0.0, 296.0)
        );
    }

    /// A day of wall time under runguard, 30 s steps, 2,700 of them kept, saves of 20 s every 30 min.
    fn a_day(excluded_nodes: usize) -> RunTotals {
        RunTotals {
            policy: Policy::Runguard,
            checkpoint_minutes: 30.0,
            wall_s: 86_400.0,
            kept_iterations: 2_700,
            seconds_per_iteration: 30.0,
            save_s: 20.0,
            excluded_nodes,
        }
    }

    #[test]
    fn ettr_is_progress_kept_over_wall_time() {
        // A day of wall time, 30 s steps, 2,700 steps kept: 81,000 s of 86,400.
        let totals = a_day(1);
        let mut repeat = failure(5000.0, 5010.0, 5012.0, 5212.0, 4);
        repeat.repeat = true;
        repeat.handler = Handler::Person;
        let result = summarize(
            totals,
            vec![failure(1000.0, 1010.0, 1015.0, 1315.0, 12), repeat],
        );
        assert!((result.ettr - 81_000.0 / 86_400.0).abs() < 1e-12);
        assert!((result.ettr_without_failures - 1800.0 / 1820.0).abs() < 1e-12);
        assert_eq!((result.repeats, result.pages), (1, 1));
        // Means: failing (10+10)/2, response (5+2)/2, restart (300+200)/2, lost (360+120)/2.
        assert_eq!(result.mean_downtime.failing, 10.0);
        assert_eq!(result.mean_downtime.response, 3.5);
        assert_eq!(result.mean_downtime.restart, 250.0);
        assert_eq!(result.mean_downtime.lost_work, 240.0);
        // Only the failure runguard handled counts for its share: 5 s + 0.5 s of its passes.
        assert_eq!(result.own_share_mean_s, Some(5.5));
        // Acting before the job's end, its share is the whole time since the fault.
        let early = failure(1000.0, 1600.0, 1004.0, 1300.0, 0);
        assert_eq!(early.own_share_s(30.0), 4.5);
        // 86,400 - 81,000 - (675 + 332) left to saves and start-ups.
        assert!((result.other_s - 4_393.0).abs() < 1e-9);
    }

    #[test]
    fn the_share_from_the_first_line_leaves_out_the_faults_own_delay() {
        // A link fails at 1000 s, NCCL prints its error at 1003.5, the job is requeued at 1009 while
        // still running: 9 s from the fault, 5.5 s of it after the line, plus 0.5 s of passes.
        let mut network = failure(1000.0, 1700.0, 1009.0, 1300.0, 0);
        network.shown_s = Some(1003.5);
        assert_eq!(network.own_share_s(30.0), 9.5);
        assert_eq!(network.from_line_s(), Some(6.0));
        // Without the simulator's record of the line, nothing is claimed.
        let unknown = failure(1000.0, 1010.0, 1015.0, 1315.0, 0);
        assert_eq!(unknown.from_line_s(), None);
        let result = summarize(a_day(0), vec![network, unknown]);
        assert_eq!(result.from_line_mean_s, Some(6.0));
        assert_eq!(result.from_line_max_s, Some(6.0));
    }
}
