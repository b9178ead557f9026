//! Kubernetes workloads seen as runguard jobs: which pods belong to a workload and in which rank
//! order, what state the workload is in, and which statuses and events are evidence. Pure functions of
//! the objects as JSON, so they are tested on real-shaped fixtures without an API server.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::backend::JobSnapshot;
use crate::model::{JobSpec, JobState, RecoveryLimits};

/// The label a workload opts in with.
pub const ENABLED_LABEL: &str = "runguard.io/enabled";
/// The workload's own restart limit.
pub const MAX_RESTARTS_ANNOTATION: &str = "runguard.io/max-restarts";
/// The actions the workload's owner allows, comma-separated (narrows the configured whitelist).
pub const WHITELIST_ANNOTATION: &str = "runguard.io/whitelist";
/// How many times runguard has re-created the workload; a re-creation is the next attempt.
pub const RESTART_ANNOTATION: &str = "runguard.io/restart-count";
/// The node label a node-affinity exclusion uses.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Container waiting reasons that do not go away by waiting: the pod will not start as specified.
const STUCK_WAITING: [&str; 5] = [
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// The kinds of workload runguard watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    /// batch/v1 Job.
    Job,
    /// Kubeflow training operator's PyTorchJob (kubeflow.org/v1).
    PyTorchJob,
    /// KubeRay's RayJob (ray.io/v1).
    RayJob,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 3] = [Self::Job, Self::PyTorchJob, Self::RayJob];

    /// The name used in job ids and on the command line.
    pub fn short(self) -> &'static str {
        match self {
            Self::Job => "job",
            Self::PyTorchJob => "pytorchjob",
            Self::RayJob => "rayjob",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Self::Job => "Job",
            Self::PyTorchJob => "PyTorchJob",
            Self::RayJob => "RayJob",
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            Self::Job => "batch",
            Self::PyTorchJob => "kubeflow.org",
            Self::RayJob => "ray.io",
        }
    }

    pub fn version(self) -> &'static str {
        "v1"
    }

    pub fn plural(self) -> &'static str {
        match self {
            Self::Job => "jobs",
            Self::PyTorchJob => "pytorchjobs",
            Self::RayJob => "rayjobs",
        }
    }

    /// `kind`, its plural, or `plural.group` as kubectl accepts them.
    pub fn parse(name: &str) -> Option<Self> {
        let name = name.to_ascii_lowercase();
        Self::ALL.into_iter().find(|kind| {
            name == kind.short()
                || name == kind.plural()
                || name == format!("{}.{}", kind.short(), kind.group())
                || name == format!("{}.{}", kind.plural(), kind.group())
        })
    }

    /// The REST path of the collection in `namespace`, or of one object.
    pub fn path(self, namespace: &str, name: Option<&str>) -> String {
        let base = format!(
            "/apis/{}/{}/namespaces/{namespace}/{}",
            self.group(),
            self.version(),
            self.plural()
        );
        match name {
            Some(name) => format!("{base}/{name}"),
            None => base,
        }
    }

    /// The pod templates of a workload with their replica counts.
    pub fn templates(self, workload: &Value) -> Vec<(&Value, u32)> {
        let replicas = |spec: &Value| {
            spec.get("replicas")
                .and_then(Value::as_u64)
                .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        match self {
            Self::Job => {
                let parallelism = at(workload, "/spec/parallelism")
                    .and_then(Value::as_u64)
                    .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX));
                at(workload, "/spec/template")
                    .map(|template| vec![(template, parallelism)])
                    .unwrap_or_default()
            }
            Self::PyTorchJob => ["Master", "Worker"]
                .iter()
                .filter_map(|role| at(workload, &format!("/spec/pytorchReplicaSpecs/{role}")))
                .filter_map(|spec| spec.get("template").map(|t| (t, replicas(spec))))
                .collect(),
            Self::RayJob => {
                let mut templates = Vec::new();
                if let Some(head) = at(workload, "/spec/rayClusterSpec/headGroupSpec/template") {
                    templates.push((head, 1));
                }
                if let Some(groups) =
                    at(workload, "/spec/rayClusterSpec/workerGroupSpecs").and_then(Value::as_array)
                {
                    for group in groups {
                        if let Some(template) = group.get("template") {
                            templates.push((template, replicas(group)));
                        }
                    }
                }
                templates
            }
        }
    }

    /// The same, to change them (re-creation patches).
    pub fn templates_mut(self, workload: &mut Value) -> Vec<&mut Value> {
        match self {
            Self::Job => workload.pointer_mut("/spec/template").into_iter().collect(),
            Self::PyTorchJob => match workload
                .pointer_mut("/spec/pytorchReplicaSpecs")
                .and_then(Value::as_object_mut)
            {
                Some(specs) => specs
                    .values_mut()
                    .filter_map(|spec| spec.get_mut("template"))
                    .collect(),
                None => Vec::new(),
            },
            Self::RayJob => {
                let Some(cluster) = workload
                    .pointer_mut("/spec/rayClusterSpec")
                    .and_then(Value::as_object_mut)
                else {
                    return Vec::new();
                };
                let mut templates = Vec::new();
                for (key, value) in cluster.iter_mut() {
                    match key.as_str() {
                        "headGroupSpec" => templates.extend(value.get_mut("template")),
                        "workerGroupSpecs" => {
                            if let Some(groups) = value.as_array_mut() {
                                templates.extend(
                                    groups.iter_mut().filter_map(|g| g.get_mut("template")),
                                );
                            }
                        }
                        _ => {}
                    }
                }
                templates
            }
        }
    }
}

/// A workload's identity: `KIND/NAMESPACE/NAME` as a job id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadRef {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
}

impl WorkloadRef {
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.kind.short(), self.namespace, self.name)
    }

    /// `pytorchjob/ml/llama`; `pytorchjob/llama` takes `default_namespace`.
    pub fn parse(text: &str, default_namespace: &str) -> Option<Self> {
        let parts: Vec<&str> = text.split('/').collect();
        let (kind, namespace, name) = match parts.as_slice() {
            [kind, name] => (*kind, default_namespace, *name),
            [kind, namespace, name] => (*kind, *namespace, *name),
            _ => return None,
        };
        // DNS-1123 names: lowercase letters, digits, '-' and '.', starting and ending alphanumeric.
        let valid = |part: &str| {
            let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
            part.starts_with(alphanumeric)
                && part.ends_with(alphanumeric)
                && part
                    .chars()
                    .all(|c| alphanumeric(c) || c == '-' || c == '.')
        };
        if !valid(namespace) || !valid(name) {
            return None;
        }
        Some(Self {
            kind: WorkloadKind::parse(kind)?,
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    pub fn of(kind: WorkloadKind, workload: &Value) -> Option<Self> {
        Some(Self {
            kind,
            namespace: str_at(workload, "/metadata/namespace")
                .unwrap_or("default")
                .to_string(),
            name: str_at(workload, "/metadata/name")?.to_string(),
        })
    }
}

/// The value at a JSON pointer made of plain keys (`/metadata/name`). Unlike `Value::pointer` it
/// allocates nothing, which matters when a listing looks into every pod for every workload.
pub fn at<'a>(value: &'a Value, pointer: &str) -> Option<&'a Value> {
    pointer
        .split('/')
        .skip(1)
        .try_fold(value, |inner, key| match inner {
            Value::Object(map) => map.get(key),
            Value::Array(list) => key.parse::<usize>().ok().and_then(|i| list.get(i)),
            _ => None,
        })
}

pub fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    at(value, pointer).and_then(Value::as_str)
}

fn time_at(value: &Value, pointer: &str) -> Option<DateTime<Utc>> {
    str_at(value, pointer)
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .map(|time| time.with_timezone(&Utc))
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    at(object, "/metadata/labels")
        .and_then(|labels| labels.get(key))
        .and_then(Value::as_str)
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    at(object, "/metadata/annotations")
        .and_then(|annotations| annotations.get(key))
        .and_then(Value::as_str)
}

/// The workload opted in with its label.
pub fn enrolled(workload: &Value) -> bool {
    label(workload, ENABLED_LABEL) == Some("true")
}

/// Which re-creation of the workload this is (0 for the user's own).
pub fn restart_count(workload: &Value) -> u32 {
    annotation(workload, RESTART_ANNOTATION)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The pods of this incarnation of the workload, in rank order (rank = index).
/// The labels by which the operators name a pod's workload (or Ray cluster).
const OWNER_LABELS: [&str; 4] = [
    "training.kubeflow.org/job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
    "ray.io/cluster",
];

/// Pods by namespace and the workload (or Ray cluster) their labels name: a listing finds each
/// workload's pods without looking at every pod for every workload.
pub struct PodIndex<'a> {
    /// namespace → owner → pods.
    by_owner: HashMap<&'a str, HashMap<&'a str, Vec<&'a Value>>>,
}

impl<'a> PodIndex<'a> {
    pub fn new(pods: &'a [Value]) -> Self {
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

/// The Ready condition of a node: (status, reason, message).
pub fn node_readiness(node: &Value) -> Option<(String, String, String)> {
    at(node, "/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|condition| condition.get("type").and_then(Value::as_str) == Some("Ready"))
        .map(|condition| {
            let field = |key: &str| {
                condition
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            (field("status"), field("reason"), field("message"))
        })
}

fn node_named<'a>(nodes: &'a [Value], name: &str) -> Option<&'a Value> {
    nodes
        .iter()
        .find(|node| str_at(node, "/metadata/name") == Some(name))
}

/// A node that can take pods now: Ready, schedulable, and without a NoSchedule/NoExecute taint.
pub fn node_usable(node: &Value) -> bool {
    let ready = node_readiness(node).is_some_and(|(status, _, _)| status == "True");
    let cordoned = at(node, "/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let tainted = at(node, "/spec/taints")
        .and_then(Value::as_array)
        .is_some_and(|taints| {
            taints.iter().any(|taint| {
                matches!(
                    taint.get("effect").and_then(Value::as_str),
                    Some("NoSchedule" | "NoExecute")
                ) && !str_at(taint, "/key").is_some_and(|key| {
                    key.starts_with("nvidia.com/gpu") && str_at(taint, "/value").is_none()
                })
            })
        });
    ready && !cordoned && !tainted
}

fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    at(pod, "/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The first terminated container with a failure, as (container, reason, exit code).
fn failed_container(pod: &Value) -> Option<(String, String, i32)> {
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
fn stuck_container(pod: &Value) -> Option<(String, String)> {
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

/// The workload's own verdict: (state, its words, reason).
fn workload_state(kind: WorkloadKind, workload: &Value) -> (JobState, String, Option<String>) {
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

fn gpus_of_template(template: &Value) -> u32 {
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

fn command_of_template(template: &Value) -> Option<String> {
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
        if let Some((node, node_reason)) = lost_node {
            state = JobState::NodeFail;
            state_raw = "NodeNotReady".to_string();
            reason = Some(format!("node {node} is not ready ({node_reason})"));
        } else if let Some((waiting, _)) = pods.iter().find_map(|pod| stuck_container(pod)) {
            state = JobState::Failed;
            state_raw = waiting.clone();
            reason = Some(waiting);
        } else if state == JobState::Pending
            && pods.iter().any(|pod| {
                at(pod, "/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|conditions| {
                        conditions.iter().any(|c| {
                            str_at(c, "/type") == Some("PodScheduled")
                                && str_at(c, "/reason") == Some("Unschedulable")
                        })
                    })
            })
        {
            reason = Some("Unschedulable".to_string());
        }
    }
    let templates = kind.templates(workload);
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
        held: false,
        nodes: pod_nodes,
        gpus,
        submit_time: time_at(workload, "/metadata/creationTimestamp"),
        start_time,
        end_time,
        exit_code,
        restart_count: restart_count(workload),
        excluded_nodes: templates
            .first()
            .map(|(template, _)| excluded_nodes(template))
            .unwrap_or_default(),
        log_path,
        spec: JobSpec {
            name: reference.name.clone(),
            user,
            nodes: replicas,
            gpus_per_node: gpus_per_pod,
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
        tag: None,
    })
}

/// One line of evidence from the API (statuses, events, node conditions), in the form the signature
/// catalog reads: `kubernetes: TYPE REASON KIND/NAME: MESSAGE`. `key` says whether it was written already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceLine {
    pub key: String,
    pub text: String,
}

fn line(kind_type: &str, reason: &str, object: &str, message: &str) -> String {
    let message: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("kubernetes: {kind_type} {reason} {object}: {message}")
}

/// What the API says about this incarnation of the workload that the logs may not: failed
/// containers, stuck pulls, lost nodes, the workload's failure condition and the events about it.
pub fn evidence(
    kind: WorkloadKind,
    workload: &Value,
    pods: &[&Value],
    nodes: &[Value],
    events: &[Value],
) -> Vec<EvidenceLine> {
    let mut out = Vec::new();
    let name = str_at(workload, "/metadata/name").unwrap_or_default();
    let uid = str_at(workload, "/metadata/uid").unwrap_or_default();
    let created = time_at(workload, "/metadata/creationTimestamp");
    for pod in pods {
        let pod_name = str_at(pod, "/metadata/name").unwrap_or_default();
        let pod_uid = str_at(pod, "/metadata/uid").unwrap_or(pod_name);
        let on_node = str_at(pod, "/spec/nodeName")
            .map(|node| format!(" on node {node}"))
            .unwrap_or_default();
        for status in containers(pod) {
            let container = str_at(status, "/name").unwrap_or_default();
            let restarts = status
                .get("restartCount")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            for (which, terminated) in [
                ("state", at(status, "/state/terminated")),
                ("last", at(status, "/lastState/terminated")),
            ] {
                let Some(terminated) = terminated else {
                    continue;
                };
                let code = terminated
                    .get("exitCode")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if code == 0 {
                    continue;
                }
                let reason = str_at(terminated, "/reason").unwrap_or("Error");
                let finished = str_at(terminated, "/finishedAt").unwrap_or_default();
                out.push(EvidenceLine {
                    key: format!("terminated/{pod_uid}/{container}/{finished}/{which}{restarts}"),
                    text: line(
                        "Warning",
                        reason,
                        &format!("pod/{pod_name}"),
                        &format!(
                            "container {container} terminated with exit code {code}{on_node}{}",
                            str_at(terminated, "/message")
                                .map(|m| format!(": {m}"))
                                .unwrap_or_default()
                        ),
                    ),
                });
            }
            if let Some(waiting) = at(status, "/state/waiting")
                && let Some(reason) = str_at(waiting, "/reason")
                // A first ErrImagePull often passes (a registry hiccup); the back-off that follows
                // a repeated one does not.
                && STUCK_WAITING.contains(&reason)
            {
                out.push(EvidenceLine {
                    key: format!("waiting/{pod_uid}/{container}/{reason}"),
                    text: line(
                        "Warning",
                        reason,
                        &format!("pod/{pod_name}"),
                        str_at(waiting, "/message").unwrap_or(reason),
                    ),
                });
            }
        }
        if let Some(node_name) = str_at(pod, "/spec/nodeName")
            && let Some(node) = node_named(nodes, node_name)
            && let Some((status, reason, message)) = node_readiness(node)
            && status != "True"
        {
            out.push(EvidenceLine {
                key: format!("node/{node_name}/{status}/{reason}"),
                text: line(
                    "Warning",
                    "NodeNotReady",
                    &format!("node/{node_name}"),
                    &format!("Ready={status} ({reason}): {message}"),
                ),
            });
        }
    }
    // The nodes' health conditions set by node health tools (NVSentinel, gpud, the node problem
    // detector): any condition besides the kubelet's own that is True.
    let kubelet_conditions = [
        "Ready",
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "NetworkUnavailable",
    ];
    let pod_nodes: BTreeSet<&str> = pods
        .iter()
        .filter_map(|pod| str_at(pod, "/spec/nodeName"))
        .collect();
    for node_name in &pod_nodes {
        let Some(node) = node_named(nodes, node_name) else {
            continue;
        };
        for condition in at(node, "/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let condition_type = str_at(condition, "/type").unwrap_or_default();
            if kubelet_conditions.contains(&condition_type)
                || str_at(condition, "/status") != Some("True")
            {
                continue;
            }
            out.push(EvidenceLine {
                key: format!(
                    "condition/{node_name}/{condition_type}/{}",
                    str_at(condition, "/lastTransitionTime").unwrap_or_default()
                ),
                text: line(
                    "Warning",
                    condition_type,
                    &format!("node/{node_name}"),
                    str_at(condition, "/message")
                        .or(str_at(condition, "/reason"))
                        .unwrap_or(condition_type),
                ),
            });
        }
    }
    // The workload's own failure.
    let (state, state_raw, reason) = workload_state(kind, workload);
    if state.is_failure() {
        let message = match kind {
            WorkloadKind::RayJob => str_at(workload, "/status/message"),
            _ => at(workload, "/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| str_at(c, "/type") == Some("Failed"))
                .and_then(|c| str_at(c, "/message")),
        }
        .unwrap_or(&state_raw);
        let reason = reason.unwrap_or_else(|| state_raw.clone());
        out.push(EvidenceLine {
            key: format!("workload/{uid}/{reason}"),
            text: line(
                "Warning",
                &reason,
                &format!("{}/{name}", kind.short()),
                message,
            ),
        });
    }
    // Events about the workload, its pods and their nodes, since this incarnation was created.
    let pod_names: BTreeSet<&str> = pods
        .iter()
        .filter_map(|pod| str_at(pod, "/metadata/name"))
        .collect();
    let namespace = str_at(workload, "/metadata/namespace").unwrap_or("default");
    let mut about: Vec<(DateTime<Utc>, EvidenceLine)> = events
        .iter()
        .filter_map(|event| {
            let object_kind = str_at(event, "/involvedObject/kind").unwrap_or_default();
            let object_name = str_at(event, "/involvedObject/name").unwrap_or_default();
            let object_namespace = str_at(event, "/involvedObject/namespace").unwrap_or_default();
            let relevant = match object_kind {
                "Pod" => object_namespace == namespace && pod_names.contains(object_name),
                "Node" => pod_nodes.contains(object_name),
                other => {
                    other == kind.kind() && object_namespace == namespace && object_name == name
                }
            };
            if !relevant {
                return None;
            }
            let when = time_at(event, "/lastTimestamp")
                .or_else(|| time_at(event, "/eventTime"))
                .or_else(|| time_at(event, "/metadata/creationTimestamp"))?;
            if created.is_some_and(|created| when < created) {
                return None;
            }
            let event_type = str_at(event, "/type").unwrap_or("Normal");
            let reason = str_at(event, "/reason").unwrap_or("Event");
            let count = event.get("count").and_then(Value::as_u64).unwrap_or(1);
            Some((
                when,
                EvidenceLine {
                    key: format!(
                        "event/{}/{count}",
                        str_at(event, "/metadata/uid")
                            .or(str_at(event, "/metadata/name"))
                            .unwrap_or_default()
                    ),
                    text: line(
                        event_type,
                        reason,
                        &format!("{}/{object_name}", object_kind.to_ascii_lowercase()),
                        str_at(event, "/message").unwrap_or_default(),
                    ),
                },
            ))
        })
        .collect();
    about.sort_by_key(|(when, _)| *when);
    out.extend(about.into_iter().map(|(_, line)| line));
    out
}

/// The rank of each pod of `pods_of`: its index.
pub fn ranked<'a>(pods: &[&'a Value]) -> Vec<(u32, &'a Value)> {
    pods.iter()
        .enumerate()
        .map(|(rank, pod)| (u32::try_from(rank).unwrap_or(u32::MAX), *pod))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The objects of a fixture file of `tests/fixtures/kube/`.
    fn fixture(text: &str) -> Vec<Value> {
        let document: Value = serde_json::from_str(text).unwrap_or_default();
        match document.get("items").and_then(Value::as_array) {
            Some(items) => items.clone(),
            None => vec![document],
        }
    }

    fn split(objects: Vec<Value>) -> (Value, Vec<Value>) {
        let (workloads, pods): (Vec<Value>, Vec<Value>) = objects
            .into_iter()
            .partition(|object| object["kind"] != "Pod");
        (workloads[0].clone(), pods)
    }

    fn nodes() -> Vec<Value> {
        fixture(include_str!("../../../../tests/fixtures/kube/nodes.json"))
    }

    #[test]
    fn a_running_pytorchjob_is_its_pods_in_rank_order() {
        let (job, pods) = split(fixture(include_str!(
            "../../../../tests/fixtures/kube/pytorchjob-running.json"
        )));
        let mine = pods_of(WorkloadKind::PyTorchJob, &job, &PodIndex::new(&pods));
        let names: Vec<&str> = mine
            .iter()
            .filter_map(|pod| str_at(pod, "/metadata/name"))
            .collect();
        assert_eq!(
            names,
            [
                "llama-pretrain-master-0",
                "llama-pretrain-worker-0",
                "llama-pretrain-worker-1"
            ]
        );
        let snapshot = snapshot(WorkloadKind::PyTorchJob, &job, &mine, &nodes(), None, None)
            .unwrap_or_else(|| unreachable!("a named workload"));
        assert_eq!(snapshot.job_id, "pytorchjob/ml/llama-pretrain");
        assert_eq!(snapshot.state, JobState::Running);
        assert_eq!(snapshot.nodes, ["gpu-node-1", "gpu-node-2", "gpu-spot-1"]);
        assert_eq!(snapshot.spec.nodes, 3);
        assert_eq!(snapshot.spec.gpus_per_node, 8);
        assert_eq!(snapshot.gpus, 24);
        assert_eq!(snapshot.restart_count, 0);
        assert!(enrolled(&job));
    }

    #[test]
    fn a_pod_of_an_earlier_incarnation_with_the_same_name_is_not_this_one_s() {
        let (mut job, pods) = split(fixture(include_str!(
            "../../../../tests/fixtures/kube/pytorchjob-running.json"
        )));
        job["metadata"]["uid"] = Value::from("a-new-uid");
        assert!(pods_of(WorkloadKind::PyTorchJob, &job, &PodIndex::new(&pods)).is_empty());
    }

    #[test]
    fn an_oom_killed_worker_is_a_failure_with_its_evidence() {
        let (job, pods) = split(fixture(include_str!(
            "../../../../tests/fixtures/kube/pytorchjob-failed-oom.json"
        )));
        let mine = pods_of(WorkloadKind::PyTorchJob, &job, &PodIndex::new(&pods));
        let snapshot = snapshot(WorkloadKind::PyTorchJob, &job, &mine, &nodes(), None, None)
            .unwrap_or_else(|| unreachable!("a named workload"));
        assert_eq!(snapshot.state, JobState::Failed);
        assert_eq!(
            snapshot.nodes,
            ["gpu-node-5", "gpu-node-5"],
            "one entry per pod"
        );
        let lines: Vec<String> = evidence(WorkloadKind::PyTorchJob, &job, &mine, &nodes(), &[])
            .into_iter()
            .map(|line| line.text)
            .collect();
        assert!(
            lines.iter().any(|line| line.starts_with(
                "kubernetes: Warning OOMKilled pod/bert-finetune-worker-0: container pytorch terminated with exit code 137"
            )),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|line| line.contains(" pytorchjob/bert-finetune: ")),
            "{lines:#?}"
        );
    }

    #[test]
    fn an_image_pull_in_back_off_is_a_failure_and_a_job_s_own_pod_is_found() {
        let (job, pods) = split(fixture(include_str!(
            "../../../../tests/fixtures/kube/batch-job.json"
        )));
        let mine = pods_of(WorkloadKind::Job, &job, &PodIndex::new(&pods));
        assert_eq!(mine.len(), 1);
        let snapshot = snapshot(WorkloadKind::Job, &job, &mine, &nodes(), None, None)
            .unwrap_or_else(|| unreachable!("a named workload"));
        assert_eq!(snapshot.state, JobState::Failed);
        assert_eq!(snapshot.state_raw, "ImagePullBackOff");
    }

    #[test]
    fn a_rayjob_is_its_cluster_s_pods_head_first() {
        let objects = fixture(include_str!("../../../../tests/fixtures/kube/rayjob.json"));
        let job = objects
            .iter()
            .find(|object| object["kind"] == "RayJob")
            .cloned()
            .unwrap_or_default();
        let pods: Vec<Value> = objects
            .into_iter()
            .filter(|object| object["kind"] == "Pod")
            .collect();
        let mine = pods_of(WorkloadKind::RayJob, &job, &PodIndex::new(&pods));
        assert_eq!(
            mine.first().and_then(|pod| label(pod, "ray.io/node-type")),
            Some("head")
        );
        let snapshot = snapshot(WorkloadKind::RayJob, &job, &mine, &nodes(), None, None)
            .unwrap_or_else(|| unreachable!("a named workload"));
        assert_eq!(snapshot.state, JobState::Running);
    }

    #[test]
    fn only_ready_schedulable_untainted_nodes_are_usable() {
        let usable: Vec<String> = nodes()
            .iter()
            .filter(|node| node_usable(node))
            .filter_map(|node| str_at(node, "/metadata/name").map(str::to_string))
            .collect();
        assert_eq!(usable, ["gpu-node-1", "gpu-node-5", "gpu-spot-1"]);
    }

    #[test]
    fn references_parse_with_or_without_a_namespace() {
        let reference =
            WorkloadRef::parse("PyTorchJobs/llama", "ml").unwrap_or_else(|| unreachable!());
        assert_eq!(reference.id(), "pytorchjob/ml/llama");
        assert_eq!(
            WorkloadRef::parse("rayjob.ray.io/research/tune", "default").map(|r| r.id()),
            Some("rayjob/research/tune".to_string())
        );
        assert!(WorkloadRef::parse("deployment/web", "default").is_none());
        assert!(WorkloadRef::parse("job/../etc", "default").is_none());
    }
}
