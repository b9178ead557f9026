//! The downtime runguard saved: each recovery's response (detection, analysis and the requeue, as the
//! recovery report splits it) against a person doing the same by hand in a fixed baseline time. The
//! queue wait and the checkpoint load after the requeue are the same either way, so they are left out.

use chrono::TimeDelta;
use serde::Serialize;

use super::history::{RecoveryTime, Window, hours};

/// The hand-recovery baseline unless one is given: a failure noticed from an alert or a dashboard and
/// requeued by an on-call person within two hours.
pub const DEFAULT_BASELINE: TimeDelta = TimeDelta::hours(2);

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SavedReport {
    /// Recoveries of failures inside the window that runguard's restart completed.
    pub recoveries: usize,
    pub baseline_minutes: f64,
    /// Mean detection + analysis + requeue time runguard took.
    pub mean_response_minutes: f64,
    /// Σ max(0, baseline − response).
    pub saved_hours: f64,
    /// The same, times each failed job's GPUs.
    pub saved_gpu_hours: f64,
}

pub fn saved(recoveries: &[RecoveryTime], window: &Window, baseline: TimeDelta) -> SavedReport {
    let responses: Vec<(TimeDelta, u32)> = recoveries
        .iter()
        .filter(|r| window.contains(r.failed_at))
        .filter_map(|r| Some((r.response?, r.gpus)))
        .collect();
    let baseline_hours = hours(baseline);
    let mut saved_hours = 0.0;
    let mut saved_gpu_hours = 0.0;
    let mut response_hours = 0.0;
    for (response, gpus) in &responses {
        let response = hours(*response).max(0.0);
        response_hours += response;
        let saved = (baseline_hours - response).max(0.0);
        saved_hours += saved;
        saved_gpu_hours += saved * f64::from(*gpus);
    }
    SavedReport {
        recoveries: responses.len(),
        baseline_minutes: baseline_hours * 60.0,
        mean_response_minutes: if responses.is_empty() {
            0.0
        } else {
            response_hours * 60.0 / responses.len() as f64
        },
        saved_hours,
        saved_gpu_hours,
    }
}
