//! The recovery policy as a pure function: no I/O, no clock, no randomness.
//!
//! Rules (the AJR guide's): requeue excluding the culprit; at most min(system, job) requeues; stop a crash
//! loop after N consecutive failed attempts without a new checkpoint; never requeue a non-recoverable
//! failure. Intents the whitelist does not permit are only proposed.

use serde::Serialize;

use crate::backend::Capabilities;
use crate::config::{RecoveryConfig, RecoveryMode};
use crate::model::{
    ActionKind, ActionParams, AnomalyKind, Attempt, Attribution, Component, Remedy, RemedyKind,
    SpecChange, Workflow, WorkflowStatus,
};

/// The policy's knobs, from the config and the engine's mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub system_max_requeues: u32,
    pub crash_loop_threshold: u32,
    pub mode: RecoveryMode,
    pub whitelist: Vec<ActionKind>,
    pub drain_culprit_nodes: bool,
    /// Fewest usable nodes a restart may have (0: the job's node count).
    pub min_nodes: u32,
    /// Without `--auto` nothing runs on its own: every intent waits for approval.
    pub propose_only: bool,
    /// What the backend can do: one that re-creates workloads with a changed spec (Kubernetes) turns
    /// the catalog's fixes into a proposed re-creation instead of a stop.
    pub capabilities: Capabilities,
}

impl Policy {
    pub fn from_config(config: &RecoveryConfig, propose_only: bool) -> Self {
        Self {
            system_max_requeues: config.system_max_requeues,
            crash_loop_threshold: config.crash_loop_threshold,
            mode: config.mode,
            whitelist: config.whitelist.clone(),
            drain_culprit_nodes: config.drain_culprit_nodes,
            min_nodes: config.min_nodes,
            propose_only,
            capabilities: Capabilities::default(),
        }
    }

    /// Whether the whitelist lets `kind` run without approval.
    pub fn permits(&self, kind: ActionKind) -> bool {
        self.whitelist.contains(&kind)
    }

    /// The effective requeue limit of a workflow: the smaller of the system's and the job's.
    pub fn requeue_limit(&self, workflow: &Workflow) -> u32 {
        workflow
            .limits
            .max_requeue_times
            .map_or(self.system_max_requeues, |job| {
                job.min(self.system_max_requeues)
            })
    }
}

/// Something the engine wants done; stored before it runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Intent {
    pub kind: ActionKind,
    pub params: ActionParams,
    /// The whitelist allows it.
    pub permitted: bool,
    /// It may run without a human (permitted, and the engine runs with `--auto`).
    pub auto_approved: bool,
    pub why: String,
}

/// What the policy concluded about one failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub intents: Vec<Intent>,
    /// The workflow's next status: `recovering`, or `completed` when recovery stops.
    pub status: WorkflowStatus,
    /// Why recovery stopped, when it did.
    pub stop_reason: Option<String>,
    /// The crash-loop counter after counting this failure.
    pub failures_since_checkpoint: u32,
    /// Recovery stopped because of the crash-loop rule.
    pub crash_loop: bool,
    /// One line for the journal.
    pub summary: String,
}

/// Decides what to do about the failure of `attempt` (the workflow's latest), attributed as `attribution`.
/// `usable_nodes` are the nodes of the job's partition that can run jobs now, when the backend knows.
pub fn decide(
    workflow: &Workflow,
    attempt: &Attempt,
    anomaly: AnomalyKind,
    attribution: &Attribution,
    policy: &Policy,
    usable_nodes: Option<&[String]>,
) -> Decision {
    let failures = workflow.failures_since_checkpoint.saturating_add(1);
    let limit = policy.requeue_limit(workflow);
    let culprit = attribution.culprit.node.clone();
    let mut exclude = attempt.excluded_nodes.clone();
    // A preempted or timed-out job's node is a victim of the scheduler, not a culprit.
    if let Some(node) = &culprit
        && attribution.component != Component::Scheduler
        && !exclude.contains(node)
    {
        exclude.push(node.clone());
    }
    let needed = if policy.min_nodes > 0 {
        policy.min_nodes
    } else {
        workflow.spec.nodes.max(1)
    };
    let remaining = usable_nodes
        .map(|usable| usable.iter().filter(|node| !exclude.contains(node)).count() as u32);
    let where_ = culprit
        .as_deref()
        .map(|node| format!(" on {node}"))
        .unwrap_or_default();
    let what = format!("{}{where_}", attribution.category);

    // The catalog's fix, where the backend can apply it: the same spec would fail the same way.
    let changes = if policy.capabilities.recreate {
        spec_changes(&attribution.remedies, attribution.recoverable)
    } else {
        Vec::new()
    };
    let stop_reason = if !attribution.recoverable && changes.is_empty() {
        Some(format!(
            "not recoverable by requeue: {what} ({}); fix the cause and resubmit",
            attribution.component.as_str()
        ))
    } else if failures >= policy.crash_loop_threshold {
        Some(format!(
            "crash loop: {failures} consecutive failed attempts without a new checkpoint (threshold {})",
            policy.crash_loop_threshold
        ))
    } else if workflow.requeues_used >= limit {
        Some(format!(
            "requeue limit reached: {} of {limit} used (min of system {} and job {})",
            workflow.requeues_used,
            policy.system_max_requeues,
            workflow
                .limits
                .max_requeue_times
                .map_or("unset".to_string(), |n| n.to_string())
        ))
    } else if let Some(remaining) = remaining
        && remaining < needed
    {
        Some(format!(
            "too few usable nodes: {remaining} left in partition {} once {} {} excluded, and the job \
             needs at least {needed}; it is not restarted on fewer",
            workflow.spec.partition.as_deref().unwrap_or("(default)"),
            if exclude.is_empty() {
                "nothing".to_string()
            } else {
                exclude.join(",")
            },
            if exclude.len() == 1 { "is" } else { "are" },
        ))
    } else {
        None
    };

    let intent = |kind: ActionKind, params: ActionParams, why: String| {
        // The job's own list can only narrow the configured whitelist.
        let permitted = policy.permits(kind)
            && workflow
                .limits
                .allowed_actions
                .as_ref()
                .is_none_or(|allowed| allowed.contains(&kind));
        Intent {
            kind,
            params,
            permitted,
            auto_approved: permitted && !policy.propose_only,
            why,
        }
    };

    let mut intents = Vec::new();
    if let Some(reason) = &stop_reason {
        // A hung job still holds its nodes: free them.
        if anomaly == AnomalyKind::Hang && !attempt.state.is_terminal() {
            intents.push(intent(
                ActionKind::Cancel,
                ActionParams {
                    job_id: Some(attempt.job_id.clone()),
                    reason: Some(reason.clone()),
                    ..ActionParams::default()
                },
                format!("cancel the hung job: recovery stopped ({reason})"),
            ));
        }
    } else if !changes.is_empty() {
        let exclusion = if exclude.is_empty() {
            String::new()
        } else {
            format!(" excluding {}", exclude.join(","))
        };
        let described = changes
            .iter()
            .map(SpecChange::describe)
            .collect::<Vec<_>>()
            .join(", ");
        intents.push(intent(
            ActionKind::Recreate,
            ActionParams {
                job_id: Some(attempt.job_id.clone()),
                exclude_nodes: exclude,
                restart_count: Some(attempt.restart_count),
                reason: Some(what.clone()),
                changes,
                ..ActionParams::default()
            },
            format!(
                "{what}: re-create from the last checkpoint with {described}{exclusion}, as the catalog \
                 recommends (restart {} of {limit})",
                workflow.requeues_used + 1
            ),
        ));
    } else {
        let kind = match policy.mode {
            RecoveryMode::Requeue => ActionKind::Requeue,
            RecoveryMode::Resubmit => ActionKind::Resubmit,
        };
        let exclusion = if exclude.is_empty() {
            String::new()
        } else {
            format!(" excluding {}", exclude.join(","))
        };
        intents.push(intent(
            kind,
            ActionParams {
                job_id: Some(attempt.job_id.clone()),
                exclude_nodes: exclude,
                restart_count: Some(attempt.restart_count),
                reason: Some(what.clone()),
                ..ActionParams::default()
            },
            format!(
                "{what}: {} from the last checkpoint{exclusion} (requeue {} of {limit})",
                kind.as_str(),
                workflow.requeues_used + 1
            ),
        ));
    }
    if policy.drain_culprit_nodes
        && attribution.recoverable
        && let Some(node) = &culprit
        && matches!(
            attribution.component,
            Component::Gpu | Component::Network | Component::Infrastructure
        )
    {
        intents.push(intent(
            ActionKind::DrainNode,
            ActionParams {
                node: Some(node.clone()),
                reason: Some(format!("runguard: {}", attribution.category)),
                ..ActionParams::default()
            },
            format!("{what}: take {node} out of scheduling until it is checked"),
        ));
    }

    let summary = match &stop_reason {
        Some(reason) => format!(
            "attempt {} {}: stop recovering: {reason}",
            attempt.index,
            anomaly.as_str()
        ),
        None => format!(
            "attempt {} {}: {}",
            attempt.index,
            anomaly.as_str(),
            intents
                .first()
                .map(|intent| intent.why.clone())
                .unwrap_or_default()
        ),
    };
    Decision {
        intents,
        status: if stop_reason.is_some() {
            WorkflowStatus::Completed
        } else {
            WorkflowStatus::Recovering
        },
        crash_loop: stop_reason
            .as_deref()
            .is_some_and(|reason| reason.starts_with("crash loop")),
        stop_reason,
        failures_since_checkpoint: failures,
        summary,
    }
}

/// The spec changes of the first recommended fix that names any the backend can make. A failure a
/// plain requeue recovers only takes an explicit `recreate_with_patch`; one it does not also takes a
/// `config_fix`.
pub fn spec_changes(remedies: &[Remedy], recoverable: bool) -> Vec<SpecChange> {
    remedies
        .iter()
        .filter(|remedy| match remedy.kind {
            RemedyKind::RecreateWithPatch => true,
            RemedyKind::ConfigFix => !recoverable,
            _ => false,
        })
        .map(|remedy| remedy.params.spec_changes())
        .find(|changes| !changes.is_empty())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::model::{Culprit, JobSpec, JobState, RecoveryLimits};

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-05T09:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn workflow() -> Workflow {
        Workflow {
            id: 1,
            name: "llama".into(),
            backend: "sim".into(),
            spec: JobSpec::default(),
            limits: RecoveryLimits {
                max_requeue_times: Some(5),
                auto_resume_mode: Some("requeue".into()),
                allowed_actions: None,
            },
            status: WorkflowStatus::Enabled,
            status_reason: None,
            succeeded: false,
            requeues_used: 0,
            failures_since_checkpoint: 0,
            created_at: now(),
            updated_at: now(),
        }
    }

    fn attempt(state: JobState) -> Attempt {
        Attempt {
            workflow_id: 1,
            index: 0,
            job_id: "4201".into(),
            restart_count: 0,
            nodes: vec!["node-05".into(), "node-07".into()],
            gpus: 16,
            state,
            state_raw: state.as_str().to_uppercase(),
            reason: None,
            submit_time: None,
            start_time: None,
            end_time: None,
            exit_code: Some(1),
            excluded_nodes: vec!["node-02".into()],
            log_path: None,
            last_log_time: None,
            last_iteration: None,
            last_progress_time: None,
            updated_at: now(),
        }
    }

    fn attribution(category: &str, component: Component, recoverable: bool) -> Attribution {
        Attribution {
            id: 0,
            workflow_id: 1,
            attempt_index: 0,
            category: category.into(),
            component,
            culprit: Culprit {
                node: Some("node-07".into()),
                ..Culprit::default()
            },
            confidence: 0.8,
            recoverable,
            signature: None,
            explanation: String::new(),
            evidence: vec![],
            time: now(),
            remedies: vec![],
        }
    }

    fn policy() -> Policy {
        Policy::from_config(&RecoveryConfig::default(), false)
    }

    /// A remedy as the catalog would give it.
    fn remedy(kind: &str, params: serde_json::Value) -> Remedy {
        serde_json::from_value(
            serde_json::json!({"kind": kind, "description": "", "params": params}),
        )
        .unwrap()
    }

    #[test]
    fn where_the_spec_can_change_a_fix_becomes_a_proposed_re_creation_instead_of_a_stop() {
        let workflow = workflow();
        let failed = attempt(JobState::Failed);
        let mut shm = attribution("dataloader_shm", Component::HostMemory, false);
        shm.remedies = vec![
            remedy("stop", serde_json::json!({})),
            remedy(
                "recreate_with_patch",
                serde_json::json!({"shm_size": "16Gi"}),
            ),
            remedy("config_fix", serde_json::json!({"num_workers": 2})),
        ];
        // Slurm: nothing to apply, the run stops.
        let stopped = decide(
            &workflow,
            &failed,
            AnomalyKind::Crash,
            &shm,
            &policy(),
            None,
        );
        assert_eq!(stopped.status, WorkflowStatus::Completed);
        // Kubernetes: the first fix, proposed (not in the default whitelist).
        let mut kubernetes = policy();
        kubernetes.capabilities.recreate = true;
        let decision = decide(
            &workflow,
            &failed,
            AnomalyKind::Crash,
            &shm,
            &kubernetes,
            None,
        );
        assert_eq!(decision.status, WorkflowStatus::Recovering);
        let recreate = &decision.intents[0];
        assert_eq!(recreate.kind, ActionKind::Recreate);
        assert!(!recreate.permitted && !recreate.auto_approved);
        assert_eq!(
            recreate.params.changes,
            vec![SpecChange::SharedMemory {
                size_limit: "16Gi".into()
            }]
        );
        assert!(recreate.why.contains("/dev/shm"), "{}", recreate.why);
    }

    #[test]
    fn a_job_s_own_whitelist_narrows_the_configured_one_and_never_widens_it() {
        let mut workflow = workflow();
        workflow.limits.allowed_actions = Some(vec![ActionKind::Cancel, ActionKind::DrainNode]);
        let failed = attempt(JobState::Failed);
        let nccl = attribution("nccl_timeout", Component::Network, true);
        let decision = decide(
            &workflow,
            &failed,
            AnomalyKind::Crash,
            &nccl,
            &policy(),
            None,
        );
        let requeue = decision
            .intents
            .iter()
            .find(|intent| intent.kind == ActionKind::Requeue)
            .unwrap();
        assert!(!requeue.permitted, "the job does not allow it");
        let drain = decision
            .intents
            .iter()
            .find(|intent| intent.kind == ActionKind::DrainNode);
        assert!(
            drain.is_none_or(|drain| !drain.permitted),
            "the config does not allow it"
        );
    }

    #[test]
    fn remedy_parameters_map_to_spec_changes() {
        let changes = spec_changes(
            &[remedy(
                "config_fix",
                serde_json::json!({
                    "micro_batch_size": "half",
                    "env": {"NCCL_SOCKET_IFNAME": "ib0", "TMPDIR": "/scratch/$USER/tmp"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                }),
            )],
            false,
        );
        assert_eq!(
            changes,
            vec![
                SpecChange::HalveMicroBatch,
                SpecChange::Env {
                    name: "NCCL_SOCKET_IFNAME".into(),
                    value: "ib0".into()
                },
                SpecChange::Toleration {
                    key: "nvidia.com/gpu".into(),
                    operator: "Exists".into(),
                    value: None,
                    effect: Some("NoSchedule".into())
                },
            ]
        );
        assert!(
            spec_changes(
                &[remedy("requeue", serde_json::json!({"num_workers": 2}))],
                false
            )
            .is_empty()
        );
        // A failure a requeue recovers is not changed on a mere suggestion.
        assert!(
            spec_changes(
                &[remedy("config_fix", serde_json::json!({"num_workers": 2}))],
                true
            )
            .is_empty()
        );
    }

    #[test]
    fn does_not_restart_on_fewer_nodes_than_the_job_needs() {
        let mut workflow = workflow();
        workflow.spec.nodes = 2;
        workflow.spec.partition = Some("gpu".into());
        let failed = attempt(JobState::Failed);
        let nccl = attribution("nccl_timeout", Component::Network, true);
        let usable: Vec<String> = ["node-02", "node-07", "node-09", "node-11"]
            .map(String::from)
            .to_vec();
        // node-02 was excluded before and node-07 is the culprit: two usable nodes remain, enough.
        let decision = decide(
            &workflow,
            &failed,
            AnomalyKind::Crash,
            &nccl,
            &policy(),
            Some(&usable),
        );
        assert_eq!(decision.status, WorkflowStatus::Recovering);

        // Only one would remain: the job is not restarted on fewer nodes than it needs.
        let decision = decide(
            &workflow,
            &failed,
            AnomalyKind::Crash,
            &nccl,
            &policy(),
            Some(&usable[..3]),
        );
        assert_eq!(decision.status, WorkflowStatus::Completed);
        let reason = decision.stop_reason.unwrap();
        assert!(
            reason.contains("too few usable nodes: 1 left in partition gpu"),
            "{reason}"
        );
        assert!(reason.contains("needs at least 2"), "{reason}");
        assert!(!decision.intents.iter().any(|i| i.kind.restarts_the_run()));

        // A configured minimum below the job's size lets it restart on what is left.
        let mut elastic = policy();
        elastic.min_nodes = 1;
        let decision = decide(
            &workflow,
            &failed,
            AnomalyKind::Crash,
            &nccl,
            &elastic,
            Some(&usable[..3]),
        );
        assert_eq!(decision.status, WorkflowStatus::Recovering);
    }

    #[test]
    fn requeues_excluding_the_culprit_and_keeps_earlier_exclusions() {
        let decision = decide(
            &workflow(),
            &attempt(JobState::Failed),
            AnomalyKind::Crash,
            &attribution("nccl_timeout", Component::Network, true),
            &policy(),
            None,
        );
        assert_eq!(decision.status, WorkflowStatus::Recovering);
        let requeue = &decision.intents[0];
        assert_eq!(requeue.kind, ActionKind::Requeue);
        assert_eq!(requeue.params.exclude_nodes, vec!["node-02", "node-07"]);
        assert_eq!(requeue.params.restart_count, Some(0));
        assert!(requeue.permitted && requeue.auto_approved);
        let drain = &decision.intents[1];
        assert_eq!(drain.kind, ActionKind::DrainNode);
        assert!(!drain.permitted, "drain is not in the default whitelist");
    }

    #[test]
    fn a_preempted_job_is_requeued_without_excluding_its_node() {
        let decision = decide(
            &workflow(),
            &attempt(JobState::Preempted),
            AnomalyKind::Crash,
            &attribution("preemption", Component::Scheduler, true),
            &policy(),
            None,
        );
        assert_eq!(decision.intents[0].kind, ActionKind::Requeue);
        assert_eq!(decision.intents[0].params.exclude_nodes, vec!["node-02"]);
    }

    #[test]
    fn never_requeues_an_application_bug() {
        let decision = decide(
            &workflow(),
            &attempt(JobState::Failed),
            AnomalyKind::Crash,
            &attribution("app_exception", Component::Application, false),
            &policy(),
            None,
        );
        assert_eq!(decision.status, WorkflowStatus::Completed);
        assert!(decision.intents.is_empty());
        assert!(decision.stop_reason.unwrap().contains("not recoverable"));
    }

    #[test]
    fn stops_a_crash_loop_at_the_threshold() {
        let mut workflow = workflow();
        workflow.failures_since_checkpoint = 2;
        let decision = decide(
            &workflow,
            &attempt(JobState::Failed),
            AnomalyKind::Crash,
            &attribution("nccl_timeout", Component::Network, true),
            &policy(),
            None,
        );
        assert!(decision.crash_loop);
        assert_eq!(decision.failures_since_checkpoint, 3);
        assert!(
            decision
                .intents
                .iter()
                .all(|i| i.kind != ActionKind::Requeue)
        );
    }

    #[test]
    fn the_requeue_limit_is_the_smaller_of_system_and_job() {
        let mut workflow = workflow();
        workflow.requeues_used = 5;
        let decision = decide(
            &workflow,
            &attempt(JobState::Failed),
            AnomalyKind::Crash,
            &attribution("xid_79", Component::Gpu, true),
            &policy(),
            None,
        );
        assert_eq!(decision.status, WorkflowStatus::Completed);
        assert!(decision.stop_reason.unwrap().contains("5 of 5"));

        let config = RecoveryConfig {
            system_max_requeues: 2,
            ..RecoveryConfig::default()
        };
        let policy = Policy::from_config(&config, false);
        workflow.requeues_used = 2;
        assert_eq!(policy.requeue_limit(&workflow), 2);
    }

    #[test]
    fn outside_the_whitelist_or_without_auto_an_intent_is_only_proposed() {
        let config = RecoveryConfig {
            whitelist: vec![ActionKind::Cancel],
            ..RecoveryConfig::default()
        };
        let decision = decide(
            &workflow(),
            &attempt(JobState::Failed),
            AnomalyKind::Crash,
            &attribution("nccl_timeout", Component::Network, true),
            &Policy::from_config(&config, false),
            None,
        );
        assert!(!decision.intents[0].permitted && !decision.intents[0].auto_approved);

        let decision = decide(
            &workflow(),
            &attempt(JobState::Failed),
            AnomalyKind::Crash,
            &attribution("nccl_timeout", Component::Network, true),
            &Policy::from_config(&RecoveryConfig::default(), true),
            None,
        );
        assert!(decision.intents[0].permitted && !decision.intents[0].auto_approved);
    }

    #[test]
    fn a_stopped_hang_cancels_the_job_that_still_holds_its_nodes() {
        let mut workflow = workflow();
        workflow.failures_since_checkpoint = 2;
        let decision = decide(
            &workflow,
            &attempt(JobState::Running),
            AnomalyKind::Hang,
            &attribution("hang", Component::Application, true),
            &policy(),
            None,
        );
        assert_eq!(decision.intents[0].kind, ActionKind::Cancel);
    }
}
