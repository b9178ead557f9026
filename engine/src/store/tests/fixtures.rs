//! Rows with every field set, for the round-trip tests.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use crate::model::{
    Action, ActionKind, ActionParams, ActionState, Anomaly, AnomalyKind, Attempt, Attribution,
    BackendKind, Component, Culprit, JobSpec, JobState, RecoveryLimits, Remedy, Workflow,
    WorkflowStatus,
};
use crate::store::Store;

pub(super) fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
}

pub(super) fn recovering_workflow() -> Workflow {
    Workflow {
        id: 0,
        name: "pretrain".into(),
        backend: BackendKind::Slurm,
        spec: JobSpec {
            name: "pretrain".into(),
            user: "ada".into(),
            nodes: 4,
            gpus_per_node: 8,
            partition: Some("gpu".into()),
            ..JobSpec::default()
        },
        limits: RecoveryLimits {
            max_requeue_times: Some(3),
            auto_resume_mode: Some("requeue".into()),
            allowed_actions: None,
        },
        status: WorkflowStatus::Recovering,
        status_reason: Some("node-07 lost its link".into()),
        succeeded: false,
        requeues_used: 2,
        failures_since_checkpoint: 1,
        created_at: at(0),
        updated_at: at(5),
    }
}

pub(super) fn attempt(workflow_id: i64, index: u32, job_id: &str) -> Attempt {
    Attempt {
        workflow_id,
        index,
        job_id: job_id.into(),
        restart_count: 1,
        nodes: vec!["node-01".into(), "node-02".into()],
        gpus: 16,
        state: JobState::NodeFail,
        state_raw: "NODE_FAIL".into(),
        reason: Some("NodeDown".into()),
        submit_time: Some(at(10)),
        start_time: Some(at(20)),
        end_time: Some(at(30)),
        exit_code: Some(137),
        excluded_nodes: vec!["node-07".into()],
        log_path: Some(PathBuf::from("/scratch/run/log.txt")),
        last_log_time: Some(at(29)),
        last_iteration: Some(1200),
        last_progress_time: Some(at(28)),
        updated_at: at(31),
    }
}

pub(super) fn action(workflow_id: i64, state: ActionState, updated: i64) -> Action {
    Action {
        id: 0,
        workflow_id,
        attempt_index: 1,
        kind: ActionKind::Requeue,
        params: ActionParams {
            job_id: Some("4200".into()),
            exclude_nodes: vec!["node-07".into()],
            restart_count: Some(1),
            ..ActionParams::default()
        },
        state,
        permitted: true,
        why: "an NCCL timeout on node-07".into(),
        command: Some("scontrol requeue 4200".into()),
        result: None,
        created_at: at(40),
        updated_at: at(updated),
    }
}

pub(super) fn anomaly(workflow_id: i64, kind: AnomalyKind, secs: i64) -> Anomaly {
    Anomaly {
        id: 0,
        workflow_id,
        attempt_index: 1,
        kind,
        time: at(secs),
        summary: "no log line for 20 minutes".into(),
        evidence: vec!["last line at 09:00".into()],
    }
}

pub(super) fn attribution(workflow_id: i64, secs: i64) -> Attribution {
    Attribution {
        id: 0,
        workflow_id,
        attempt_index: 1,
        category: "nccl_timeout".into(),
        component: Component::Network,
        culprit: Culprit {
            node: Some("node-07".into()),
            rank: Some(12),
            gpu: None,
            suspects: Vec::new(),
        },
        confidence: 0.75,
        recoverable: true,
        signature: Some("nccl-watchdog".into()),
        explanation: "rank 12 on node-07 timed out".into(),
        remedies: vec![Remedy {
            kind: crate::model::RemedyKind::Requeue,
            description: "requeue without node-07".into(),
            params: crate::model::RemedyParams {
                exclude_culprit: true,
                ..Default::default()
            },
        }],
        evidence: vec!["Watchdog caught collective operation timeout".into()],
        time: at(secs),
    }
}

pub(super) fn store_with_a_workflow() -> (Store, i64) {
    let mut store = Store::open_in_memory().unwrap();
    let id = store
        .write(|db| db.insert_workflow(&recovering_workflow()))
        .unwrap();
    (store, id)
}

/// A store with [`recovering_workflow`] and one proposed action of it: (store, workflow id, action id).
pub(super) fn store_with_an_action() -> (Store, i64, i64) {
    let (mut store, id) = store_with_a_workflow();
    let action_id = store
        .write(|db| db.insert_action(&action(id, ActionState::Proposed, 41)))
        .unwrap();
    (store, id, action_id)
}
