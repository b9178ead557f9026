//! The ledger's weights (`data/ledger.toml`): how much each kind of incident counts against a node and
//! where its states begin.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;

use crate::telemetry::node_signals::{NodeSignal, SignalKind};

const RULES: &str = include_str!("../../../data/ledger.toml");

/// The weights and thresholds of the node ledger.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    pub suspect_score: f64,
    pub quarantine_score: f64,
    pub half_life_hours: f64,
    pub probation_relapse_weight: f64,
    /// Weight of a job failure attributed to a node, by category.
    pub attribution: BTreeMap<String, f64>,
    /// Weight of a node signal, by kind (see [`Rules::signal_weight`]).
    pub signal: BTreeMap<String, f64>,
    pub scheduler: BTreeMap<String, f64>,
    pub health_check: BTreeMap<String, f64>,
}

static DEFAULT: LazyLock<Rules> = LazyLock::new(|| {
    // Compiled in and checked by the tests below; should it ever fail to read, nothing is weighed
    // (no node is kept out on rules that were not understood).
    toml::from_str(RULES).unwrap_or_else(|_| Rules {
        suspect_score: f64::INFINITY,
        quarantine_score: f64::INFINITY,
        half_life_hours: 72.0,
        probation_relapse_weight: f64::INFINITY,
        attribution: BTreeMap::new(),
        signal: BTreeMap::new(),
        scheduler: BTreeMap::new(),
        health_check: BTreeMap::new(),
    })
});

impl Rules {
    /// The rules of `data/ledger.toml`.
    pub fn standard() -> &'static Rules {
        &DEFAULT
    }

    /// What a failure of `category` attributed to a node counts against it; `None` for categories that
    /// are no evidence against a node (a job's own failure).
    pub fn attribution_weight(&self, category: &str) -> Option<f64> {
        self.attribution.get(category).copied().filter(|w| *w > 0.0)
    }

    /// The ledger's name for a signal and what it counts; fatal signals count `fatal` whatever their
    /// kind.
    pub fn signal_weight(&self, signal: &NodeSignal) -> (String, f64) {
        let class = if signal.fatal {
            "fatal"
        } else {
            signal_class(&signal.kind)
        };
        let name = match &signal.kind {
            SignalKind::Xid { code } => format!("xid_{code}"),
            kind => signal_class(kind).to_string(),
        };
        (name, self.signal.get(class).copied().unwrap_or(0.0))
    }

    pub fn scheduler_weight(&self, what: &str) -> f64 {
        self.scheduler.get(what).copied().unwrap_or(0.0)
    }
}

/// The key of a signal kind in the `[signal]` weights.
fn signal_class(kind: &SignalKind) -> &'static str {
    match kind {
        SignalKind::Xid { .. } => "xid",
        SignalKind::EccUncorrectable => "ecc_uncorrectable",
        SignalKind::EccCorrectable => "ecc_correctable",
        SignalKind::NvlinkError => "nvlink",
        SignalKind::PcieAer { .. } => "pcie_aer",
        SignalKind::Thermal { .. } => "thermal",
        SignalKind::ClockSlowdown { .. } => "clock_slowdown",
        SignalKind::GpuLost => "gpu_lost",
        // Any other kernel line a signature knows (OOM killer, mlx5, panics).
        SignalKind::Health { system, .. } if system == "kernel" => "kernel",
        SignalKind::Health { status, .. } if status.eq_ignore_ascii_case("failure") => {
            "health_failure"
        }
        SignalKind::Health { .. } => "health_warning",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_load_and_name_only_taxonomy_categories() {
        let rules: Rules = toml::from_str(RULES).unwrap();
        assert!(rules.suspect_score < rules.quarantine_score);
        let categories: Vec<String> = crate::attribute::catalog::taxonomy()
            .iter()
            .map(|category| category.id.clone())
            .collect();
        for category in rules.attribution.keys() {
            assert!(categories.contains(category), "{category} is no category");
        }
    }

    #[test]
    fn a_job_s_own_failure_is_no_evidence_against_its_node() {
        let rules = Rules::standard();
        for category in [
            "app_exception",
            "cuda_oom",
            "dataloader_oom",
            "config_error",
            "preemption",
        ] {
            assert_eq!(rules.attribution_weight(category), None, "{category}");
        }
        assert!(rules.attribution_weight("xid_79").unwrap() >= rules.quarantine_score);
        assert!(rules.attribution_weight("nccl_timeout").unwrap() < rules.suspect_score * 2.0);
    }
}
