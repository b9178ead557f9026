//! A trace definition: the published failure mix of a training run (its root causes with their
//! counts), the cluster and period it was seen on, and how the replay plays it (the simulator fault
//! of each cause, whether it stays with its node, the paged person's reaction times).

use std::path::Path;

use chrono::{DateTime, Utc, Weekday};
use serde::Deserialize;

use super::ReplayError;
use crate::backend::sim::{FaultKind, MAX_NODES};

/// The built-in trace, by name, with its TOML text.
const BUILTINS: [(&str, &str); 1] = [(
    "llama3-405b",
    include_str!("../../../data/traces/llama3-405b.toml"),
)];

/// A whole trace file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    pub name: String,
    pub title: String,
    /// Where the numbers come from.
    pub source: String,
    pub cluster: SourceCluster,
    pub run: RunShape,
    pub replay: ReplayShape,
    pub paging: Paging,
    pub blind: Blind,
    #[serde(rename = "cause")]
    pub causes: Vec<Cause>,
}

/// The cluster and period the failures were counted on.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceCluster {
    pub gpus: u32,
    pub gpus_per_node: u32,
    pub days: f64,
    /// Unexpected interruptions in the period; the causes' counts add up to it.
    pub interruptions: u32,
}

/// The training run being replayed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunShape {
    pub seconds_per_iteration: f64,
    #[serde(default = "default_log_interval")]
    pub log_interval: u64,
    /// Silent start-up of every attempt before its first step.
    pub restart_s: u64,
    /// How long a checkpoint save holds the run.
    pub save_s: u64,
    pub collective_timeout_s: u64,
}

/// The replayed cluster and its defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayShape {
    /// Nodes of the job.
    pub nodes: u32,
    /// Idle nodes beside the job, to run on when some are left out.
    pub spare_nodes: u32,
    pub checkpoint_minutes: Vec<f64>,
    pub default_checkpoint_minutes: f64,
    /// Start of the simulated clock, in the paged person's time zone.
    pub start: DateTime<Utc>,
}

/// A paged person's reaction.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paging {
    pub source: String,
    /// `[from, to)` hours of the working day.
    pub working_hours: [u32; 2],
    pub working_days: Vec<Weekday>,
    pub ack_working_minutes: f64,
    pub ack_off_hours_minutes: f64,
    pub diagnose_minutes: f64,
}

/// The blind requeue's escape from a crash loop: this many failures within the window page a person.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blind {
    pub crash_loop_alarm_after: u32,
    pub crash_loop_window_minutes: f64,
}

/// One root cause of the table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cause {
    pub name: String,
    pub component: String,
    pub count: u32,
    /// Percent of the interruptions, as published.
    pub share: f64,
    /// The simulator fault that writes this cause's log lines.
    pub fault: FaultKind,
    /// The fault stays with the node until it is taken out.
    pub stays: bool,
    /// How long a run placed on the node trains before the fault strikes again (when it stays).
    #[serde(default)]
    pub recur_after_s: Option<u64>,
}

fn default_log_interval() -> u64 {
    1
}

impl Trace {
    /// Names of the traces compiled into the binary.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTINS.iter().map(|(name, _)| *name).collect()
    }

    /// A built-in trace name, else a path to a trace file.
    pub fn resolve(name_or_path: &str) -> Result<Trace, ReplayError> {
        if let Some((_, text)) = BUILTINS.iter().find(|(name, _)| *name == name_or_path) {
            return Self::parse(text, &format!("builtin:{name_or_path}"));
        }
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|source| ReplayError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks a trace; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Trace, ReplayError> {
        let trace: Trace = toml::from_str(text).map_err(|source| ReplayError::Parse {
            origin: origin.to_string(),
            source: Box::new(source),
        })?;
        trace.check().map_err(|message| ReplayError::Invalid {
            origin: origin.to_string(),
            message,
        })?;
        Ok(trace)
    }

    fn check(&self) -> Result<(), String> {
        let c = &self.cluster;
        if c.gpus == 0 || c.gpus_per_node == 0 || !c.gpus.is_multiple_of(c.gpus_per_node) {
            return Err("cluster.gpus must be a positive multiple of cluster.gpus_per_node".into());
        }
        if !(c.days.is_finite() && c.days > 0.0) {
            return Err("cluster.days must be positive".into());
        }
        if self.causes.is_empty() {
            return Err("at least one [[cause]] is needed".into());
        }
        let total: u32 = self.causes.iter().map(|cause| cause.count).sum();
        if total != c.interruptions {
            return Err(format!(
                "the causes' counts add up to {total}, not to cluster.interruptions = {}",
                c.interruptions
            ));
        }
        for cause in &self.causes {
            if matches!(cause.fault, FaultKind::Hang | FaultKind::Straggler) {
                return Err(format!(
                    "cause `{}`: fault `{}` does not interrupt a run",
                    cause.name,
                    cause.fault.as_str()
                ));
            }
            if cause.stays && cause.recur_after_s.is_none() {
                return Err(format!(
                    "cause `{}` stays with its node: recur_after_s is needed",
                    cause.name
                ));
            }
        }
        let r = &self.run;
        if !(r.seconds_per_iteration.is_finite() && r.seconds_per_iteration >= 1.0) {
            return Err("run.seconds_per_iteration must be at least 1".into());
        }
        if r.log_interval == 0 {
            return Err("run.log_interval must be at least 1".into());
        }
        let p = &self.replay;
        if p.nodes == 0 || p.nodes.saturating_add(p.spare_nodes) > MAX_NODES {
            return Err(format!(
                "replay.nodes must be 1..={MAX_NODES} with the spares"
            ));
        }
        if p.checkpoint_minutes.is_empty()
            || p.checkpoint_minutes
                .iter()
                .chain([&p.default_checkpoint_minutes])
                .any(|m| !(m.is_finite() && *m > 0.0))
        {
            return Err("replay.checkpoint_minutes must be positive".into());
        }
        let g = &self.paging;
        if g.working_hours[0] >= g.working_hours[1] || g.working_hours[1] > 24 {
            return Err("paging.working_hours must be [from, to) within 0..=24".into());
        }
        for minutes in [
            g.ack_working_minutes,
            g.ack_off_hours_minutes,
            g.diagnose_minutes,
        ] {
            if !(minutes.is_finite() && minutes >= 0.0) {
                return Err("paging minutes must be zero or more".into());
            }
        }
        if self.blind.crash_loop_alarm_after == 0
            || !(self.blind.crash_loop_window_minutes.is_finite()
                && self.blind.crash_loop_window_minutes > 0.0)
        {
            return Err(
                "blind.crash_loop_alarm_after must be at least 1 and the window positive".into(),
            );
        }
        Ok(())
    }

    /// Causes whose published share does not match their count (shares are rounded to one decimal),
    /// as warnings: the counts drive the replay.
    pub fn share_mismatches(&self) -> Vec<String> {
        let total: u32 = self.causes.iter().map(|cause| cause.count).sum();
        self.causes
            .iter()
            .filter_map(|cause| {
                let share = 100.0 * f64::from(cause.count) / f64::from(total.max(1));
                ((share - cause.share).abs() > 0.1).then(|| {
                    format!(
                        "cause `{}`: published share {} % but {} of {total} is {share:.1} %; the count is used",
                        cause.name, cause.share, cause.count
                    )
                })
            })
            .collect()
    }

    /// Nodes of the source cluster.
    pub fn source_nodes(&self) -> u32 {
        self.cluster.gpus / self.cluster.gpus_per_node
    }

    /// The source's interruptions per node-hour.
    pub fn failures_per_node_hour(&self) -> f64 {
        f64::from(self.cluster.interruptions)
            / (f64::from(self.source_nodes()) * self.cluster.days * 24.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_llama3_table_parses_and_adds_up_to_419() {
        let trace = Trace::resolve("llama3-405b").unwrap();
        assert_eq!(trace.causes.len(), 18);
        assert_eq!(trace.source_nodes(), 2048);
        let gpu = trace
            .causes
            .iter()
            .find(|c| c.name == "Faulty GPU")
            .unwrap();
        assert_eq!(
            (gpu.count, gpu.fault, gpu.stays),
            (148, FaultKind::Xid79, true)
        );
        // The paper prints 30.1 % beside 148 of 419 (35.3 %); every other share matches its count.
        let warnings = trace.share_mismatches();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("Faulty GPU"), "{warnings:?}");
        let rate = trace.failures_per_node_hour();
        assert!((rate - 419.0 / (2048.0 * 54.0 * 24.0)).abs() < 1e-12);
    }

    fn small(causes: &str) -> String {
        format!(
            "name = \"t\"\ntitle = \"t\"\nsource = \"s\"\n[cluster]\ngpus = 16\ngpus_per_node = 8\n\
             days = 1\ninterruptions = 3\n[run]\nseconds_per_iteration = 10\nrestart_s = 10\nsave_s = 1\n\
             collective_timeout_s = 60\n[replay]\nnodes = 2\nspare_nodes = 1\ncheckpoint_minutes = [5]\n\
             default_checkpoint_minutes = 5\nstart = \"2026-01-05T00:00:00Z\"\n[paging]\nsource = \"s\"\n\
             working_hours = [9, 18]\nworking_days = [\"mon\"]\nack_working_minutes = 5\n\
             ack_off_hours_minutes = 30\ndiagnose_minutes = 1\n[blind]\ncrash_loop_alarm_after = 3\ncrash_loop_window_minutes = 360\n{causes}"
        )
    }

    #[test]
    fn counts_that_do_not_add_up_are_refused() {
        let text = small(
            "[[cause]]\nname = \"a\"\ncomponent = \"GPU\"\ncount = 2\nshare = 100\nfault = \"xid79\"\nstays = false\n",
        );
        let err = Trace::parse(&text, "t").unwrap_err().to_string();
        assert!(err.contains("add up to 2"), "{err}");
    }

    #[test]
    fn a_share_that_contradicts_its_count_is_a_warning() {
        let text = small(
            "[[cause]]\nname = \"a\"\ncomponent = \"GPU\"\ncount = 1\nshare = 50\nfault = \"xid79\"\nstays = false\n\
             [[cause]]\nname = \"b\"\ncomponent = \"GPU\"\ncount = 2\nshare = 66.7\nfault = \"app_bug\"\nstays = false\n",
        );
        let warnings = Trace::parse(&text, "t").unwrap().share_mismatches();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("`a`"), "{warnings:?}");
    }

    #[test]
    fn a_fault_that_stays_needs_its_recurrence_and_unknown_faults_are_refused() {
        let stays = small(
            "[[cause]]\nname = \"a\"\ncomponent = \"GPU\"\ncount = 3\nshare = 100\nfault = \"xid48\"\nstays = true\n",
        );
        assert!(
            Trace::parse(&stays, "t")
                .unwrap_err()
                .to_string()
                .contains("recur_after_s")
        );
        let unknown = small(
            "[[cause]]\nname = \"a\"\ncomponent = \"GPU\"\ncount = 3\nshare = 100\nfault = \"melts\"\nstays = false\n",
        );
        assert!(Trace::parse(&unknown, "t").is_err());
        let fine = small(
            "[[cause]]\nname = \"a\"\ncomponent = \"GPU\"\ncount = 3\nshare = 100\nfault = \"xid48\"\nstays = true\nrecur_after_s = 60\n",
        );
        assert_eq!(Trace::parse(&fine, "t").unwrap().causes[0].count, 3);
    }
}
