//! The pods of a workload, found by the operators' labels and owner references, in rank order.

use std::collections::HashMap;

use serde_json::Value;

use super::*;

/// The pods of this incarnation of the workload, in rank order (rank = index).
/// The labels by which the operators name a pod's workload (or Ray cluster).
pub(super) const OWNER_LABELS: [&str; 5] = [
    "training.kubeflow.org/job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
    "ray.io/cluster",
    JOBSET_NAME_LABEL,
];

/// Whether a pod's labels name one of `names` as its workload (or Ray cluster): the pods
/// [`pods_of`] can find for a workload of those names, told apart before any pod is read in full.
pub fn labelled_for(labels: &std::collections::BTreeMap<String, String>, names: &[&str]) -> bool {
    OWNER_LABELS.iter().any(|key| {
        labels
            .get(*key)
            .is_some_and(|value| names.contains(&value.as_str()))
    })
}

/// The JobSet labels of its pods (a TrainJob's JobSet has the TrainJob's name).
const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
const JOBSET_UID_LABEL: &str = "jobset.sigs.k8s.io/jobset-uid";
const REPLICATED_JOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";
const JOB_INDEX_LABEL: &str = "jobset.sigs.k8s.io/job-index";
/// The replicated job of a Trainer runtime that runs the training (the others initialise).
pub const TRAINER_REPLICATED_JOB: &str = "node";

/// A JobSet pod's place: its replicated job's position, its Job's index, its completion index.
fn jobset_order(pod: &Value, replicated_position: u64) -> u64 {
    let number = |text: Option<&str>| text.and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
    let job_index = number(label(pod, JOB_INDEX_LABEL));
    let completion = number(
        annotation(pod, "batch.kubernetes.io/job-completion-index")
            .or(label(pod, "batch.kubernetes.io/job-completion-index")),
    );
    replicated_position
        .saturating_mul(1_000_000)
        .saturating_add(job_index.saturating_mul(1_000))
        .saturating_add(completion)
}

/// Pods by namespace and the workload (or Ray cluster) their labels name: a listing finds each
/// workload's pods without looking at every pod for every workload.
pub struct PodIndex<'a> {
    /// namespace → owner → pods.
    by_owner: HashMap<&'a str, HashMap<&'a str, Vec<&'a Value>>>,
}

impl<'a> PodIndex<'a> {
    pub fn new(pods: impl IntoIterator<Item = &'a Value>) -> Self {
        let mut by_owner: HashMap<&'a str, HashMap<&'a str, Vec<&'a Value>>> = HashMap::new();
        for pod in pods {
            let namespace = str_at(pod, "/metadata/namespace").unwrap_or("default");
            let mut owners: Vec<&str> = OWNER_LABELS
                .iter()
                .filter_map(|key| label(pod, key))
                .collect();
            owners.sort_unstable();
            owners.dedup();
            for owner in owners {
                by_owner
                    .entry(namespace)
                    .or_default()
                    .entry(owner)
                    .or_default()
                    .push(pod);
            }
        }
        Self { by_owner }
    }

    fn named(&self, namespace: &str, owner: &str) -> &[&'a Value] {
        self.by_owner
            .get(namespace)
            .and_then(|owners| owners.get(owner))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }
}

pub fn pods_of<'a>(kind: WorkloadKind, workload: &Value, index: &PodIndex<'a>) -> Vec<&'a Value> {
    let namespace = str_at(workload, "/metadata/namespace").unwrap_or("default");
    let name = str_at(workload, "/metadata/name").unwrap_or_default();
    let uid = str_at(workload, "/metadata/uid");
    let ray_cluster = str_at(workload, "/status/rayClusterName");
    let owned_by_this_incarnation = |pod: &Value| {
        // A pod left over from the previous incarnation (same name) has the old owner's uid.
        match (
            uid,
            at(pod, "/metadata/ownerReferences").and_then(Value::as_array),
        ) {
            (Some(uid), Some(owners)) if !owners.is_empty() => owners
                .iter()
                .any(|owner| owner.get("uid").and_then(Value::as_str) == Some(uid)),
            _ => true,
        }
    };
    let mut candidates: Vec<&'a Value> = index.named(namespace, name).to_vec();
    if let Some(cluster) = ray_cluster {
        candidates.extend(index.named(namespace, cluster));
    }
    // A pod named by both (a Ray cluster named like its job) counts once.
    candidates.sort_by_key(|pod| std::ptr::from_ref::<Value>(*pod) as usize);
    candidates.dedup_by_key(|pod| std::ptr::from_ref::<Value>(*pod) as usize);
    let mut mine: Vec<(u64, &str, &'a Value)> = candidates
        .into_iter()
        .filter_map(|pod| {
            let pod_name = str_at(pod, "/metadata/name").unwrap_or_default();
            let order = match kind {
                WorkloadKind::Job => {
                    let job = label(pod, "batch.kubernetes.io/job-name").or(label(pod, "job-name"));
                    if job != Some(name) || !owned_by_this_incarnation(pod) {
                        return None;
                    }
                    annotation(pod, "batch.kubernetes.io/job-completion-index")
                        .and_then(|index| index.parse().ok())
                        .unwrap_or(0)
                }
                WorkloadKind::PyTorchJob => {
                    let job =
                        label(pod, "training.kubeflow.org/job-name").or(label(pod, "job-name"));
                    if job != Some(name) || !owned_by_this_incarnation(pod) {
                        return None;
                    }
                    let index: u64 = label(pod, "training.kubeflow.org/replica-index")
                        .and_then(|index| index.parse().ok())
                        .unwrap_or(0);
                    match label(pod, "training.kubeflow.org/replica-type") {
                        Some(role) if role.eq_ignore_ascii_case("master") => index,
                        _ => 1_000_000 + index,
                    }
                }
                WorkloadKind::JobSet => {
                    if label(pod, JOBSET_NAME_LABEL) != Some(name) {
                        return None;
                    }
                    // The pods of an earlier JobSet of the same name carry its uid.
                    if let (Some(uid), Some(theirs)) = (uid, label(pod, JOBSET_UID_LABEL))
                        && uid != theirs
                    {
                        return None;
                    }
                    let replicated = label(pod, REPLICATED_JOB_LABEL).unwrap_or_default();
                    let position = at(workload, "/spec/replicatedJobs")
                        .and_then(Value::as_array)
                        .and_then(|jobs| {
                            jobs.iter()
                                .position(|job| str_at(job, "/name") == Some(replicated))
                        })
                        .unwrap_or(999);
                    jobset_order(pod, position as u64)
                }
                WorkloadKind::TrainJob => {
                    if label(pod, JOBSET_NAME_LABEL) != Some(name) {
                        return None;
                    }
                    // Its JobSet is created after it: an older pod is a leftover of an earlier one.
                    let created = time_at(workload, "/metadata/creationTimestamp");
                    let pod_created = time_at(pod, "/metadata/creationTimestamp");
                    if let (Some(created), Some(pod_created)) = (created, pod_created)
                        && pod_created < created
                    {
                        return None;
                    }
                    // The trainer's nodes hold the ranks; initialisers come after them.
                    let position =
                        u64::from(label(pod, REPLICATED_JOB_LABEL) != Some(TRAINER_REPLICATED_JOB));
                    jobset_order(pod, position)
                }
                WorkloadKind::RayCluster => {
                    if label(pod, "ray.io/cluster") != Some(name) || !owned_by_this_incarnation(pod)
                    {
                        return None;
                    }
                    match label(pod, "ray.io/node-type") {
                        Some("head") => 0,
                        _ => 1_000,
                    }
                }
                WorkloadKind::RayJob => {
                    if ray_cluster.is_some() && label(pod, "ray.io/cluster") == ray_cluster {
                        match label(pod, "ray.io/node-type") {
                            Some("head") => 0,
                            _ => 1_000,
                        }
                    } else if label(pod, "batch.kubernetes.io/job-name").or(label(pod, "job-name"))
                        == Some(name)
                    {
                        // The submitter: it runs the driver, whose output is the job's log.
                        2_000_000
                    } else {
                        return None;
                    }
                }
            };
            Some((order, pod_name, pod))
        })
        .collect();
    mine.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    mine.into_iter().map(|(_, _, pod)| pod).collect()
}

/// A pod whose run is over: it finished, or one of its containers terminated.
pub fn pod_ended(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), Some("Succeeded" | "Failed"))
        || containers(pod).any(|status| at(status, "/state/terminated").is_some())
}

/// A pod that has run something: it runs or finished, or one of its containers (init containers
/// too) runs, ran, or ran before a restart. A pod waiting to be scheduled, pulling its image or
/// creating its containers has not; nor has one the kubelet refused before starting it.
pub fn pod_started(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), Some("Running" | "Succeeded"))
        || ["/status/containerStatuses", "/status/initContainerStatuses"]
            .iter()
            .filter_map(|pointer| at(pod, pointer).and_then(Value::as_array))
            .flatten()
            .any(|status| {
                at(status, "/state/running").is_some()
                    || at(status, "/state/terminated").is_some()
                    || at(status, "/lastState/terminated").is_some()
                    || status
                        .get("restartCount")
                        .and_then(Value::as_u64)
                        .unwrap_or(0)
                        > 0
            })
}

pub(super) fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    at(pod, "/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The first terminated container with a failure, as (container, reason, exit code).
pub(super) fn failed_container(pod: &Value) -> Option<(String, String, i32)> {
    containers(pod).find_map(|status| {
        let terminated =
            at(status, "/state/terminated").or_else(|| at(status, "/lastState/terminated"))?;
        let code = terminated.get("exitCode").and_then(Value::as_i64)?;
        (code != 0).then(|| {
            (
                str_at(status, "/name").unwrap_or_default().to_string(),
                str_at(terminated, "/reason").unwrap_or("Error").to_string(),
                i32::try_from(code).unwrap_or(i32::MAX),
            )
        })
    })
}

/// A container waiting for a reason that will not pass: (reason, message).
pub(super) fn stuck_container(pod: &Value) -> Option<(String, String)> {
    containers(pod).find_map(|status| {
        let waiting = at(status, "/state/waiting")?;
        let reason = str_at(waiting, "/reason")?;
        STUCK_WAITING.contains(&reason).then(|| {
            (
                reason.to_string(),
                str_at(waiting, "/message").unwrap_or_default().to_string(),
            )
        })
    })
}

/// The rank of each pod of `pods_of`: its index.
pub fn ranked<'a>(pods: &[&'a Value]) -> Vec<(u32, &'a Value)> {
    pods.iter()
        .enumerate()
        .map(|(rank, pod)| (u32::try_from(rank).unwrap_or(u32::MAX), *pod))
        .collect()
}
