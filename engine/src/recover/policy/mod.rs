//! The recovery policy as a pure function: no I/O, no clock, no randomness.
//!
//! Rules (the AJR guide's): requeue excluding the culprit; at most min(system, job) requeues; stop a crash
//! loop after N consecutive failed attempts without a new checkpoint; never requeue a non-recoverable
//! failure. Intents the whitelist does not permit are only proposed.

use serde::Serialize;

use crate::backend::{Capabilities, NodeCapacity};
use crate::config::{RecoveryConfig, RecoveryMode};
use crate::model::{
    ActionKind, ActionParams, AnomalyKind, Attempt, Attribution, Component, Remedy, RemedyKind,
    SpecChange, Workflow, WorkflowStatus,
};
use crate::recover::overrides;

/// The policy's knobs, from the config and the engine's mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub system_max_requeues: u32,
    pub crash_loop_threshold: u32,
    pub mode: RecoveryMode,
    pub whitelist: Vec<ActionKind>,
    pub drain_culprit_nodes: bool,
    /// Over-eviction ([`RecoveryConfig::exclude_suspects`]).
    pub exclude_suspects: bool,
    /// Fewest usable nodes a restart may have (0: the job's node count).
    pub min_nodes: u32,
    /// Without `--auto` nothing runs on its own: every intent waits for approval.
    pub propose_only: bool,
    /// What the backend can do: one that re-creates workloads with a changed spec (Kubernetes) turns
    /// the catalog's fixes into a proposed re-creation instead of a stop.
    pub capabilities: Capabilities,
    /// Nodes the node ledger keeps out of every restart of every workflow.
    pub quarantined: Vec<String>,
}

impl Policy {
    pub fn from_config(config: &RecoveryConfig, propose_only: bool) -> Self {
        Self {
            system_max_requeues: config.system_max_requeues,
            crash_loop_threshold: config.crash_loop_threshold,
            mode: config.mode,
            whitelist: config.whitelist.clone(),
            drain_culprit_nodes: config.drain_culprit_nodes,
            exclude_suspects: config.exclude_suspects,
            min_nodes: config.min_nodes,
            propose_only,
            capabilities: Capabilities::default(),
            quarantined: Vec::new(),
        }
    }

    /// Whether the whitelist lets `kind` run without approval.
    pub fn permits(&self, kind: ActionKind) -> bool {
        self.whitelist.contains(&kind)
    }

    /// An intent of `kind` for `workflow`: permitted when the whitelist and the job's own list (which
    /// can only narrow it) allow it, run without a human when also the engine runs with `--auto`.
    pub fn intent(
        &self,
        workflow: &Workflow,
        kind: ActionKind,
        params: ActionParams,
        why: String,
    ) -> Intent {
        let permitted = self.permits(kind)
            && workflow
                .limits
                .allowed_actions
                .as_ref()
                .is_none_or(|allowed| allowed.contains(&kind));
        Intent {
            kind,
            params,
            permitted,
            auto_approved: permitted && !self.propose_only,
            why,
        }
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
    /// The job is restarted although too few nodes can take it now: it waits in the queue for
    /// capacity, and this says why (the workflow's status reason while it recovers).
    pub waiting_for_capacity: Option<String>,
    /// One line for the journal.
    pub summary: String,
}

/// Decides what to do about the failure of `attempt` (the workflow's latest), attributed as `attribution`.
/// `usable_nodes` are the nodes that could run the job now and ever, when the backend knows.
pub fn decide(
    workflow: &Workflow,
    attempt: &Attempt,
    anomaly: AnomalyKind,
    attribution: &Attribution,
    policy: &Policy,
    usable_nodes: Option<&NodeCapacity>,
) -> Decision {
    let failures = workflow.failures_since_checkpoint.saturating_add(1);
    let limit = policy.requeue_limit(workflow);
    let culprit = attribution.culprit.node.clone();
    let mut exclude = attempt.excluded_nodes.clone();
    // Only a fault of the node itself keeps the job off it: a preempted job's node is a victim of the
    // scheduler, and a DataLoader or CUDA OOM happened on a rank's node, not because of it.
    if let Some(node) = &culprit
        && faults_the_node(attribution.component)
        && !exclude.contains(node)
    {
        exclude.push(node.clone());
    }
    // Nodes the ledger quarantined, whichever job they failed under.
    for node in &policy.quarantined {
        if !exclude.contains(node) {
            exclude.push(node.clone());
        }
    }
    // An elastic job's own minimum, else the configured one, else the job's size.
    let needed = match usable_nodes.and_then(|capacity| capacity.min_nodes) {
        Some(elastic) => elastic.max(1),
        None if policy.min_nodes > 0 => policy.min_nodes,
        None => workflow.spec.nodes.max(1),
    };
    let suspects = over_eviction(attribution, policy, usable_nodes, &exclude, needed);
    if let Eviction::Evicted(nodes) = &suspects {
        exclude.extend(nodes.iter().cloned());
    }
    let left = usable_nodes.map(|capacity| capacity.left(&exclude));
    let excluded = if exclude.is_empty() {
        "nothing is".to_string()
    } else {
        format!(
            "{} {}",
            exclude.join(","),
            if exclude.len() == 1 { "is" } else { "are" }
        )
    };
    let partition = workflow.spec.partition.as_deref().unwrap_or("(default)");
    let where_ = culprit
        .as_deref()
        .map(|node| format!(" on {node}"))
        .unwrap_or_default();
    let what = format!("{}{where_}", attribution.category);

    // The catalog's fix, where the backend can apply it: the same spec would fail the same way.
    let changes = if policy.capabilities.recreate {
        spec_changes(&attribution.remedies, attribution.recoverable)
    } else if policy.capabilities.resubmit_changed {
        // A batch job takes only what its command line and environment can carry.
        changes_that_fit(
            &attribution.remedies,
            attribution.recoverable,
            overrides::fits_a_batch_job,
        )
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
    } else if let Some((_, ever)) = left
        && ever < needed
    {
        // Only a pool that can never fit the job stops it: too few nodes now is a reason to wait.
        Some(format!(
            "too few usable nodes: {ever} left in partition {partition} that could ever run the job \
             once {excluded} excluded, and it needs at least {needed}; it is not restarted on fewer"
        ))
    } else {
        None
    };
    let waiting_for_capacity = match left {
        Some((now, ever)) if stop_reason.is_none() && now < needed => Some(format!(
            "waiting for capacity: {now} of the {ever} nodes in partition {partition} that fit the \
             job can take it now once {excluded} excluded, and it needs {needed}; it waits in the \
             queue until nodes come back or free up"
        )),
        _ => None,
    };

    let intent = |kind: ActionKind, params: ActionParams, why: String| {
        policy.intent(workflow, kind, params, why)
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
                "{what}: {} from the last checkpoint with {described}{exclusion}, as the catalog \
                 recommends (restart {} of {limit})",
                if policy.capabilities.recreate {
                    "re-create"
                } else {
                    "submit again"
                },
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
    // A quarantined node's drain is the node ledger's to plan.
    if policy.drain_culprit_nodes
        && attribution.recoverable
        && let Some(node) = &culprit
        && !policy.quarantined.contains(node)
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
            "attempt {} {}: {}{}{}",
            attempt.index,
            anomaly.as_str(),
            intents
                .first()
                .map(|intent| intent.why.clone())
                .unwrap_or_default(),
            suspects.describe(),
            waiting_for_capacity
                .as_deref()
                .map(|waiting| format!("; {waiting}"))
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
        waiting_for_capacity,
    }
}

/// What became of the suspects of a failure no node was singled out for.
#[derive(Debug, Clone, PartialEq)]
enum Eviction {
    /// No suspects, or over-eviction is off.
    None,
    /// Excluded, all of them.
    Evicted(Vec<String>),
    /// Kept: excluding them would leave too few nodes to run the job now.
    Kept {
        suspects: Vec<String>,
        now: u32,
        needed: u32,
    },
    /// Kept: the backend cannot tell how many nodes would be left.
    Unknown(Vec<String>),
}

impl Eviction {
    fn describe(&self) -> String {
        match self {
            Self::None => String::new(),
            Self::Evicted(nodes) => format!(
                "; over-eviction: nothing singled out one node, so every suspect ({}) is excluded",
                nodes.join(",")
            ),
            Self::Kept {
                suspects,
                now,
                needed,
            } => format!(
                "; suspects {} kept: without them {now} {} could take the job now, and it needs {needed}",
                suspects.join(","),
                if *now == 1 { "node" } else { "nodes" }
            ),
            Self::Unknown(suspects) => format!(
                "; suspects {} kept: the scheduler cannot tell whether enough nodes would be left",
                suspects.join(",")
            ),
        }
    }
}

/// Over-eviction (ByteRobust's argument): a node fault that several nodes of the allocation report,
/// with none singled out, excludes them all when the setting is on and enough nodes stay usable now.
fn over_eviction(
    attribution: &Attribution,
    policy: &Policy,
    usable_nodes: Option<&NodeCapacity>,
    exclude: &[String],
    needed: u32,
) -> Eviction {
    let suspects: Vec<String> = attribution
        .culprit
        .suspects
        .iter()
        .filter(|node| !exclude.contains(node))
        .cloned()
        .collect();
    if !policy.exclude_suspects
        || suspects.is_empty()
        || attribution.culprit.node.is_some()
        || !attribution.recoverable
        || !faults_the_node(attribution.component)
    {
        return Eviction::None;
    }
    let Some(capacity) = usable_nodes else {
        return Eviction::Unknown(suspects);
    };
    let mut trial = exclude.to_vec();
    trial.extend(suspects.iter().cloned());
    let (now, _) = capacity.left(&trial);
    if now >= needed {
        Eviction::Evicted(suspects)
    } else {
        Eviction::Kept {
            suspects,
            now,
            needed,
        }
    }
}

/// Whether a failure of `component` is the node's fault (its GPUs, links, disks or itself), so that
/// the job is kept off the culprit node.
fn faults_the_node(component: Component) -> bool {
    matches!(
        component,
        Component::Gpu
            | Component::Network
            | Component::Storage
            | Component::Infrastructure
            | Component::None
    )
}

/// The spec changes of the first recommended fix that names any the backend can make. A failure a
/// plain requeue recovers only takes an explicit `recreate_with_patch`; one it does not also takes a
/// `config_fix`.
pub fn spec_changes(remedies: &[Remedy], recoverable: bool) -> Vec<SpecChange> {
    changes_that_fit(remedies, recoverable, |_| true)
}

/// [`spec_changes`] of the first fix whose every change `fits`.
fn changes_that_fit(
    remedies: &[Remedy],
    recoverable: bool,
    fits: impl Fn(&SpecChange) -> bool,
) -> Vec<SpecChange> {
    remedies
        .iter()
        .filter(|remedy| match remedy.kind {
            RemedyKind::RecreateWithPatch => true,
            RemedyKind::ConfigFix => !recoverable,
            _ => false,
        })
        .map(|remedy| remedy.params.spec_changes())
        .find(|changes| !changes.is_empty() && changes.iter().all(&fits))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
