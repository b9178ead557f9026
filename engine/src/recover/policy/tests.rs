//! Tests of the policy module.

use chrono::{DateTime, Utc};

use super::*;
use crate::attribute::correlate;
use crate::model::{BackendKind, Culprit, JobSpec, JobState, RecoveryLimits};
use crate::report::fixtures;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-05T09:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn workflow() -> Workflow {
    let limits = RecoveryLimits {
        max_requeue_times: Some(5),
        auto_resume_mode: Some("requeue".into()),
        allowed_actions: None,
    };
    Workflow {
        id: 1,
        ..Workflow::enrolled("llama", BackendKind::Sim, JobSpec::default(), limits, now())
    }
}

/// The first attempt, job 4201 on node-05 and node-07, told to avoid node-02.
fn attempt(state: JobState) -> Attempt {
    Attempt {
        nodes: vec!["node-05".into(), "node-07".into()],
        exit_code: Some(1),
        excluded_nodes: vec!["node-02".into()],
        ..fixtures::attempt(0, state, [None; 3])
    }
}

/// An attribution that blames node-07.
fn attribution(category: &str, component: Component, recoverable: bool) -> Attribution {
    Attribution {
        culprit: Culprit {
            node: Some("node-07".into()),
            ..Culprit::default()
        },
        ..correlate::tests::attribution(category, component, recoverable)
    }
}

fn policy() -> Policy {
    Policy::from_config(&RecoveryConfig::default(), false)
}

/// The decision after an attempt in `state` crashed, for the reason `cause` gives.
fn decide_with(
    workflow: &Workflow,
    state: JobState,
    cause: &Attribution,
    policy: &Policy,
) -> Decision {
    decide(
        workflow,
        &attempt(state),
        AnomalyKind::Crash,
        cause,
        policy,
        None,
    )
}

/// A remedy as the catalog would give it.
fn remedy(kind: &str, params: serde_json::Value) -> Remedy {
    serde_json::from_value(serde_json::json!({"kind": kind, "description": "", "params": params}))
        .unwrap()
}

#[test]
fn where_the_spec_can_change_a_fix_becomes_a_proposed_re_creation_instead_of_a_stop() {
    let workflow = workflow();
    let mut shm = attribution("dataloader_shm", Component::HostMemory, false);
    shm.remedies = vec![
        remedy("stop", serde_json::json!({})),
        remedy(
            "recreate_with_patch",
            serde_json::json!({"shm_size": "16Gi"}),
        ),
        remedy("config_fix", serde_json::json!({"num_workers": 2})),
    ];
    // A backend that can change nothing: the run stops.
    let stopped = decide_with(&workflow, JobState::Failed, &shm, &policy());
    assert_eq!(stopped.status, WorkflowStatus::Completed);
    // Slurm: /dev/shm is not a batch job's to change, fewer workers is: the first fix that fits.
    let mut slurm = policy();
    slurm.capabilities.resubmit_changed = true;
    let resubmitted = decide_with(&workflow, JobState::Failed, &shm, &slurm);
    assert_eq!(resubmitted.status, WorkflowStatus::Recovering);
    assert_eq!(resubmitted.intents[0].kind, ActionKind::Recreate);
    assert_eq!(
        resubmitted.intents[0].params.changes,
        vec![SpecChange::DataLoaderWorkers { workers: 2 }]
    );
    assert!(
        resubmitted.intents[0].why.contains("submit again")
            && !resubmitted.intents[0]
                .params
                .exclude_nodes
                .contains(&"node-07".to_string()),
        "{}",
        resubmitted.intents[0].why
    );
    // A fix of the pod spec alone leaves a batch job nothing to do.
    let mut shm_only = shm.clone();
    shm_only.remedies.truncate(2);
    assert_eq!(
        decide_with(&workflow, JobState::Failed, &shm_only, &slurm).status,
        WorkflowStatus::Completed
    );
    // Kubernetes: the first fix, proposed (not in the default whitelist).
    let mut kubernetes = policy();
    kubernetes.capabilities.recreate = true;
    let decision = decide_with(&workflow, JobState::Failed, &shm, &kubernetes);
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
    let nccl = attribution("nccl_timeout", Component::Network, true);
    let decision = decide_with(&workflow, JobState::Failed, &nccl, &policy());
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
    // As the journal stores them: the env value written for a shell is left out.
    let expected: Vec<SpecChange> = serde_json::from_value(serde_json::json!([
        {"change": "halve_micro_batch"},
        {"change": "env", "name": "NCCL_SOCKET_IFNAME", "value": "ib0"},
        {"change": "toleration", "key": "nvidia.com/gpu", "operator": "Exists", "value": null, "effect": "NoSchedule"},
    ]))
    .unwrap();
    assert_eq!(changes, expected);
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
fn does_not_restart_on_fewer_nodes_than_the_pool_could_ever_give_the_job() {
    let mut workflow = workflow();
    workflow.spec.nodes = 2;
    workflow.spec.partition = Some("gpu".into());
    let failed = attempt(JobState::Failed);
    let nccl = attribution("nccl_timeout", Component::Network, true);
    let pool = |nodes: &[&str]| NodeCapacity {
        now: nodes.iter().map(|node| node.to_string()).collect(),
        fitting: nodes.iter().map(|node| node.to_string()).collect(),
        min_nodes: None,
    };
    let decide_on = |policy: &Policy, capacity: &NodeCapacity| {
        decide(
            &workflow,
            &failed,
            AnomalyKind::Crash,
            &nccl,
            policy,
            Some(capacity),
        )
    };
    // node-02 was excluded before and node-07 is the culprit: two nodes remain, enough.
    let four = pool(&["node-02", "node-07", "node-09", "node-11"]);
    let decision = decide_on(&policy(), &four);
    assert_eq!(decision.status, WorkflowStatus::Recovering);
    assert_eq!(decision.waiting_for_capacity, None);

    // Only one would ever remain: the job is not restarted on fewer nodes than it needs.
    let three = pool(&["node-02", "node-07", "node-09"]);
    let decision = decide_on(&policy(), &three);
    assert_eq!(decision.status, WorkflowStatus::Completed);
    let reason = decision.stop_reason.unwrap();
    assert!(
        reason.contains("too few usable nodes: 1 left in partition gpu that could ever run the job once node-02,node-07 are excluded"),
        "{reason}"
    );
    assert!(reason.contains("needs at least 2"), "{reason}");
    assert!(!decision.intents.iter().any(|i| i.kind.restarts_the_run()));

    // A configured minimum below the job's size lets it restart on what is left.
    let mut smaller = policy();
    smaller.min_nodes = 1;
    let decision = decide_on(&smaller, &three);
    assert_eq!(decision.status, WorkflowStatus::Recovering);

    // So does the job's own elastic minimum, which wins over the configured one.
    let elastic = NodeCapacity {
        min_nodes: Some(1),
        ..three.clone()
    };
    assert_eq!(
        decide_on(&policy(), &elastic).status,
        WorkflowStatus::Recovering
    );
    let strict = NodeCapacity {
        min_nodes: Some(2),
        ..three
    };
    assert_eq!(
        decide_on(&smaller, &strict).status,
        WorkflowStatus::Completed
    );
}

#[test]
fn too_few_nodes_now_restarts_the_job_to_wait_for_capacity() {
    let mut workflow = workflow();
    workflow.spec.nodes = 3;
    workflow.spec.partition = Some("research".into());
    let failed = attempt(JobState::NodeFail);
    let lost = attribution("node_failure", Component::Infrastructure, true);
    // Five tainted GPU nodes fit the job; node-02 was excluded before, node-07 is the culprit and
    // node-11 is cordoned: two can take it now, three could.
    let capacity = NodeCapacity {
        now: ["node-09", "node-12"].map(String::from).to_vec(),
        fitting: ["node-02", "node-07", "node-09", "node-11", "node-12"]
            .map(String::from)
            .to_vec(),
        min_nodes: None,
    };
    let decision = decide(
        &workflow,
        &failed,
        AnomalyKind::Crash,
        &lost,
        &policy(),
        Some(&capacity),
    );
    assert_eq!(decision.status, WorkflowStatus::Recovering, "{decision:#?}");
    assert_eq!(decision.stop_reason, None);
    assert!(decision.intents[0].kind.restarts_the_run());
    assert_eq!(
        decision.intents[0].params.exclude_nodes,
        ["node-02", "node-07"]
    );
    let waiting = decision.waiting_for_capacity.clone().unwrap_or_default();
    assert!(
        waiting.starts_with("waiting for capacity: 2 of the 3 nodes in partition research"),
        "{waiting}"
    );
    assert!(waiting.contains("needs 3"), "{waiting}");
    assert!(decision.summary.contains(&waiting), "{}", decision.summary);

    // Nothing fits now and nothing ever will once the culprit is gone: stop.
    let gone = NodeCapacity {
        now: Vec::new(),
        fitting: ["node-07"].map(String::from).to_vec(),
        min_nodes: None,
    };
    let decision = decide(
        &workflow,
        &failed,
        AnomalyKind::Crash,
        &lost,
        &policy(),
        Some(&gone),
    );
    assert_eq!(decision.status, WorkflowStatus::Completed);
    assert_eq!(decision.waiting_for_capacity, None);
}

#[test]
fn requeues_excluding_the_culprit_and_keeps_earlier_exclusions() {
    let decision = decide_with(
        &workflow(),
        JobState::Failed,
        &attribution("nccl_timeout", Component::Network, true),
        &policy(),
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
    let decision = decide_with(
        &workflow(),
        JobState::Preempted,
        &attribution("preemption", Component::Scheduler, true),
        &policy(),
    );
    assert_eq!(decision.intents[0].kind, ActionKind::Requeue);
    assert_eq!(decision.intents[0].params.exclude_nodes, vec!["node-02"]);
}

#[test]
fn never_requeues_an_application_bug() {
    let decision = decide_with(
        &workflow(),
        JobState::Failed,
        &attribution("app_exception", Component::Application, false),
        &policy(),
    );
    assert_eq!(decision.status, WorkflowStatus::Completed);
    assert!(decision.intents.is_empty());
    assert!(decision.stop_reason.unwrap().contains("not recoverable"));
}

#[test]
fn stops_a_crash_loop_at_the_threshold() {
    let mut workflow = workflow();
    workflow.failures_since_checkpoint = 2;
    let decision = decide_with(
        &workflow,
        JobState::Failed,
        &attribution("nccl_timeout", Component::Network, true),
        &policy(),
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
    let decision = decide_with(
        &workflow,
        JobState::Failed,
        &attribution("xid_79", Component::Gpu, true),
        &policy(),
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
    let decision = decide_with(
        &workflow(),
        JobState::Failed,
        &attribution("nccl_timeout", Component::Network, true),
        &Policy::from_config(&config, false),
    );
    assert!(!decision.intents[0].permitted && !decision.intents[0].auto_approved);

    let decision = decide_with(
        &workflow(),
        JobState::Failed,
        &attribution("nccl_timeout", Component::Network, true),
        &Policy::from_config(&RecoveryConfig::default(), true),
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

#[test]
fn a_failure_of_the_job_s_own_making_keeps_its_node() {
    let mut oom = attribution("dataloader_oom", Component::HostMemory, true);
    oom.remedies = vec![remedy(
        "recreate_with_patch",
        serde_json::json!({"num_workers": 4}),
    )];
    let mut recreating = policy();
    recreating.capabilities.recreate = true;
    let decision = decide_with(&workflow(), JobState::Failed, &oom, &recreating);
    let restart = &decision.intents[0];
    assert_eq!(restart.kind, ActionKind::Recreate, "{decision:#?}");
    assert_eq!(
        restart.params.exclude_nodes,
        ["node-02"],
        "only the earlier exclusion: node-07 ran the rank, it did not fail it"
    );
    for component in [
        Component::GpuMemory,
        Component::Application,
        Component::Data,
    ] {
        let cause = attribution("x", component, true);
        let decision = decide_with(&workflow(), JobState::Failed, &cause, &policy());
        assert!(
            !decision
                .intents
                .iter()
                .any(|i| i.params.exclude_nodes.contains(&"node-07".to_string())),
            "{component:?}: {decision:#?}"
        );
    }
}

#[test]
fn over_eviction_excludes_every_suspect_only_when_asked_and_when_enough_nodes_are_left() {
    let mut workflow = workflow();
    workflow.spec.nodes = 2;
    let failed = attempt(JobState::Failed);
    let mut ib = attribution("ib_completion_error", Component::Network, true);
    ib.culprit = Culprit {
        suspects: vec!["node-07".into(), "node-09".into()],
        ..Culprit::default()
    };
    let pool = |nodes: &[&str]| NodeCapacity {
        now: nodes.iter().map(|node| node.to_string()).collect(),
        fitting: nodes.iter().map(|node| node.to_string()).collect(),
        min_nodes: None,
    };
    let plenty = pool(&["node-02", "node-07", "node-09", "node-11", "node-12"]);
    let restart = |policy: &Policy, capacity: Option<&NodeCapacity>| {
        decide(
            &workflow,
            &failed,
            AnomalyKind::Crash,
            &ib,
            policy,
            capacity,
        )
    };
    // Off (the default): nothing singles out a node, so none is excluded beyond the earlier one.
    let off = restart(&policy(), Some(&plenty));
    assert_eq!(off.intents[0].params.exclude_nodes, ["node-02"]);

    let mut evicting = policy();
    evicting.exclude_suspects = true;
    let on = restart(&evicting, Some(&plenty));
    assert_eq!(
        on.intents[0].params.exclude_nodes,
        ["node-02", "node-07", "node-09"]
    );
    assert!(
        on.summary.contains("every suspect (node-07,node-09)"),
        "{}",
        on.summary
    );

    // Without them only one node could take the 2-node job now: they stay.
    let tight = pool(&["node-02", "node-07", "node-09", "node-11"]);
    let kept = restart(&evicting, Some(&tight));
    assert_eq!(kept.intents[0].params.exclude_nodes, ["node-02"]);
    assert!(
        kept.summary
            .contains("suspects node-07,node-09 kept: without them 1 node could take the job now, and it needs 2"),
        "{}",
        kept.summary
    );
    // A scheduler that cannot count nodes: kept too.
    let unknown = restart(&evicting, None);
    assert_eq!(unknown.intents[0].params.exclude_nodes, ["node-02"]);

    // A fault that is not the nodes' (an application error) evicts nothing.
    let mut app = ib.clone();
    app.component = Component::Application;
    app.recoverable = false;
    let stopped = decide(
        &workflow,
        &failed,
        AnomalyKind::Crash,
        &app,
        &evicting,
        Some(&plenty),
    );
    assert!(stopped.intents.is_empty());
}
