//! A workload as a runguard job snapshot: its state, nodes, exclusions, GPUs and command.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

use super::*;
use super::{nodes::*, pods::*};
use crate::backend::JobSnapshot;
use crate::model::{JobSpec, JobState, RecoveryLimits};

/// The workload's own verdict: (state, its words, reason).
pub(super) fn workload_state(
    kind: WorkloadKind,
    workload: &Value,
) -> (JobState, String, Option<String>) {
    let conditions: Vec<&Value> = at(workload, "/status/conditions")
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    let true_condition = |kind: &str| {
        conditions.iter().find(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    };
    let reason_of = |condition: &&Value| str_at(condition, "/reason").map(str::to_string);
    match kind {
        WorkloadKind::Job => {
            if let Some(done) = true_condition("Complete") {
                return (JobState::Completed, "Complete".into(), reason_of(done));
            }
            if let Some(failed) = true_condition("Failed") {
                return (JobState::Failed, "Failed".into(), reason_of(failed));
            }
            if true_condition("Suspended").is_some() {
                return (
                    JobState::Pending,
                    "Suspended".into(),
                    Some("Suspended".into()),
                );
            }
            let active = at(workload, "/status/active")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if active > 0 {
                (JobState::Running, "Active".into(), None)
            } else {
                (JobState::Pending, "Pending".into(), None)
            }
        }
        WorkloadKind::PyTorchJob => {
            for (condition, state) in [
                ("Succeeded", JobState::Completed),
                ("Failed", JobState::Failed),
                ("Restarting", JobState::Running),
                ("Running", JobState::Running),
                ("Suspended", JobState::Pending),
                ("Created", JobState::Pending),
            ] {
                if let Some(found) = true_condition(condition) {
                    return (state, condition.to_string(), reason_of(found));
                }
            }
            (JobState::Pending, "Pending".into(), None)
        }
        WorkloadKind::JobSet | WorkloadKind::TrainJob => {
            let (done, children) = match kind {
                WorkloadKind::JobSet => ("Completed", "/status/replicatedJobsStatus"),
                _ => ("Complete", "/status/jobsStatus"),
            };
            if let Some(found) = true_condition(done) {
                return (JobState::Completed, done.to_string(), reason_of(found));
            }
            if let Some(failed) = true_condition("Failed") {
                return (JobState::Failed, "Failed".into(), reason_of(failed));
            }
            if let Some(suspended) = true_condition("Suspended") {
                return (
                    JobState::Pending,
                    "Suspended".into(),
                    reason_of(suspended).or(Some("Suspended".into())),
                );
            }
            // Running once any of its Jobs is ready (its pods run); an active Job may still have
            // every pod pending.
            let running = at(workload, children)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|child| child.get("ready").and_then(Value::as_u64).unwrap_or(0) > 0);
            if running {
                (JobState::Running, "Running".into(), None)
            } else {
                (JobState::Pending, "Pending".into(), None)
            }
        }
        // A Ray cluster is a service: it runs until its head (and GCS with it) is lost.
        WorkloadKind::RayCluster => {
            let state = str_at(workload, "/status/state").unwrap_or_default();
            let reason = str_at(workload, "/status/reason").map(str::to_string);
            if state == "failed" {
                return (JobState::Failed, "failed".into(), reason);
            }
            if state == "suspended" || true_condition("RayClusterSuspended").is_some() {
                return (
                    JobState::Pending,
                    "suspended".into(),
                    Some("Suspended".into()),
                );
            }
            if state == "ready" || true_condition("HeadPodReady").is_some() {
                (JobState::Running, "ready".into(), None)
            } else {
                (JobState::Pending, "Provisioning".into(), reason)
            }
        }
        WorkloadKind::RayJob => {
            let deployment = str_at(workload, "/status/jobDeploymentStatus").unwrap_or_default();
            let job = str_at(workload, "/status/jobStatus").unwrap_or_default();
            let reason = str_at(workload, "/status/reason").map(str::to_string);
            match (deployment, job) {
                (_, "SUCCEEDED") | ("Complete", "") => {
                    (JobState::Completed, "SUCCEEDED".into(), reason)
                }
                (_, "FAILED") | ("Failed", _) => (
                    JobState::Failed,
                    if job.is_empty() { deployment } else { job }.to_string(),
                    reason.or_else(|| Some(deployment.to_string())),
                ),
                (_, "STOPPED") => (JobState::Cancelled, "STOPPED".into(), reason),
                ("Running", _) | (_, "RUNNING") => (JobState::Running, "RUNNING".into(), None),
                ("Suspended", _) => (JobState::Pending, "Suspended".into(), reason),
                _ => (
                    JobState::Pending,
                    if deployment.is_empty() {
                        "Initializing"
                    } else {
                        deployment
                    }
                    .to_string(),
                    None,
                ),
            }
        }
    }
}

/// Nodes a pod template excludes with `kubernetes.io/hostname NotIn [...]`.
pub fn excluded_nodes(template: &Value) -> Vec<String> {
    at(template, "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|term| term.get("matchExpressions").and_then(Value::as_array))
        .flatten()
        .filter(|expression| {
            str_at(expression, "/key") == Some(HOSTNAME_LABEL)
                && str_at(expression, "/operator") == Some("NotIn")
        })
        .filter_map(|expression| expression.get("values").and_then(Value::as_array))
        .flatten()
        .filter_map(|value| value.as_str().map(str::to_string))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The nodes a workload excludes, as its first pod template (a TrainJob's trainer) says.
pub fn exclusions_of(kind: WorkloadKind, workload: &Value) -> Vec<String> {
    match kind {
        WorkloadKind::TrainJob => excluded_nodes(&super::trainjob::trainer_template(workload).0),
        _ => kind
            .templates(workload)
            .first()
            .map(|(template, _)| excluded_nodes(template))
            .unwrap_or_default(),
    }
}

/// What shows that this incarnation of the workload has run something, if anything does: one of its
/// pods started, or its status counts pods that ran, a start, a restart or an end. `None`: nothing of
/// it has run, so it may be changed (or re-created) without losing any work.
pub fn run_evidence(kind: WorkloadKind, workload: &Value, pods: &[&Value]) -> Option<String> {
    if let Some(pod) = pods.iter().find(|pod| pod_started(pod)) {
        return Some(format!(
            "pod {} has started",
            str_at(pod, "/metadata/name").unwrap_or_default()
        ));
    }
    let count =
        |value: &Value, pointer: &str| at(value, pointer).and_then(Value::as_u64).unwrap_or(0);
    let ever = |types: &[&str]| {
        at(workload, "/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|condition| str_at(condition, "/type"))
            .find(|found| types.contains(found))
            .map(|found| format!("its status has a {found} condition"))
    };
    let children = |pointer: &str| {
        at(workload, pointer)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|child| count(child, "/succeeded") + count(child, "/failed") > 0)
    };
    match kind {
        WorkloadKind::Job => {
            let (succeeded, failed) = (
                count(workload, "/status/succeeded"),
                count(workload, "/status/failed"),
            );
            if succeeded + failed > 0 {
                return Some(format!(
                    "its status counts {succeeded} succeeded and {failed} failed pods"
                ));
            }
            // A Job created suspended has no start time until it is first resumed: one that has
            // it and is suspended again ran (its pods were deleted by the suspension).
            if at(workload, "/spec/suspend").and_then(Value::as_bool) == Some(true)
                && at(workload, "/status/startTime").is_some()
            {
                return Some("it was resumed before (status.startTime) and suspended again".into());
            }
            ever(&["Complete", "Failed"])
        }
        WorkloadKind::PyTorchJob => {
            let replicas = at(workload, "/status/replicaStatuses")
                .and_then(Value::as_object)
                .is_some_and(|roles| {
                    roles
                        .values()
                        .any(|role| count(role, "/succeeded") + count(role, "/failed") > 0)
                });
            if replicas {
                return Some("its replica statuses count pods that ran".into());
            }
            ever(&["Running", "Restarting", "Succeeded", "Failed"])
        }
        WorkloadKind::JobSet => {
            if count(workload, "/status/restarts") > 0 || children("/status/replicatedJobsStatus") {
                return Some("its status counts Jobs that ran or restarts".into());
            }
            ever(&["Completed", "Failed"])
        }
        WorkloadKind::TrainJob => {
            if children("/status/jobsStatus") {
                return Some("its status counts Jobs that ran".into());
            }
            ever(&["Complete", "Failed"])
        }
        WorkloadKind::RayJob => {
            let job = str_at(workload, "/status/jobStatus").unwrap_or_default();
            let deployment = str_at(workload, "/status/jobDeploymentStatus").unwrap_or_default();
            if !job.is_empty() || matches!(deployment, "Running" | "Complete" | "Failed") {
                return Some(format!(
                    "its status says {}",
                    if job.is_empty() { deployment } else { job }
                ));
            }
            None
        }
        WorkloadKind::RayCluster => {
            if matches!(str_at(workload, "/status/state"), Some("ready" | "failed")) {
                return Some("its status says it was ready".into());
            }
            ever(&["HeadPodReady"])
        }
    }
}

pub(super) fn gpus_of_template(template: &Value) -> u32 {
    at(template, "/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|container| {
            let limits = at(container, "/resources/limits")?;
            let gpus = limits.get("nvidia.com/gpu")?;
            gpus.as_u64()
                .or_else(|| gpus.as_str().and_then(|text| text.parse().ok()))
        })
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        .sum()
}

pub(super) fn command_of_template(template: &Value) -> Option<String> {
    let container = at(template, "/spec/containers/0")?;
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|key| container.get(*key).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if words.is_empty() {
        str_at(container, "/image").map(|image| format!("(image {image})"))
    } else {
        Some(words.join(" "))
    }
}

/// "Unschedulable" when a pod waits for a node the scheduler cannot find.
fn unschedulable(pods: &[&Value]) -> Option<String> {
    pods.iter()
        .any(|pod| {
            at(pod, "/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|conditions| {
                    conditions.iter().any(|c| {
                        str_at(c, "/type") == Some("PodScheduled")
                            && str_at(c, "/reason") == Some("Unschedulable")
                    })
                })
        })
        .then(|| "Unschedulable".to_string())
}

/// The job as runguard models it.
pub fn snapshot(
    kind: WorkloadKind,
    workload: &Value,
    pods: &[&Value],
    nodes: &[Value],
    log_path: Option<PathBuf>,
    cluster: Option<&str>,
) -> Option<JobSnapshot> {
    let reference = WorkloadRef::of(kind, workload)?;
    let (mut state, mut state_raw, mut reason) = workload_state(kind, workload);
    // One entry per scheduled pod, in rank order (a node appears once for each of its pods): a pod
    // is what a node is to a Slurm job, so a global rank divided by the GPUs per pod indexes it.
    let pod_nodes: Vec<String> = pods
        .iter()
        .filter_map(|pod| str_at(pod, "/spec/nodeName"))
        .map(str::to_string)
        .collect();
    if !state.is_terminal() {
        // What the operator has not concluded yet, the pods and nodes already tell.
        let lost_node = pods.iter().find_map(|pod| {
            let phase = str_at(pod, "/status/phase").unwrap_or_default();
            if matches!(phase, "Succeeded" | "Failed") {
                return None;
            }
            let node_name = str_at(pod, "/spec/nodeName")?;
            let node = node_named(nodes, node_name)?;
            let (status, node_reason, _) = node_readiness(node)?;
            (status != "True").then(|| (node_name.to_string(), node_reason))
        });
        // A RayCluster's head that ended took the GCS with it: the cluster has failed, whatever its
        // status says until KubeRay restarts the head.
        let head_ended = (kind == WorkloadKind::RayCluster)
            .then(|| {
                pods.iter().find(|pod| {
                    label(pod, "ray.io/node-type") == Some("head")
                        && (str_at(pod, "/status/phase") == Some("Failed")
                            || failed_container(pod).is_some_and(|_| pod_ended(pod)))
                })
            })
            .flatten();
        if let Some((node, node_reason)) = lost_node {
            state = JobState::NodeFail;
            state_raw = "NodeNotReady".to_string();
            reason = Some(format!("node {node} is not ready ({node_reason})"));
        } else if let Some(head) = head_ended {
            state = JobState::Failed;
            state_raw = "HeadPodFailed".to_string();
            reason = Some(format!(
                "head pod {} ended",
                str_at(head, "/metadata/name").unwrap_or_default()
            ));
        } else if let Some((waiting, _)) = pods.iter().find_map(|pod| stuck_container(pod)) {
            state = JobState::Failed;
            state_raw = waiting.clone();
            reason = Some(waiting);
        } else if state == JobState::Running
            && !pods.is_empty()
            && !pods.iter().any(|pod| pod_started(pod))
        {
            // The workload calls itself running (a Job counts pending pods as active), but nothing
            // of it has started: it still waits, and can still be kept off a node.
            state = JobState::Pending;
            state_raw = "Pending".to_string();
            reason = unschedulable(pods).or_else(|| Some("no pod has started yet".to_string()));
        } else if state == JobState::Pending && unschedulable(pods).is_some() {
            reason = unschedulable(pods);
        }
    }
    // A TrainJob's one template is its trainer's, as the job sets it over its runtime's.
    let trainer =
        (kind == WorkloadKind::TrainJob).then(|| super::trainjob::trainer_template(workload));
    let templates = match &trainer {
        Some((template, nodes)) => vec![(template, *nodes)],
        None => kind.templates(workload),
    };
    let exit_code = match state {
        JobState::Completed => Some(0),
        _ if state.is_failure() => pods
            .iter()
            .find_map(|pod| failed_container(pod))
            .map(|(_, _, code)| code),
        _ => None,
    };
    let start_time = time_at(workload, "/status/startTime").or_else(|| {
        pods.iter()
            .filter_map(|pod| time_at(pod, "/status/startTime"))
            .min()
    });
    let end_time = time_at(workload, "/status/completionTime")
        .or_else(|| time_at(workload, "/status/endTime"))
        .or_else(|| {
            state.is_terminal().then(|| {
                at(workload, "/status/conditions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| time_at(c, "/lastTransitionTime"))
                    .max()
            })?
        });
    let replicas: u32 = templates.iter().map(|(_, n)| *n).sum();
    let gpus_per_pod = templates
        .iter()
        .map(|(template, _)| gpus_of_template(template))
        .max()
        .unwrap_or(0);
    let gpus: u32 = templates
        .iter()
        .map(|(template, n)| gpus_of_template(template).saturating_mul(*n))
        .sum();
    let user = annotation(workload, "runguard.io/user")
        .or(label(workload, "user"))
        .unwrap_or(&reference.namespace)
        .to_string();
    Some(JobSnapshot {
        job_id: reference.id(),
        name: reference.name.clone(),
        user: user.clone(),
        state,
        state_raw,
        reason,
        hold: None,
        nodes: pod_nodes,
        gpus,
        submit_time: time_at(workload, "/metadata/creationTimestamp"),
        start_time,
        end_time,
        exit_code,
        restart_count: restart_count(workload),
        excluded_nodes: exclusions_of(kind, workload),
        log_path,
        spec: JobSpec {
            name: reference.name.clone(),
            user,
            nodes: replicas,
            gpus_per_node: gpus_per_pod,
            tasks_per_node: 0,
            partition: Some(reference.namespace.clone()),
            command: templates.first().and_then(|(t, _)| command_of_template(t)),
            work_dir: None,
            dependency: None,
            cluster: cluster.map(str::to_string),
            reservation: None,
            cpus: 0,
            memory: None,
            included_nodes: Vec::new(),
        },
        limits: RecoveryLimits {
            max_requeue_times: annotation(workload, MAX_RESTARTS_ANNOTATION)
                .and_then(|n| n.trim().parse().ok()),
            auto_resume_mode: Some("recreate".to_string()),
            allowed_actions: annotation(workload, WHITELIST_ANNOTATION).map(|list| {
                list.split(',')
                    .filter_map(|name| crate::model::ActionKind::parse(name.trim()))
                    .collect()
            }),
        },
        tag: annotation(workload, crate::backend::kube::submit::TAG_ANNOTATION).map(str::to_string),
    })
}
