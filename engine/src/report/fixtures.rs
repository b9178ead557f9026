//! Hand-made workflow histories on a fixed clock, for the tests of the report, the downtime arithmetic
//! and the cockpit's charts and timeline (`test-support` feature outside this crate).
#![allow(clippy::unwrap_used)]

use chrono::{DateTime, TimeDelta, Utc};

use super::WorkflowHistory;
use crate::model::{
    Action, ActionKind, ActionParams, ActionState, Anomaly, AnomalyKind, Attempt, BackendKind,
    Checkpoint, JobSpec, JobState, RecoveryLimits, ThroughputSample, Workflow, WorkflowStatus,
};

/// 08:00:00 plus `seconds`.
pub fn t(seconds: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
        + TimeDelta::seconds(seconds)
}

pub fn attempt(index: u32, state: JobState, times: [Option<i64>; 3]) -> Attempt {
    let [submit, start, end] = times.map(|s| s.map(t));
    Attempt {
        workflow_id: 1,
        index,
        job_id: "4201".into(),
        restart_count: index,
        nodes: vec![],
        gpus: 32,
        state,
        state_raw: state.as_str().to_uppercase(),
        reason: None,
        submit_time: submit,
        start_time: start,
        end_time: end,
        exit_code: None,
        excluded_nodes: vec![],
        log_path: None,
        last_log_time: None,
        last_iteration: None,
        last_progress_time: None,
        updated_at: end.or(start).or(submit).unwrap_or(t(0)),
    }
}

pub fn checkpoint(attempt_index: u32, iteration: u64, at: i64) -> Checkpoint {
    Checkpoint {
        workflow_id: 1,
        attempt_index,
        iteration,
        time: t(at),
        path: format!("iter_{iteration:07}"),
    }
}

pub fn sample(attempt_index: u32, iteration: u64, at: i64, tflops: f64) -> ThroughputSample {
    ThroughputSample {
        workflow_id: 1,
        attempt_index,
        time: t(at),
        iteration,
        tflops_per_gpu: tflops,
        rank: None,
        node: None,
    }
}

pub fn anomaly(attempt_index: u32, kind: AnomalyKind, at: i64) -> Anomaly {
    Anomaly {
        id: at,
        workflow_id: 1,
        attempt_index,
        kind,
        time: t(at),
        summary: format!("{} seen", kind.as_str()),
        evidence: vec![],
    }
}

pub fn requeue(attempt_index: u32, state: ActionState, planned: i64, done: i64) -> Action {
    Action {
        id: 1,
        workflow_id: 1,
        attempt_index,
        kind: ActionKind::Requeue,
        params: ActionParams::default(),
        state,
        permitted: true,
        why: "recoverable".into(),
        command: None,
        result: None,
        created_at: t(planned),
        updated_at: t(done),
    }
}

pub fn history(status: WorkflowStatus, attempts: Vec<Attempt>) -> WorkflowHistory {
    WorkflowHistory {
        workflow: Workflow {
            id: 1,
            name: "llama".into(),
            backend: BackendKind::Sim,
            spec: JobSpec::default(),
            limits: RecoveryLimits::default(),
            status,
            status_reason: None,
            succeeded: status == WorkflowStatus::Completed,
            requeues_used: 0,
            failures_since_checkpoint: 0,
            created_at: t(0),
            updated_at: t(0),
        },
        requeue_limit: 3,
        attempts,
        checkpoints: vec![],
        throughput: vec![],
        anomalies: vec![],
        attributions: vec![],
        actions: vec![],
        journal: vec![],
        narratives: vec![],
        ledger_rate: None,
    }
}

/// Attempt 0 runs 100..1000 and crashes at iteration 350 after a checkpoint of 300 at 900; the
/// crash is seen at 1010, the requeue planned at 1012 and done at 1020; attempt 1 is queued until
/// 1100, reports first at 1130 and completes at 2000.
pub fn recovered_once() -> WorkflowHistory {
    let mut failed = attempt(0, JobState::Failed, [Some(0), Some(100), Some(1000)]);
    failed.last_iteration = Some(350);
    let done = attempt(1, JobState::Completed, [Some(1020), Some(1100), Some(2000)]);
    let mut history = history(WorkflowStatus::Completed, vec![failed, done]);
    history.checkpoints = vec![checkpoint(0, 100, 400), checkpoint(0, 300, 900)];
    history.anomalies = vec![
        anomaly(0, AnomalyKind::Straggler, 500),
        anomaly(0, AnomalyKind::Crash, 1010),
    ];
    history.actions = vec![requeue(0, ActionState::Done, 1012, 1020)];
    history.throughput = vec![
        sample(0, 340, 980, 400.0),
        sample(1, 310, 1130, 395.0),
        sample(1, 320, 1160, 401.0),
    ];
    history
}
