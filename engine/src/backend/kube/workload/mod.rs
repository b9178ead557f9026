//! Kubernetes workloads seen as runguard jobs: which pods belong to a workload and in which rank
//! order, what state the workload is in, and which statuses and events are evidence. Pure functions of
//! the objects as JSON, so they are tested on real-shaped fixtures without an API server.

pub mod affinity;
pub mod events;
pub mod evidence;
mod kind;
mod nodes;
pub mod placement;
mod pods;
pub mod snapshot;
pub mod trainjob;

use chrono::{DateTime, Utc};
use serde_json::Value;

pub use events::EventIndex;
pub use evidence::{EvidenceLine, evidence};
pub use kind::WorkloadKind;
pub use nodes::node_readiness;
pub use pods::{PodIndex, labelled_for, pod_ended, pod_started, pods_of, ranked};
pub use snapshot::{excluded_nodes, exclusions_of, run_evidence, snapshot};

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
pub(super) const STUCK_WAITING: [&str; 5] = [
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

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

pub(super) fn time_at(value: &Value, pointer: &str) -> Option<DateTime<Utc>> {
    str_at(value, pointer)
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .map(|time| time.with_timezone(&Utc))
}

pub(super) fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    at(object, "/metadata/labels")
        .and_then(|labels| labels.get(key))
        .and_then(Value::as_str)
}

pub(super) fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    at(object, "/metadata/annotations")
        .and_then(|annotations| annotations.get(key))
        .and_then(Value::as_str)
}

/// Whether an owner of `object` is of kind `kind` (a TrainJob's JobSet).
pub fn owned_by(object: &Value, kind: &str) -> bool {
    at(object, "/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|owner| str_at(owner, "/kind") == Some(kind))
        })
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

#[cfg(test)]
mod tests;
